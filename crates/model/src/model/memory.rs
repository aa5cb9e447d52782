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
//!   soft-capped models, GPUs) holds each head's T x T scores about three times over (past
//!   `attention::CHUNK_SCORES` scores, a block of query rows at a time: `explicit_scores`), and
//!   soft mode's gate five of its rows x T more (`attention::soft::SoftGate`); plus the logits
//!   of the scored rows and their log-softmax;
//! - kept: an analysis keeps every layer's routing of every token (scores, memberships and
//!   routing vectors, f32, `analysis::analyze_tokens_keeping`), once per analysis it holds, and
//!   the kept passes its caller allows (`analysis::kept`).
//!
//! A run on a GPU (`device_estimate`) holds in device memory, term by term as its code spends it:
//! - weights: as `load::load_weights` uploads them: every matrix a bf16 tensor
//!   (`Model::weight_dtype`; `weights::dense_copy` converts whatever the file stores, GGUF blocks
//!   included: 2 bytes a parameter), the embedding and the LM head among them (one tensor when
//!   tied; rows are gathered on the device), the vectors f32 (`WeightSource::tensor`); nothing
//!   stays on the host. GPT-2's learned positions and its Hugging Face Conv1D weights are f32.
//! - KV cache: `attention::kv_cache::DeviceKv`, f32, its capacity a power of two;
//! - activations: one layer at a time (`Decoder::run`), the larger of its attention (the causal
//!   mask is made on the device for every pass; the explicit path's T x T scores where the flash
//!   kernels do not apply) and its MLP (f32 rows, bf16 copies into the products), the adapters'
//!   routers, the logits; calibrated on the 8B's measured peak (`device_activation_bytes`);
//! - context: the CUDA context, cuBLAS and its workspace (`CUDA_CONTEXT_BYTES`, measured).

use crate::error::{Error, Result};
use crate::model::config::{MlpKind, Positions};
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
    /// The family stores its projections as Conv1D (GPT-2 from Hugging Face): the loader keeps
    /// them as transposed f32 copies, on a GPU too.
    pub conv1d: bool,
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
        Ok(ModelHeader { path: path.to_path_buf(), format: "gguf", config, tokenizer, fingerprint: src.fingerprint(), tensors, file_bytes: meta.len(), conv1d: gf.names.conv1d })
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
        Ok(ModelHeader { path: dir.to_path_buf(), format: "safetensors", config, tokenizer, fingerprint: src.fingerprint(), tensors, file_bytes, conv1d: h.names.conv1d })
    }

    /// The bytes the weights will hold in memory.
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.resident_bytes).sum()
    }

    /// `estimate` for this model.
    pub fn estimate(&self, w: &Workload) -> Estimate {
        estimate(&Shape::of(&self.config), self.weight_bytes(), w)
    }

    /// The bytes the weights will hold in a GPU's memory, as `load::load_weights` uploads them
    /// (`Model::weight_dtype`: bf16): the decoder's matrices at 2 bytes a parameter whatever the
    /// file stores (`weights::dense_copy` converts GGUF blocks and f16/f32 alike), or 4 for
    /// GPT-2's Hugging Face Conv1D weights (f32 copies); its learned positions f32; every vector
    /// (norms, biases) f32. Tensors the decoder does not read (a tied checkpoint's stored LM
    /// head, a vision tower's matrices) never reach the device; such a tower's vectors are
    /// counted all the same (small beside the matrices).
    pub fn device_weight_bytes(&self) -> u64 {
        let c = &self.config;
        let (blocks, vocab) = matrix_params(&Shape::of(c));
        let positions = if matches!(c.positions, Positions::Learned) { 4 * (c.context * c.d_model) as u64 } else { 0 };
        let vectors: u64 = self.tensors.iter().filter(|t| t.shape.len() == 1).map(|t| 4 * t.shape[0] as u64).sum();
        (if self.conv1d { 4 } else { 2 }) * blocks + 2 * vocab + positions + vectors
    }

    /// `device_estimate` for this model.
    pub fn device_estimate(&self, w: &Workload) -> DeviceEstimate {
        device_estimate(&Shape::of(&self.config), self.device_weight_bytes(), w)
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
    /// Perplexity in chunks of `ctx` (the second half of each scored, `SCORE_ROWS` rows of
    /// logits at a time: `eval::ppl`).
    pub fn perplexity(ctx: usize, soft: bool) -> Self {
        Workload { pass_tokens: ctx, logits_rows: (ctx - ctx / 2).min(SCORE_ROWS), cache_tokens: 0, soft, routing: None, kept_pass_bytes: 0 }
    }
    /// Generation of `new` tokens after a prompt of `prompt` tokens. Its longest pass is the
    /// whole sequence (a generator that cannot cache routing reruns it for every token).
    pub fn generation(prompt: usize, new: usize, soft: bool) -> Self {
        Workload { pass_tokens: (prompt + new).max(1), logits_rows: 1, cache_tokens: prompt + new, soft, routing: None, kept_pass_bytes: 0 }
    }
}

/// Rows of logits perplexity makes at a time (`eval::ppl` scores a chunk's second half in
/// slices of this many): at ctx 32K on Qwen2.5 (vocabulary 151,936) 1.2 GB of logits and their
/// log-softmax, not 19.9 GB.
pub const SCORE_ROWS: usize = 1024;

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
    /// The sliding layers' window (a pass longer than it takes the explicit path on a GPU).
    pub window: Option<usize>,
    /// The MLP has a gate (SwiGLU, GeGLU): three matrices, not two.
    pub gated: bool,
    /// The LM head is the embedding (one matrix).
    pub tied: bool,
}

impl Shape {
    pub fn of(c: &ModelConfig) -> Self {
        Shape {
            n_layers: c.n_layers,
            d_model: c.d_model,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            ffn_dim: c.ffn_dim,
            vocab: c.vocab,
            attn_softcap: c.attn_softcap.is_some(),
            window: c.sliding.as_ref().map(|s| s.window),
            gated: !matches!(c.mlp, MlpKind::GeluTanh),
            tied: c.tied_embeddings,
        }
    }
}

/// Parameters of the matrices the decoder holds (`load::load_weights`): the blocks' (Q, K, V,
/// O, the MLP's gate, up and down; fused ones split by rows share their tensor), then the
/// embedding's and the LM head's (one matrix when tied).
pub fn matrix_params(s: &Shape) -> (u64, u64) {
    let (d, ffn, q_w, kv_w) = (s.d_model as u64, s.ffn_dim as u64, (s.n_heads * s.head_dim) as u64, (s.n_kv_heads * s.head_dim) as u64);
    let mlp = if s.gated { 3 } else { 2 };
    let block = d * (q_w + 2 * kv_w) + q_w * d + mlp * ffn * d;
    (s.n_layers as u64 * block, (if s.tied { 1 } else { 2 }) * s.vocab as u64 * d)
}

/// Scores the explicit attention path holds at once for `heads` heads over `t` tokens: H x T x
/// T, or past `attention::CHUNK_SCORES` one block of query rows (`attention::query_rows`)
/// against the keys, whatever T.
pub fn explicit_scores(heads: usize, t: usize) -> u64 {
    (heads * crate::attention::query_rows(heads, t) * t) as u64
}

/// Bytes one layer's activations hold at one pass's tokens (f32), and the logits.
pub fn activation_bytes(s: &Shape, w: &Workload) -> u64 {
    let t = w.pass_tokens as u64;
    let (d, ffn, q_w, kv_w) = (s.d_model as u64, s.ffn_dim as u64, (s.n_heads * s.head_dim) as u64, (s.n_kv_heads * s.head_dim) as u64);
    // Attention: residual and its norm; Q and K with their RoPE'd copies, V; the kernel's
    // transposed keys (padded to its 64-key tiles); the output and its transposed copy.
    let attn = t * (2 * d + 4 * q_w + 3 * kv_w) + kv_w * t.div_ceil(64) * 64;
    // The explicit path: each head's scores, their scaled/gated copy and the softmax.
    let explicit = w.soft || s.attn_softcap;
    // In blocks (past `attention::CHUNK_SCORES`), each block's causal mask (its rows x T).
    let rows = crate::attention::query_rows(s.n_heads, w.pass_tokens) as u64;
    let scores = if explicit { 3 * explicit_scores(s.n_heads, w.pass_tokens) + if rows < t { rows * t } else { 0 } } else { 0 };
    // Soft mode's gate (`attention::soft::SoftGate`), made for the block of rows attended:
    // affinity, gate, ones and the selected gate, the local mask (rows x T each).
    let plan = if w.soft { 5 * rows * t } else { 0 };
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

/// What the device holds besides the terms of `DeviceEstimate`: the CUDA context (with the
/// modules of the kernels it has loaded), cuBLAS's handle and the 32 MiB workspace it is given
/// (`device::fixed_cublas_workspace`), the memory pool's first reservation. Measured as device
/// memory less the weights once the 8B bf16 stand-in was loaded on an H100 80GB (driver 580,
/// CUDA 13; nvidia-smi, experiments/results/issue49_gpu_h100/mem_analyze.csv.xz): 15,955 MiB
/// against 15,317 MiB of weights, 638 MiB (another GPU or driver may differ).
pub const CUDA_CONTEXT_BYTES: u64 = 640 << 20;

/// The flash kernels' one head width (`attention::cuda::host`): the dense and top-k passes of
/// other widths take the explicit path, which holds the T x T scores.
pub const FLASH_HEAD_DIM: usize = 64;

/// What a run on a GPU will hold in device memory, term by term, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DeviceEstimate {
    pub weights: u64,
    pub kv_cache: u64,
    pub activations: u64,
    pub context: u64,
}

impl DeviceEstimate {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations + self.context
    }

    /// (name, bytes, what it is) per term, for a table.
    pub fn rows(&self) -> [(&'static str, u64, &'static str); 4] {
        [
            ("weights", self.weights, "every matrix in bf16 (2 bytes a parameter), vectors f32"),
            ("KV cache", self.kv_cache, "f32 keys and values of every layer"),
            ("activations", self.activations, "the widest layer at one pass's tokens, routers, logits"),
            ("context", self.context, "the CUDA context, cuBLAS and its workspace"),
        ]
    }
}

/// Bytes of device memory one layer's tensors hold at one pass's tokens (`Decoder::run` on a
/// GPU), with the adapters' routers and the logits.
pub fn device_activation_bytes(s: &Shape, w: &Workload) -> u64 {
    let t = w.pass_tokens as u64;
    let (d, ffn, q_w, kv_w) = (s.d_model as u64, s.ffn_dim as u64, (s.n_heads * s.head_dim) as u64, (s.n_kv_heads * s.head_dim) as u64);
    // Attention, f32: the residual and its norm, Q, K and V as heads (RoPE'd), and the causal
    // mask (T x T), which a pass off the CPU makes for its first layer and keeps where the
    // explicit path attends all T rows at once (past `attention::CHUNK_SCORES` each block makes
    // its own rows').
    let rows = crate::attention::query_rows(s.n_heads, w.pass_tokens) as u64;
    let mut attn = 4 * t * (2 * d + q_w + 2 * kv_w) + if rows >= t { 4 * t * t } else { 0 };
    // The explicit path (`attention::attend`): where the flash kernels do not apply (another head
    // width, soft-capping, a window shorter than the pass, soft mode). Dense, its scores, their
    // scaled copy, the masked copy and the softmax: three T x T per head live at once (the
    // first is freed as the second is made); with a cap, window or plan the unscaled scores
    // stay and a fourth is live, and the window's own mask is one T x T more.
    let windowed = s.window.is_some_and(|win| (win as u64) < t);
    let adjusted = w.soft || s.attn_softcap || windowed;
    if adjusted || s.head_dim != FLASH_HEAD_DIM {
        attn += 4 * explicit_scores(s.n_heads, w.pass_tokens) * if adjusted { 4 } else { 3 } + if windowed { 4 * rows * t } else { 0 };
    }
    // Soft mode's gate, made for the block of rows attended (`attention::soft::SoftGate`):
    // affinity, gate, ones and the selected gate, the local mask (rows x T each).
    if w.soft {
        attn += 4 * 5 * rows * t;
    }
    // The MLP (`Block::finish`, T rows): the residual in and out, the attention output and its
    // transposed copy, the O product and the MLP's norm, f32; three f32 rows of the MLP's width
    // (gate, up, their product) while each product's bf16 input and output come and go.
    let mlp = 4 * t * (4 * d + 2 * q_w + 3 * ffn);
    // The adapters' routers (the analysis's and its twin's): W_g, centroids, input scale, f32.
    let routers = w.routing.map_or(0, |r| 4 * (r.copies * s.n_layers * (s.d_model * r.d_g + r.groups * r.d_g + s.d_model)) as u64);
    // Logits of the scored rows and their log-softmax, f32.
    let logits = 4 * 2 * w.logits_rows as u64 * s.vocab as u64;
    // By this count the 8B at 2,048 tokens holds 1,682 MiB; nvidia-smi saw the device rise
    // 2,046 MiB over the loaded weights during `analyze` (1.22 times). Not measured apart, but
    // what the count leaves out: the pool keeps every block it has reserved
    // (`device::keep_pool_memory`), so a freed T x T block split among smaller tensors makes the
    // next layer's scores reserve anew, and the kernels' modules load on first use. The term is
    // 5/4 of the count (calibrated on that one run), as the CPU's MLP term is 2.5 times its own.
    (attn.max(mlp) + routers + logits) * 5 / 4
}

/// What a run of `w` on a GPU will hold in device memory, for a model of shape `s` whose
/// weights hold `weight_bytes` there (`ModelHeader::device_weight_bytes`).
pub fn device_estimate(s: &Shape, weight_bytes: u64, w: &Workload) -> DeviceEstimate {
    // The device cache's capacity: a power of two, at least 64 tokens (`DeviceKv::reserve`).
    let cap = if w.cache_tokens == 0 { 0 } else { w.cache_tokens.next_power_of_two().max(64) as u64 };
    let kv_cache = 4 * 2 * (s.n_layers * s.n_kv_heads * s.head_dim) as u64 * cap;
    DeviceEstimate { weights: weight_bytes, kv_cache, activations: device_activation_bytes(s, w), context: CUDA_CONTEXT_BYTES }
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
    const LLAMA_8B: Shape = Shape { n_layers: 32, d_model: 4096, n_heads: 32, n_kv_heads: 8, head_dim: 128, ffn_dim: 14336, vocab: 128256, attn_softcap: false, window: None, gated: true, tied: false };

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
        // Past 2^27 scores the explicit path takes a block of query rows at a time: Qwen2.5's
        // 14 heads at 32,768 tokens hold 292 rows' scores, gate and masks, not 14 x 32,768^2.
        assert_eq!(explicit_scores(32, 2048), 32 * 2048 * 2048);
        assert_eq!(explicit_scores(14, 32768), 14 * 292 * 32768);
        let q = Shape { n_layers: 24, d_model: 896, n_heads: 14, n_kv_heads: 2, head_dim: 64, ffn_dim: 4864, vocab: 151936, attn_softcap: false, window: None, gated: true, tied: true };
        let (dense, soft) = (estimate(&q, 0, &Workload::perplexity(32768, false)), estimate(&q, 0, &Workload::perplexity(32768, true)));
        let attn = 32768 * (2 * 896 + 4 * 896 + 3 * 128) + 128 * 32768 + 3 * 14 * 292 * 32768 + 292 * 32768 + 5 * 292 * 32768;
        let mlp = 32768 * (3 * 896 + 3 * 4864) * 5 / 2;
        // One block's scores, causal mask and gate stay below the MLP's rows: soft mode at 32K
        // holds what dense does (with whole T x T plans it held 25 GB more).
        assert!(attn < mlp, "soft attention {attn} vs MLP {mlp}");
        assert_eq!(soft.activations, dense.activations);
        // With a narrow MLP the blocked attention is the widest term, counted as above.
        let narrow = Shape { ffn_dim: 64, ..q };
        let soft = estimate(&narrow, 0, &Workload::perplexity(32768, true));
        assert_eq!(soft.activations, 4 * (attn + 2 * SCORE_ROWS as u64 * 151936));
        let r = RoutingKept { tokens: 10_000, groups: 8, d_g: 16, copies: 2 };
        let a = estimate(&s, 7, &Workload::analysis(10_000, 2048, false, r, 0));
        assert_eq!(a.kept, 4 * 32 * 10_000 * (2 * 8 + 16) * 2);
        assert_eq!((a.kv_cache, a.weights), (0, 7));
        assert_eq!(a.runtime, RUNTIME_BYTES + 2500 * 128256);
        assert_eq!(a.total(), 7 + a.activations + a.kept + a.runtime);
    }

    /// On a GPU every matrix is bf16, 2 bytes a parameter: the 8B's 8.03 billion parameters
    /// hold 16.06 GB there, whatever the file stores (its Q4_K_M GGUF too).
    #[test]
    fn device_weights_are_two_bytes_a_parameter() {
        let (blocks, vocab) = matrix_params(&LLAMA_8B);
        assert_eq!(blocks, 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 14336 * 4096));
        assert_eq!(vocab, 2 * 128256 * 4096);
        // With its 65 norms of 4,096, the 8,030,261,248 parameters llama.cpp counts.
        assert_eq!(blocks + vocab + 65 * 4096, 8_030_261_248);
        // The 8B's vectors: two norms a layer and the final norm, f32.
        let vectors = 4 * (2 * 32 + 1) * 4096;
        let e = device_estimate(&LLAMA_8B, 2 * (blocks + vocab) + vectors, &Workload::perplexity(16, false));
        assert_eq!(e.weights, 16_061_054_976);
        // Tied: the embedding is the LM head, one matrix on the device.
        assert_eq!(matrix_params(&Shape { tied: true, ..LLAMA_8B }).1, 128256 * 4096);
        // No gate (GPT-2): two MLP matrices a block.
        let g = Shape { gated: false, ..LLAMA_8B };
        assert_eq!(blocks - matrix_params(&g).0, 32 * 14336 * 4096);
    }

    /// The 8B bf16 stand-in analysed on an H100 over 2,062 tokens (segments of 2,048) with an
    /// adapter and its twin: nvidia-smi's peak was 18,001 MiB (docs/RESULTS.md, "The 8B on a
    /// GPU"). The estimate holds it, within 15%.
    #[test]
    fn device_estimate_holds_the_8b_on_an_h100() {
        let s = LLAMA_8B;
        let (blocks, vocab) = matrix_params(&s);
        let weights = 2 * (blocks + vocab) + 4 * 65 * 4096;
        let w = Workload::analysis(2062, 2048, false, RoutingKept::shipped(2062, 2), 0);
        let e = device_estimate(&s, weights, &w);
        let mib = e.total() as f64 / (1 << 20) as f64;
        assert!((18_001.0..=1.15 * 18_001.0).contains(&mib), "{mib:.0} MiB: {e:?}");
        // The terms by hand: head dim 128 takes the explicit path, whose three T x T copies per
        // head outweigh the MLP; the whole 5/4 of the count.
        let t = 2048u64;
        let attn = 4 * t * (2 * 4096 + 4096 + 2 * 1024) + 4 * t * t + 3 * 4 * 32 * t * t;
        let routers = 4 * 2 * 32 * (4096 * 16 + 8 * 16 + 4096);
        assert_eq!(e.activations, (attn + routers + 4 * 2 * 128256) * 5 / 4);
        assert_eq!((e.kv_cache, e.context), (0, CUDA_CONTEXT_BYTES));
        // The flash kernels' head width holds no T x T scores: the MLP is the widest then.
        let flash = device_estimate(&Shape { head_dim: 64, n_heads: 64, n_kv_heads: 16, ..s }, weights, &w);
        assert_eq!(flash.activations, (4 * t * (4 * 4096 + 2 * 4096 + 3 * 14336) + routers + 4 * 2 * 128256) * 5 / 4);
        // Soft mode and a window shorter than the pass add T x T copies; a generation's device
        // cache is f32 at a power-of-two capacity.
        assert!(device_estimate(&s, 0, &Workload::perplexity(2048, true)).activations > device_estimate(&s, 0, &Workload::perplexity(2048, false)).activations);
        assert!(device_estimate(&Shape { window: Some(512), ..s }, 0, &w).activations > e.activations);
        assert_eq!(device_estimate(&s, 0, &Workload::generation(2000, 48, false)).kv_cache, 4 * 2 * 32 * 8 * 128 * 2048);
        assert_eq!(device_estimate(&s, 0, &Workload::generation(2000, 49, false)).kv_cache, 4 * 2 * 32 * 8 * 128 * 4096);
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
