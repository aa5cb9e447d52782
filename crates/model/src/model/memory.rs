//! Memory said before it is spent: what a model's header says (its config, tokenizer,
//! fingerprint and each tensor's stored size, read without reading a weight:
//! `ModelHeader`), what a run of N tokens on the CPU will hold (`estimate`: weights, KV cache,
//! activations, what an analysis keeps), what this machine has free (`available`: MemAvailable,
//! or the cgroup's room when smaller), and the one refusal that names both (`check_fits`).
//!
//! Each term is stated from the code that spends it, so a change there should change it here:
//! - weights: as the loader keeps them (`model::weights`, `model::linear`): every matrix in its
//!   stored form, read in place from the file's map (the file's pages are the one copy); the
//!   vectors (norms, biases) as f32 copies beside their mapped bytes. (Two small exceptions
//!   count at their stored size only: GPT-2's learned positions and, from Hugging Face, its
//!   Conv1D weights, which are transposed f32 copies.)
//! - KV cache: `attention::kv_cache` holds f32 keys and values of every layer, all positions;
//! - activations: one layer at a time (`model::block`): the residual, its norm, Q/K/V (and
//!   their RoPE'd copies), the attention output and its transposed copy, or the MLP's gate, up
//!   and product rows (2.5 times over: the measured growth of peak RSS), whichever is
//!   larger; the dense CPU kernel (`attention::cpu::dense`) is
//!   tiled and holds no T x T block, but the explicit path (`attention::attend`: soft mode,
//!   soft-capped models, GPUs) holds each head's T x T scores about three times over, and soft
//!   mode's plan (`attention::soft`) four T x T tensors more; plus the logits of the scored rows
//!   and their log-softmax;
//! - kept: an analysis keeps every layer's routing of every token (scores, memberships and
//!   routing vectors, f32, `analysis::analyze_tokens_keeping`), once per analysis it holds, and
//!   the kept passes its caller allows (`analysis::kept`).

use crate::error::{Error, Result};
use crate::model::gguf::GgufFile;
use crate::model::tokenizer::Tokenizer;
use crate::model::weights::{SafeTensorsDir, WeightSource};
use crate::model::{family, hf, hub, load, ModelConfig};
use std::path::{Path, PathBuf};

/// What the process needs besides the terms below: the binary and its libraries, the
/// allocator's slack (`RUNTIME_BYTES`), and the tokenizer's tables, which grow with the
/// vocabulary (`TOKENIZER_BYTES_PER_TOKEN`). Measured as the peak RSS of `focus-lens info`,
/// which holds the header and the tokenizer only: 122 MB for SmolLM2 (49,152 tokens), 261 MB for
/// Qwen2.5 (151,936), 664 MB for Gemma 3 (262,144, SentencePiece) (docs/RESULTS.md, "Memory").
pub const RUNTIME_BYTES: u64 = 64 << 20;
pub const TOKENIZER_BYTES_PER_TOKEN: u64 = 2500;

/// One tensor as stored, and as kept in memory.
#[derive(Debug, Clone)]
pub struct StoredTensor {
    pub name: String,
    pub shape: Vec<usize>,
    /// The stored type's name (GGUF's `Q4_K`, safetensors' `BF16`).
    pub dtype: String,
    pub stored_bytes: u64,
    /// What the loader keeps of it: the stored bytes, or f32 for 1-D tensors.
    pub resident_bytes: u64,
}

/// Everything known about a model without reading its weights.
pub struct ModelHeader {
    pub path: PathBuf,
    /// "gguf" or "safetensors"
    pub format: &'static str,
    pub config: ModelConfig,
    pub tokenizer: Option<Tokenizer>,
    pub fingerprint: String,
    pub tensors: Vec<StoredTensor>,
    /// The bytes of the model's files.
    pub file_bytes: u64,
}

/// Resident bytes of a tensor of `elems` elements stored in `stored` bytes, as the loader keeps
/// it on the CPU: a matrix in its stored form, read in place from the file's map (its pages are
/// the one copy); a vector (norms, biases) as an f32 copy beside its mapped bytes.
fn resident(shape: &[usize], elems: u64, stored: u64) -> u64 {
    if shape.len() == 2 {
        stored
    } else {
        4 * elems + stored
    }
}

impl ModelHeader {
    /// Reads `path` (a .gguf file, a Hugging Face directory or a repo id in the local hub cache)
    /// as `Model::load` does up to the weights, which it leaves unread.
    pub fn open(path: &Path) -> Result<Self> {
        let resolved = hub::resolve(path)?;
        let path = resolved.as_path();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            return Self::open_hf(path);
        }
        let g = GgufFile::open(path)?;
        let arch = g.str("general.architecture")?;
        let (fam, gf) = family::by_gguf_arch(arch)
            .ok_or_else(|| Error::Unsupported(format!("GGUF architecture {arch:?} (supported: {})", family::supported(true))))?;
        let config = load::config_from_gguf(&g, fam, gf)?;
        let tokenizer = Some(Tokenizer::from_gguf(&g)?);
        let tensors = g
            .tensors
            .values()
            .map(|t| {
                let elems: u64 = t.shape.iter().map(|&d| d as u64).product();
                StoredTensor { name: t.name.clone(), shape: t.shape.clone(), dtype: format!("{:?}", t.dtype), stored_bytes: t.len as u64, resident_bytes: resident(&t.shape, elems, t.len as u64) }
            })
            .collect();
        let src = WeightSource::Gguf(g);
        Ok(ModelHeader { path: path.to_path_buf(), format: "gguf", config, tokenizer, fingerprint: src.fingerprint(), tensors, file_bytes: meta.len() })
    }

    fn open_hf(dir: &Path) -> Result<Self> {
        let c = hf::HfConfig::open(&dir.join("config.json"))?;
        let ty = c.model_type();
        let (fam, h) = family::by_model_type(&ty)
            .ok_or_else(|| Error::Unsupported(format!("{}: model_type {ty:?} (supported: {})", c.path.display(), family::supported(false))))?;
        let config = load::config_from_hf(&c, fam, h)?;
        // Opening the directory checks its files and index as a load does; the sizes come from
        // the headers read below (the same files).
        let src = WeightSource::SafeTensors(SafeTensorsDir::open(dir)?);
        let mut tensors = Vec::new();
        let mut file_bytes = 0;
        for file in safetensors_files(dir)? {
            file_bytes += std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?.len();
            tensors.extend(safetensors_header(&file)?);
        }
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() { Some(Tokenizer::from_file(&tok_path)?) } else { None };
        Ok(ModelHeader { path: dir.to_path_buf(), format: "safetensors", config, tokenizer, fingerprint: src.fingerprint(), tensors, file_bytes })
    }

    /// The bytes the weights will hold in memory.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.resident_bytes).sum()
    }

    /// `estimate` for this model.
    pub fn estimate(&self, w: &Workload) -> Estimate {
        estimate(&Shape::of(&self.config), self.weight_bytes(), w)
    }
}

/// The `*.safetensors` files a directory's checkpoint is made of: those its index names, else
/// every one in it (as `SafeTensorsDir::open` reads them).
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    let mut files: Vec<PathBuf> = if index.exists() {
        let text = crate::io::read_capped_string(&index, crate::io::MAX_JSON_BYTES, "safetensors index")?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(&index, format!("invalid JSON: {e}")))?;
        let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::bad_file(&index, "no weight_map object"))?;
        let mut names: Vec<&str> = map.values().filter_map(|f| f.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(|n| dir.join(n)).collect()
    } else {
        std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect()
    };
    files.sort();
    Ok(files)
}

/// The tensors a safetensors file's header lists (8 bytes of header length, then JSON), read
/// without touching the data.
fn safetensors_header(path: &Path) -> Result<Vec<StoredTensor>> {
    use std::io::Read;
    let mut f = crate::io::open_input(path, u64::MAX, "safetensors")?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| Error::io(path, e))?;
    let n = u64::from_le_bytes(len);
    // `SafeTensorsDir::open` has already checked the header; its length is bounded there.
    if n > 100 << 20 {
        return Err(Error::bad_file(path, format!("safetensors header of {n} bytes")));
    }
    let mut buf = vec![0u8; n as usize];
    f.read_exact(&mut buf).map_err(|e| Error::io(path, e))?;
    let v: serde_json::Value = serde_json::from_slice(&buf).map_err(|e| Error::bad_file(path, format!("invalid safetensors header: {e}")))?;
    let obj = v.as_object().ok_or_else(|| Error::bad_file(path, "safetensors header is not a JSON object"))?;
    let mut out = Vec::new();
    for (name, t) in obj.iter().filter(|(k, _)| *k != "__metadata__") {
        let bad = || Error::bad_file(path, format!("safetensors header entry {name:?} lacks dtype, shape or data_offsets"));
        let dtype = t.get("dtype").and_then(|d| d.as_str()).ok_or_else(bad)?.to_string();
        let shape: Vec<usize> = t.get("shape").and_then(|s| s.as_array()).ok_or_else(bad)?.iter().map(|d| d.as_u64().map(|d| d as usize)).collect::<Option<_>>().ok_or_else(bad)?;
        let off = t.get("data_offsets").and_then(|o| o.as_array()).ok_or_else(bad)?;
        let (a, b) = match (off.first().and_then(|x| x.as_u64()), off.get(1).and_then(|x| x.as_u64())) {
            (Some(a), Some(b)) if b >= a => (a, b),
            _ => return Err(bad()),
        };
        let elems: u64 = shape.iter().map(|&d| d as u64).product();
        let stored = b - a;
        let kept = resident(&shape, elems, stored);
        out.push(StoredTensor { name: name.clone(), shape, dtype, stored_bytes: stored, resident_bytes: kept });
    }
    Ok(out)
}

/// What a run does, in the terms memory depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// Tokens of one pass (an analysis segment, a perplexity chunk, a generation's prompt):
    /// activations scale with it.
    pub pass_tokens: usize,
    /// Rows of logits a pass makes (perplexity scores the second half of a chunk).
    pub logits_rows: usize,
    /// Tokens a KV cache holds (generation: prompt and new tokens; 0 for passes without one).
    pub cache_tokens: usize,
    /// Soft mode, which materialises T x T plans and scores (dense and top-k modes do not).
    pub soft: bool,
    /// An analysis: the routing it keeps of every token.
    pub routing: Option<RoutingKept>,
    /// Bytes of kept passes the caller allows (the GUI's budget; 0 for the CLI).
    pub kept_pass_bytes: u64,
}

/// The routing an analysis keeps: `groups` scores and memberships and a `d_g` routing vector
/// per token of the text, per layer, in each of `copies` analyses (the CLI's `analyze` holds
/// the adapter's and its untrained twin's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutingKept {
    pub tokens: usize,
    pub groups: usize,
    pub d_g: usize,
    pub copies: usize,
}

impl RoutingKept {
    /// The shipped adapters' routing shape (8 groups, d_g 16): the estimate's assumption when
    /// no adapter is named yet.
    pub fn shipped(tokens: usize, copies: usize) -> Self {
        RoutingKept { tokens, groups: 8, d_g: 16, copies }
    }

    /// The routing shape of an adapter directory's `adapter_config.json` (groups, d_g).
    pub fn of_adapter(dir: &Path, tokens: usize, copies: usize) -> Result<Self> {
        let path = dir.join("adapter_config.json");
        let text = crate::io::read_capped_string(&path, crate::io::MAX_JSON_BYTES, "adapter_config.json")?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(&path, format!("invalid JSON: {e}")))?;
        let n = |k: &str| v.get(k).and_then(|x| x.as_u64()).map(|x| x as usize).ok_or_else(|| Error::bad_file(&path, format!("no whole number {k:?}")));
        Ok(RoutingKept { tokens, groups: n("groups")?, d_g: n("d_g")?, copies })
    }
}

impl Workload {
    /// An analysis of `tokens` tokens in segments of `segment`.
    pub fn analysis(tokens: usize, segment: usize, soft: bool, routing: RoutingKept, kept_pass_bytes: u64) -> Self {
        Workload { pass_tokens: tokens.min(segment).max(1), logits_rows: 1, cache_tokens: 0, soft, routing: Some(routing), kept_pass_bytes }
    }
    /// Perplexity in chunks of `ctx` (the second half of each scored).
    pub fn perplexity(ctx: usize, soft: bool) -> Self {
        Workload { pass_tokens: ctx, logits_rows: ctx - ctx / 2, cache_tokens: 0, soft, routing: None, kept_pass_bytes: 0 }
    }
    /// Generation of `new` tokens after a prompt of `prompt` tokens. Its longest pass is the
    /// whole sequence (a generator that cannot cache routing reruns it for every token).
    pub fn generation(prompt: usize, new: usize, soft: bool) -> Self {
        Workload { pass_tokens: (prompt + new).max(1), logits_rows: 1, cache_tokens: prompt + new, soft, routing: None, kept_pass_bytes: 0 }
    }
}

/// The estimate, term by term, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub weights: u64,
    pub kv_cache: u64,
    pub activations: u64,
    pub kept: u64,
    pub runtime: u64,
}

impl Estimate {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations + self.kept + self.runtime
    }

    /// (name, bytes, what it is) per term, for a table.
    pub fn rows(&self) -> [(&'static str, u64, &'static str); 5] {
        [
            ("weights", self.weights, "every matrix at its stored size (mapped), vectors as f32"),
            ("KV cache", self.kv_cache, "f32 keys and values of every layer"),
            ("activations", self.activations, "the widest layer at one pass's tokens, and its logits"),
            ("kept", self.kept, "an analysis's routing of every token, and kept passes"),
            ("runtime", self.runtime, "binary, allocator, the tokenizer's tables"),
        ]
    }
}

/// The numbers of a model's shape the estimate reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab: usize,
    /// Soft-capped attention logits (Gemma 2) take the explicit attention path.
    pub attn_softcap: bool,
}

impl Shape {
    pub fn of(c: &ModelConfig) -> Self {
        Shape { n_layers: c.n_layers, d_model: c.d_model, n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: c.head_dim, ffn_dim: c.ffn_dim, vocab: c.vocab, attn_softcap: c.attn_softcap.is_some() }
    }
}

/// Bytes one layer's activations hold at one pass's tokens (f32), and the logits.
pub fn activation_bytes(s: &Shape, w: &Workload) -> u64 {
    let t = w.pass_tokens as u64;
    let (d, ffn, q_w, kv_w) = (s.d_model as u64, s.ffn_dim as u64, (s.n_heads * s.head_dim) as u64, (s.n_kv_heads * s.head_dim) as u64);
    // Attention: residual and its norm; Q and K with their RoPE'd copies, V; the kernel's
    // transposed keys (padded to its 64-key tiles); the output and its transposed copy.
    let attn = t * (2 * d + 4 * q_w + 3 * kv_w) + kv_w * t.div_ceil(64) * 64;
    // The explicit path: each head's T x T scores, their scaled/gated copy and the softmax.
    let explicit = w.soft || s.attn_softcap;
    let scores = if explicit { 3 * s.n_heads as u64 * t * t } else { 0 };
    // Soft mode's plan: affinity, gate, ones and the selected plan (T x T each), the local mask.
    let plan = if w.soft { 5 * t * t } else { 0 };
    // MLP: by the code's count three rows of each width are live (the residual, its norm and
    // the down product; gate, up and their product). Peak RSS grows faster: `analyze` took 49 kB
    // a token on SmolLM2 and 56 kB on Gemma 3, 1.75-1.95 times that count (freed blocks the
    // allocator has not reused yet, spread over the worker threads' arenas), and Gemma 3's peak
    // over two segments sat 40 MB above the line through one (docs/RESULTS.md, "Memory"): the
    // term is 2.5 times the count.
    let mlp = t * (3 * d + 3 * ffn) * 5 / 2;
    // Logits of the scored rows and their log-softmax.
    let logits = 2 * w.logits_rows as u64 * s.vocab as u64;
    4 * ((attn + scores + plan).max(mlp) + logits)
}

/// What a run of `w` on the CPU will hold, for a model of shape `s` whose weights hold
/// `weight_bytes` (`ModelHeader::weight_bytes`).
pub fn estimate(s: &Shape, weight_bytes: u64, w: &Workload) -> Estimate {
    let kv_cache = 4 * 2 * (s.n_layers * s.n_kv_heads * s.head_dim) as u64 * w.cache_tokens as u64;
    let routing = w.routing.map_or(0, |r| 4 * (s.n_layers * r.tokens * (2 * r.groups + r.d_g) * r.copies) as u64);
    Estimate { weights: weight_bytes, kv_cache, activations: activation_bytes(s, w), kept: routing + w.kept_pass_bytes, runtime: RUNTIME_BYTES + TOKENIZER_BYTES_PER_TOKEN * s.vocab as u64 }
}

/// Memory this process may still use, and where the figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Available {
    pub bytes: u64,
    pub source: String,
}

/// MemAvailable from /proc/meminfo, or the cgroup's limit minus its usage when that is smaller
/// (a container's limit is what kills it). `None` where neither can be read (not Linux).
/// A user's own cap, `FOCUS_LENS_MEMORY` (bytes, or with a unit: `6G`, `512M`), takes the place of
/// both when it is smaller (to leave room for other programs).
pub fn available() -> Option<Available> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| meminfo_available(&s));
    let cgroup = cgroup_room();
    let system = match (meminfo, cgroup) {
        (Some(m), Some(c)) if c < m => Some(Available { bytes: c, source: "the cgroup's memory limit less its usage".into() }),
        (Some(m), _) => Some(Available { bytes: m, source: "MemAvailable in /proc/meminfo".into() }),
        (None, Some(c)) => Some(Available { bytes: c, source: "the cgroup's memory limit less its usage".into() }),
        (None, None) => None,
    };
    let cap = std::env::var(MEMORY_VAR).ok().and_then(|v| parse_bytes(&v)).map(|bytes| Available { bytes, source: MEMORY_VAR.to_string() });
    match (system, cap) {
        (Some(s), Some(c)) if s.bytes <= c.bytes => Some(s),
        (s, c) => c.or(s),
    }
}

/// The variable that caps the memory Focus Lens plans for (`available`).
pub const MEMORY_VAR: &str = "FOCUS_LENS_MEMORY";

/// "123", "6G", "512M", "64k" (decimal units; a trailing B allowed) as bytes.
fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim().trim_end_matches(['B', 'b']);
    let (num, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1e3),
        'm' | 'M' => (&v[..v.len() - 1], 1e6),
        'g' | 'G' => (&v[..v.len() - 1], 1e9),
        't' | 'T' => (&v[..v.len() - 1], 1e12),
        _ => (v, 1.0),
    };
    let x: f64 = num.trim().parse().ok()?;
    (x.is_finite() && x >= 0.0).then_some((x * mult) as u64)
}

/// MemAvailable (kB) of a /proc/meminfo text, in bytes.
fn meminfo_available(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The cgroup's limit less its usage (v2, then v1); `None` without a limit.
fn cgroup_room() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    for (limit, usage) in [("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"), ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")] {
        // v2 writes "max" for no limit (not a number); v1 a huge number.
        if let Some(l) = read(limit).filter(|&l| l < 1 << 60) {
            return Some(l.saturating_sub(read(usage).unwrap_or(0)));
        }
    }
    None
}

/// Bytes as "1.23 GB" (decimal, as file sizes are shown).
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}

/// One clear refusal when `e` exceeds what is `avail`able: it names what was asked for, both
/// figures and where the second comes from. Without a figure for the available memory, the
/// run goes ahead.
pub fn check_fits(what: &str, e: &Estimate, avail: Option<&Available>) -> Result<()> {
    match avail {
        Some(a) if e.total() > a.bytes => Err(Error::OutOfMemory(format!(
            "{what} needs about {} (weights {}, KV cache {}, activations {}, kept {}), but only {} is available ({}); `focus-lens info MODEL --tokens N` shows the estimate",
            human(e.total()),
            human(e.weights),
            human(e.kv_cache),
            human(e.activations),
            human(e.kept),
            human(a.bytes),
            a.source
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B's shape.
    const LLAMA_8B: Shape = Shape { n_layers: 32, d_model: 4096, n_heads: 32, n_kv_heads: 8, head_dim: 128, ffn_dim: 14336, vocab: 128256, attn_softcap: false };

    /// A matrix is its stored bytes; a vector an f32 copy beside them.
    #[test]
    fn weights_as_the_loader_keeps_them() {
        assert_eq!(resident(&[4096, 4096], 4096 * 4096, 9_437_184), 9_437_184);
        assert_eq!(resident(&[4096], 4096, 8192), 4 * 4096 + 8192);
    }

    /// The terms by hand for the 8B shape at 2,048 tokens: the KV cache of a generation, the
    /// MLP as the widest layer in dense mode, soft mode's T x T blocks, an analysis's routing.
    #[test]
    fn terms_by_hand() {
        let s = LLAMA_8B;
        let g = estimate(&s, 0, &Workload::generation(2000, 48, false));
        assert_eq!(g.kv_cache, 4 * 2 * 32 * 8 * 128 * 2048);
        let dense = estimate(&s, 0, &Workload::perplexity(2048, false));
        let mlp = 2048 * (3 * 4096 + 3 * 14336) * 5 / 2;
        assert_eq!(dense.activations, 4 * (mlp + 2 * 1024 * 128256));
        let soft = estimate(&s, 0, &Workload::perplexity(2048, true));
        let attn = 2048 * (2 * 4096 + 4 * 4096 + 3 * 1024) + 1024 * 2048 + 3 * 32 * 2048 * 2048 + 5 * 2048 * 2048;
        assert_eq!(soft.activations, 4 * (attn + 2 * 1024 * 128256));
        let r = RoutingKept { tokens: 10_000, groups: 8, d_g: 16, copies: 2 };
        let a = estimate(&s, 7, &Workload::analysis(10_000, 2048, false, r, 0));
        assert_eq!(a.kept, 4 * 32 * 10_000 * (2 * 8 + 16) * 2);
        assert_eq!((a.kv_cache, a.weights), (0, 7));
        assert_eq!(a.runtime, RUNTIME_BYTES + 2500 * 128256);
        assert_eq!(a.total(), 7 + a.activations + a.kept + a.runtime);
    }

    /// A refusal names what was asked, both figures and the source of the second.
    #[test]
    fn refusal_names_both_figures() {
        let e = Estimate { weights: 4_900_000_000, kv_cache: 0, activations: 400_000_000, kept: 0, runtime: RUNTIME_BYTES };
        let a = Available { bytes: 3_000_000_000, source: "MemAvailable in /proc/meminfo".into() };
        let err = check_fits("analyze over 2048 tokens", &e, Some(&a)).unwrap_err().to_string();
        assert!(err.contains(&human(e.total())), "{err}");
        assert!(err.contains("3.00 GB"), "{err}");
        assert!(err.contains("MemAvailable"), "{err}");
        assert!(err.contains("analyze over 2048 tokens"), "{err}");
        assert!(check_fits("x", &e, Some(&Available { bytes: e.total(), source: String::new() })).is_ok());
        assert!(check_fits("x", &e, None).is_ok());
    }

    #[test]
    fn byte_sizes_parsed() {
        assert_eq!(parse_bytes("123"), Some(123));
        assert_eq!(parse_bytes("6G"), Some(6_000_000_000));
        assert_eq!(parse_bytes("1.5 GB"), Some(1_500_000_000));
        assert_eq!(parse_bytes("512m"), Some(512_000_000));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("-1G"), None);
    }

    #[test]
    fn meminfo_parsed() {
        let s = "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   21494536 kB\n";
        assert_eq!(meminfo_available(s), Some(21494536 * 1024));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }
}
