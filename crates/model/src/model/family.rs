//! Every model family as data: one `Family` entry each in `FAMILIES` (its block's parts, and
//! for each file format it comes in, the keys of its config and the names of its tensors),
//! read by the one loader in `load.rs`. Adding a family is adding an entry here (and, when it
//! brings a part the block does not have yet, that part to `block.rs` and a field here).

use super::config::{Arch, MlpKind, NormKind, QkNorm};

/// One family.
pub struct Family {
    pub arch: Arch,
    /// For messages: "GPT-2", "Gemma 2".
    pub title: &'static str,
    pub norm: NormKind,
    pub mlp: MlpKind,
    pub qk_norm: Option<QkNorm>,
    /// Blocks normalise their inputs before attention and before the MLP (OLMo-2 does not).
    pub pre_norms: bool,
    /// Blocks normalise the attention and MLP outputs before the residual add (Gemma 2 and 3;
    /// OLMo-2 has only these).
    pub post_norms: bool,
    /// The token embeddings are multiplied by sqrt(d_model) (Gemma).
    pub embed_scale_sqrt_d: bool,
    /// From a Hugging Face directory, when the family comes as one.
    pub hf: Option<HfFamily>,
    /// From a GGUF file, when llama.cpp's layout of the family is read.
    pub gguf: Option<GgufFamily>,
}

/// A yes/no of the config: fixed for the family, or a key of `config.json` with its default.
#[derive(Clone, Copy)]
pub enum Flag {
    Never,
    Always,
    Key(&'static str, bool),
}

/// The score scale.
#[derive(Clone, Copy)]
pub enum AttnScale {
    /// 1/sqrt(head_dim), the kernels' default.
    HeadDim,
    /// 1/sqrt(the key's value), head_dim when absent (Gemma 2's `query_pre_attn_scalar`).
    Key(&'static str),
    /// 1/sqrt(d_model / heads) for a model of this many layers, else 1/sqrt(head_dim) (as
    /// llama.cpp after gemma_pytorch: Gemma 3 27B, 62 layers).
    DModelOverHeadsAt(usize),
}

/// How a Hugging Face config's `sliding_window` (absent or null: none) applies. The layers
/// `layer_types` names slide, else the family's default ones (`WindowLayers`).
#[derive(Clone, Copy)]
pub enum HfWindow {
    /// The family has none.
    None,
    /// The window is on when `use_sliding_window` (default the bool) is (Mistral, Phi-3: no
    /// such key, on; Qwen2 and Qwen3: off unless set).
    Gated(bool, WindowLayers),
    /// Always on when `sliding_window` is given (Gemma 2 and 3).
    Always(WindowLayers),
}

/// Which layers slide when `layer_types` does not say (transformers' defaults).
#[derive(Clone, Copy)]
pub enum WindowLayers {
    /// Every layer (Mistral, Phi-3).
    All,
    /// Layers from the key's value on (default the number): Qwen2's `max_window_layers`.
    From(&'static str, usize),
    /// The even layers (Gemma 2).
    Even,
    /// All but the last of every p (the key's value, default the number): Gemma 3's
    /// `sliding_window_pattern`.
    AllButEvery(&'static str, usize),
}

/// The keys of a Hugging Face `config.json` that give the decoder's shape.
pub struct HfKeys {
    pub d_model: &'static str,
    pub n_heads: &'static str,
    pub n_layers: &'static str,
    pub vocab: &'static str,
    pub context: &'static str,
    pub ffn: &'static str,
    /// When the ffn key may be absent: this many times d_model (None: it is required).
    pub ffn_default_times_d: Option<usize>,
    /// The KV heads' key (absent: as many as the query heads); None: never grouped.
    pub n_kv_heads: Option<&'static str>,
    /// The head width's key (absent: d_model / heads); None: always d_model / heads.
    pub head_dim: Option<&'static str>,
    /// The norm epsilon's key and default.
    pub eps: (&'static str, f64),
}

/// Llama's keys, which most families share.
pub const LLAMA_KEYS: HfKeys = HfKeys {
    d_model: "hidden_size",
    n_heads: "num_attention_heads",
    n_layers: "num_hidden_layers",
    vocab: "vocab_size",
    context: "max_position_embeddings",
    ffn: "intermediate_size",
    ffn_default_times_d: None,
    n_kv_heads: Some("num_key_value_heads"),
    head_dim: Some("head_dim"),
    eps: ("rms_norm_eps", 1e-6),
};

/// The activation a config names.
pub struct Activation {
    /// Keys read in order, the first present wins.
    pub keys: &'static [&'static str],
    pub default: &'static str,
    /// The names the MLP implements (`Family::mlp`'s activation).
    pub accepted: &'static [&'static str],
}

const SILU: Activation = Activation { keys: &["hidden_act"], default: "silu", accepted: &["silu"] };

/// A family in a Hugging Face directory.
pub struct HfFamily {
    /// The `model_type` values it reads.
    pub model_types: &'static [&'static str],
    pub keys: &'static HfKeys,
    pub activation: Activation,
    /// Learned absolute positions (the `pos_embed` tensor) instead of RoPE.
    pub learned_positions: bool,
    pub qkv_bias: Flag,
    pub tied_embeddings: Flag,
    pub attn_scale: AttnScale,
    /// Keys of the soft-caps of the attention logits and of the final logits.
    pub attn_softcap: Option<&'static str>,
    pub final_softcap: Option<&'static str>,
    pub window: HfWindow,
    /// The sliding layers have their own RoPE base (`HfConfig::rope`'s `local_theta`, default
    /// the number: Gemma 3's `rope_local_base_freq`).
    pub local_rope_base: Option<f64>,
    /// Flags the decoder implements only at one value: (key, the value it implements, which
    /// is also the default when absent, what the flag changes: for the message).
    pub fixed_flags: &'static [(&'static str, bool, &'static str)],
    pub names: Names,
}

/// A family in a GGUF file (llama.cpp's layout: every key under `<arch>.`).
pub struct GgufFamily {
    /// `general.architecture`.
    pub arch: &'static str,
    /// The key of the head width (absent: d_model / heads).
    pub head_dim_key: &'static str,
    /// The norm epsilon's key (under `<arch>.`).
    pub eps_key: &'static str,
    /// Learned absolute positions (`position_embd`) instead of RoPE (GPT-2).
    pub learned_positions: bool,
    /// Rotate adjacent pairs: llama.cpp's converter permutes llama's Q/K rows so that ggml's
    /// rope rotates them; other families keep the Hugging Face layout (NEOX: the two halves).
    pub interleaved_rope: bool,
    pub qkv_bias: bool,
    pub attn_scale: AttnScale,
    pub attn_softcap: Option<&'static str>,
    pub final_softcap: Option<&'static str>,
    /// Interleaved sliding and global layers, when the family has them.
    pub sliding: Option<GgufSliding>,
    pub names: Names,
}

/// llama.cpp's reading of a GGUF's sliding-window layers: `attention.sliding_window` (0 or
/// absent: every layer global), `attention.sliding_window_pattern` (per layer, or a period p:
/// layer l slides unless it is the last of each p), `rope.freq_base_swa`.
pub struct GgufSliding {
    /// The period when the file does not say.
    pub default_pattern: usize,
    /// The sliding layers' RoPE base when the file does not say (None: the global one).
    pub default_rope_base: Option<f64>,
}

/// Where a checkpoint's tensors are, by the block part they hold.
pub struct Names {
    /// Stems: the loader adds `.weight` (and `.bias` for a LayerNorm).
    pub embed: &'static str,
    pub pos_embed: Option<&'static str>,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
    /// Layer l's tensors are under `{layer}{l}.`.
    pub layer: &'static str,
    /// Block part -> name under the layer, the first table that has the part wins (a family
    /// lists what differs from the common table before it). Parts: attn_norm, q, k, v (or qkv,
    /// fused), q_norm, k_norm, o, post_attn_norm, mlp_norm, gate, up (or gate_up, fused),
    /// down, post_mlp_norm.
    pub parts: &'static [&'static [(&'static str, &'static str)]],
    /// A prefix some checkpoints put before every name (GPT-2's `save_pretrained` of the LM
    /// head model: "transformer.").
    pub optional_prefix: Option<&'static str>,
    /// Added to every stored norm weight: Gemma's RMSNorm scales by (1 + w) and Hugging Face
    /// stores w (1.0); llama.cpp's converter stores 1 + w already (0.0).
    pub norm_offset: f64,
    /// Every projection has a bias (GPT-2); else only Q/K/V's when `qkv_bias`, the others'
    /// when the checkpoint holds one (Llama's `attention_bias` also puts one on o_proj).
    pub all_biases: bool,
    /// Every projection is stored as Conv1D, (in, out) (GPT-2's Hugging Face checkpoints): the
    /// loader transposes them to (out, in).
    pub conv1d: bool,
    /// Q, K and V are one tensor (`qkv`), split by rows at load (GPT-2, Phi-3).
    pub fused_qkv: bool,
    /// The gate and up projections are one tensor (`gate_up`, the gate's rows first), split
    /// by rows at load (Phi-3).
    pub fused_gate_up: bool,
}

impl Names {
    /// The name stem of layer `l`'s `part` (an unknown part is looked up as itself).
    pub fn block(&self, l: usize, part: &str) -> String {
        let p = self.parts.iter().flat_map(|t| t.iter()).find(|(k, _)| *k == part).map_or(part, |(_, v)| v);
        format!("{}{l}.{p}", self.layer)
    }
}

/// The Hugging Face layout of a Llama-style block.
const HF_PARTS: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("q", "self_attn.q_proj"),
    ("k", "self_attn.k_proj"),
    ("v", "self_attn.v_proj"),
    ("q_norm", "self_attn.q_norm"),
    ("k_norm", "self_attn.k_norm"),
    ("o", "self_attn.o_proj"),
    ("mlp_norm", "post_attention_layernorm"),
    ("gate", "mlp.gate_proj"),
    ("up", "mlp.up_proj"),
    ("down", "mlp.down_proj"),
    ("post_mlp_norm", "post_feedforward_layernorm"),
];

/// llama.cpp's layout of a block.
const GGUF_PARTS: &[(&str, &str)] = &[
    ("attn_norm", "attn_norm"),
    ("q", "attn_q"),
    ("qkv", "attn_qkv"),
    ("k", "attn_k"),
    ("v", "attn_v"),
    ("q_norm", "attn_q_norm"),
    ("k_norm", "attn_k_norm"),
    ("o", "attn_output"),
    ("post_attn_norm", "post_attention_norm"),
    ("mlp_norm", "ffn_norm"),
    ("gate", "ffn_gate"),
    ("up", "ffn_up"),
    ("down", "ffn_down"),
    ("post_mlp_norm", "post_ffw_norm"),
];

/// A Hugging Face Llama-style checkpoint's names, with the family's own parts first.
const fn hf_names(own: &'static [&'static [(&'static str, &'static str)]], norm_offset: f64) -> Names {
    Names {
        embed: "model.embed_tokens",
        pos_embed: None,
        final_norm: "model.norm",
        lm_head: "lm_head",
        layer: "model.layers.",
        parts: own,
        optional_prefix: None,
        norm_offset,
        all_biases: false,
        conv1d: false,
        fused_qkv: false,
        fused_gate_up: false,
    }
}

const HF_LLAMA_NAMES: Names = hf_names(&[HF_PARTS], 0.0);

const GGUF_NAMES: Names = Names {
    embed: "token_embd",
    pos_embed: None,
    final_norm: "output_norm",
    lm_head: "output",
    layer: "blk.",
    parts: &[GGUF_PARTS],
    optional_prefix: None,
    norm_offset: 0.0,
    all_biases: false,
    conv1d: false,
    fused_qkv: false,
    fused_gate_up: false,
};

/// A Llama-style family's Hugging Face side.
const fn llama_style_hf(model_types: &'static [&'static str], qkv_bias: Flag) -> HfFamily {
    HfFamily {
        model_types,
        keys: &LLAMA_KEYS,
        activation: SILU,
        learned_positions: false,
        qkv_bias,
        tied_embeddings: Flag::Key("tie_word_embeddings", false),
        attn_scale: AttnScale::HeadDim,
        attn_softcap: None,
        final_softcap: None,
        window: HfWindow::Gated(true, WindowLayers::All),
        local_rope_base: None,
        fixed_flags: &[],
        names: HF_LLAMA_NAMES,
    }
}

/// A Llama-style family's GGUF side.
const fn llama_style_gguf(arch: &'static str, interleaved_rope: bool, qkv_bias: bool) -> GgufFamily {
    GgufFamily {
        arch,
        head_dim_key: "rope.dimension_count",
        eps_key: "attention.layer_norm_rms_epsilon",
        learned_positions: false,
        interleaved_rope,
        qkv_bias,
        attn_scale: AttnScale::HeadDim,
        attn_softcap: None,
        final_softcap: None,
        sliding: None,
        names: GGUF_NAMES,
    }
}

/// A Llama-style family: RMSNorm, SwiGLU, pre-norms only.
const fn llama_style(arch: Arch, title: &'static str, hf: HfFamily, gguf: Option<GgufFamily>) -> Family {
    Family { arch, title, norm: NormKind::Rms, mlp: MlpKind::SwiGlu, qk_norm: None, pre_norms: true, post_norms: false, embed_scale_sqrt_d: false, hf: Some(hf), gguf }
}

/// The Gemma 2 and 3 blocks' Hugging Face names: Gemma's post_attention_layernorm normalises
/// the attention output (Llama's is the pre-MLP norm); the checkpoint stores w of 1 + w.
const HF_GEMMA_NAMES: Names = hf_names(&[&[("post_attn_norm", "post_attention_layernorm"), ("mlp_norm", "pre_feedforward_layernorm")], HF_PARTS], 1.0);

/// Gemma's activation keys.
const GEMMA_ACT: Activation = Activation { keys: &["hidden_activation", "hidden_act"], default: "gelu_pytorch_tanh", accepted: &["gelu_pytorch_tanh", "gelu_new"] };

/// The families, in the order error messages list them.
pub const FAMILIES: &[Family] = &[
    // GPT-2: LayerNorm, learned absolute positions, GELU (tanh) MLP, multi-head attention, tied
    // embeddings; Q, K and V fused. Hugging Face stores the projections as Conv1D, (in, out);
    // llama.cpp's converter transposes them.
    Family {
        arch: Arch::Gpt2,
        title: "GPT-2",
        norm: NormKind::Layer,
        mlp: MlpKind::GeluTanh,
        qk_norm: None,
        pre_norms: true,
        post_norms: false,
        embed_scale_sqrt_d: false,
        hf: Some(HfFamily {
            model_types: &["gpt2"],
            keys: &HfKeys {
                d_model: "n_embd",
                n_heads: "n_head",
                n_layers: "n_layer",
                vocab: "vocab_size",
                context: "n_positions",
                ffn: "n_inner",
                ffn_default_times_d: Some(4),
                n_kv_heads: None,
                head_dim: None,
                eps: ("layer_norm_epsilon", 1e-5),
            },
            activation: Activation { keys: &["activation_function"], default: "gelu_new", accepted: &["gelu_new", "gelu_pytorch_tanh"] },
            learned_positions: true,
            qkv_bias: Flag::Always,
            tied_embeddings: Flag::Always,
            attn_scale: AttnScale::HeadDim,
            attn_softcap: None,
            final_softcap: None,
            window: HfWindow::None,
            local_rope_base: None,
            // Variants of the attention scaling the decoder does not implement.
            fixed_flags: &[("scale_attn_by_inverse_layer_idx", false, "attention scaling"), ("scale_attn_weights", true, "attention scaling")],
            names: Names {
                embed: "wte",
                pos_embed: Some("wpe"),
                final_norm: "ln_f",
                lm_head: "wte",
                layer: "h.",
                parts: &[&[("attn_norm", "ln_1"), ("qkv", "attn.c_attn"), ("o", "attn.c_proj"), ("mlp_norm", "ln_2"), ("up", "mlp.c_fc"), ("down", "mlp.c_proj")]],
                optional_prefix: Some("transformer."),
                norm_offset: 0.0,
                all_biases: true,
                conv1d: true,
                fused_qkv: true,
                fused_gate_up: false,
            },
        }),
        gguf: Some(GgufFamily {
            arch: "gpt2",
            head_dim_key: "attention.key_length",
            eps_key: "attention.layer_norm_epsilon",
            learned_positions: true,
            interleaved_rope: false,
            qkv_bias: true,
            attn_scale: AttnScale::HeadDim,
            attn_softcap: None,
            final_softcap: None,
            sliding: None,
            names: Names { pos_embed: Some("position_embd"), all_biases: true, fused_qkv: true, ..GGUF_NAMES },
        }),
    },
    // Llama-style decoders (Llama, Mistral, SmolLM2): RMSNorm, RoPE, GQA, SwiGLU. Mistral's
    // `sliding_window` is on every layer.
    llama_style(Arch::Llama, "Llama", llama_style_hf(&["llama", "mistral"], Flag::Key("attention_bias", false)), Some(llama_style_gguf("llama", true, false))),
    // Qwen2: Llama's blocks with biases on Q, K and V.
    llama_style(
        Arch::Qwen2,
        "Qwen2",
        HfFamily { window: HfWindow::Gated(false, WindowLayers::From("max_window_layers", 28)), ..llama_style_hf(&["qwen2"], Flag::Always) },
        Some(llama_style_gguf("qwen2", false, true)),
    ),
    // Qwen3: Llama's blocks with per-head QK-norm (before RoPE), no Q/K/V biases.
    Family {
        qk_norm: Some(QkNorm::PerHead),
        ..llama_style(
            Arch::Qwen3,
            "Qwen3",
            HfFamily { window: HfWindow::Gated(false, WindowLayers::From("max_window_layers", 28)), ..llama_style_hf(&["qwen3"], Flag::Key("attention_bias", false)) },
            Some(GgufFamily { head_dim_key: "attention.key_length", ..llama_style_gguf("qwen3", false, false) }),
        )
    },
    // Phi-3: Llama's blocks with Q, K and V fused (`qkv_proj`) and the gate and up projections
    // fused (`gate_up_proj`), split at load. transformers runs `sliding_window` on every
    // layer; llama.cpp ignores it (src/models/phi3.cpp), so a GGUF has none.
    llama_style(
        Arch::Phi3,
        "Phi-3",
        HfFamily {
            names: Names { fused_qkv: true, fused_gate_up: true, ..hf_names(&[&[("qkv", "self_attn.qkv_proj"), ("gate_up", "mlp.gate_up_proj")], HF_PARTS], 0.0) },
            ..llama_style_hf(&["phi3"], Flag::Never)
        },
        Some(GgufFamily { names: Names { fused_qkv: true, fused_gate_up: true, parts: &[&[("gate_up", "ffn_up")], GGUF_PARTS], ..GGUF_NAMES }, ..llama_style_gguf("phi3", false, false) }),
    ),
    // Gemma 2: post-attention and post-MLP norms, GeGLU, embeddings scaled by sqrt(d_model),
    // attention scaled by query_pre_attn_scalar^-0.5, tanh soft-capping of the attention and
    // final logits, alternating sliding-window (even layers) / global layers. Its RMSNorm
    // scales by 1 + w: Hugging Face stores w, llama.cpp's converter 1 + w.
    Family {
        arch: Arch::Gemma2,
        title: "Gemma 2",
        norm: NormKind::Rms,
        mlp: MlpKind::GeGlu,
        qk_norm: None,
        pre_norms: true,
        post_norms: true,
        embed_scale_sqrt_d: true,
        hf: Some(HfFamily {
            model_types: &["gemma2"],
            keys: &LLAMA_KEYS,
            activation: GEMMA_ACT,
            learned_positions: false,
            qkv_bias: Flag::Key("attention_bias", false),
            tied_embeddings: Flag::Key("tie_word_embeddings", true),
            attn_scale: AttnScale::Key("query_pre_attn_scalar"),
            attn_softcap: Some("attn_logit_softcapping"),
            final_softcap: Some("final_logit_softcapping"),
            window: HfWindow::Always(WindowLayers::Even),
            local_rope_base: None,
            fixed_flags: &[],
            names: HF_GEMMA_NAMES,
        }),
        // llama.cpp (src/models/gemma2.cpp): the score scale is 1/sqrt(head_dim) except for
        // the 27B (46 layers); every other layer slides, from the first.
        gguf: Some(GgufFamily {
            arch: "gemma2",
            head_dim_key: "attention.key_length",
            eps_key: "attention.layer_norm_rms_epsilon",
            learned_positions: false,
            interleaved_rope: false,
            qkv_bias: false,
            attn_scale: AttnScale::DModelOverHeadsAt(46),
            attn_softcap: Some("attn_logit_softcapping"),
            final_softcap: Some("final_logit_softcapping"),
            sliding: Some(GgufSliding { default_pattern: 2, default_rope_base: None }),
            names: GGUF_NAMES,
        }),
    },
    // Gemma 3: Gemma 2's blocks with per-head QK-norm (1 + w too) and no soft-capping of the
    // attention, interleaved sliding-window and global layers (five of six slide) with their
    // own RoPE bases (the global layers' may be scaled), NEOX rotation.
    Family {
        arch: Arch::Gemma3,
        title: "Gemma 3",
        norm: NormKind::Rms,
        mlp: MlpKind::GeGlu,
        qk_norm: Some(QkNorm::PerHead),
        pre_norms: true,
        post_norms: true,
        embed_scale_sqrt_d: true,
        hf: Some(HfFamily {
            model_types: &["gemma3_text"],
            keys: &LLAMA_KEYS,
            activation: GEMMA_ACT,
            learned_positions: false,
            qkv_bias: Flag::Key("attention_bias", false),
            tied_embeddings: Flag::Key("tie_word_embeddings", true),
            attn_scale: AttnScale::Key("query_pre_attn_scalar"),
            attn_softcap: Some("attn_logit_softcapping"),
            final_softcap: Some("final_logit_softcapping"),
            window: HfWindow::Always(WindowLayers::AllButEvery("sliding_window_pattern", 6)),
            local_rope_base: Some(10000.0),
            // EmbeddingGemma's bidirectional attention is not a causal decoder's.
            fixed_flags: &[("use_bidirectional_attention", false, "bidirectional attention")],
            // The multimodal `gemma3` checkpoint's decoder is under `language_model.`
            // (`HfConfig::open` reads its `text_config`).
            names: Names { optional_prefix: Some("language_model."), ..HF_GEMMA_NAMES },
        }),
        gguf: Some(GgufFamily {
            arch: "gemma3",
            head_dim_key: "attention.key_length",
            eps_key: "attention.layer_norm_rms_epsilon",
            learned_positions: false,
            interleaved_rope: false,
            qkv_bias: false,
            attn_scale: AttnScale::DModelOverHeadsAt(62),
            attn_softcap: None,
            final_softcap: Some("final_logit_softcapping"),
            // llama_model_gemma3::load_arch_hparams: every 6th layer is global, the sliding
            // layers' base 10000.
            sliding: Some(GgufSliding { default_pattern: 6, default_rope_base: Some(10000.0) }),
            names: GGUF_NAMES,
        }),
    },
    // OLMo-2: QK-norm over the whole projected q and k (before the heads are split, as
    // transformers does), and norms after attention and after the MLP instead of before:
    // x + norm(attn(x)), then h + norm(mlp(h)). The router reads the block's input x.
    Family {
        qk_norm: Some(QkNorm::Full),
        pre_norms: false,
        post_norms: true,
        ..llama_style(
            Arch::Olmo2,
            "OLMo-2",
            HfFamily {
                window: HfWindow::None,
                names: hf_names(&[&[("post_attn_norm", "post_attention_layernorm")], HF_PARTS], 0.0),
                ..llama_style_hf(&["olmo2"], Flag::Key("attention_bias", false))
            },
            // llama.cpp reads a window when the file has one (OLMo-3: three of four layers).
            Some(GgufFamily { sliding: Some(GgufSliding { default_pattern: 4, default_rope_base: None }), ..llama_style_gguf("olmo2", false, false) }),
        )
    },
];

/// The family of a Hugging Face `model_type`.
pub fn by_model_type(t: &str) -> Option<(&'static Family, &'static HfFamily)> {
    FAMILIES.iter().find_map(|f| f.hf.as_ref().filter(|h| h.model_types.contains(&t)).map(|h| (f, h)))
}

/// The family of a GGUF `general.architecture`.
pub fn by_gguf_arch(a: &str) -> Option<(&'static Family, &'static GgufFamily)> {
    FAMILIES.iter().find_map(|f| f.gguf.as_ref().filter(|g| g.arch == a).map(|g| (f, g)))
}

/// The names a format reads, for messages: "gpt2, llama, mistral, ...".
pub fn supported(gguf: bool) -> String {
    let names: Vec<&str> = if gguf {
        FAMILIES.iter().filter_map(|f| f.gguf.as_ref().map(|g| g.arch)).collect()
    } else {
        FAMILIES.iter().filter_map(|f| f.hf.as_ref()).flat_map(|h| h.model_types.iter().copied()).collect()
    };
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name selects one family, and every family is read from some format.
    #[test]
    fn the_table_is_unambiguous() {
        let hf: Vec<&str> = FAMILIES.iter().filter_map(|f| f.hf.as_ref()).flat_map(|h| h.model_types.iter().copied()).collect();
        let gguf: Vec<&str> = FAMILIES.iter().filter_map(|f| f.gguf.as_ref().map(|g| g.arch)).collect();
        for names in [&hf, &gguf] {
            let set: std::collections::BTreeSet<_> = names.iter().collect();
            assert_eq!(set.len(), names.len(), "a name in two families: {names:?}");
        }
        assert!(FAMILIES.iter().all(|f| f.hf.is_some() || f.gguf.is_some()));
        assert_eq!(supported(false), "gpt2, llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, olmo2");
        assert_eq!(supported(true), "gpt2, llama, qwen2, qwen3, phi3, gemma2, gemma3, olmo2");
    }

    /// The parts a family lists first win over the common table's.
    #[test]
    fn a_family_overrides_the_common_names() {
        let (_, g2) = by_model_type("gemma2").unwrap();
        assert_eq!(g2.names.block(3, "mlp_norm"), "model.layers.3.pre_feedforward_layernorm");
        assert_eq!(g2.names.block(3, "q"), "model.layers.3.self_attn.q_proj");
        let (_, l) = by_model_type("llama").unwrap();
        assert_eq!(l.names.block(0, "mlp_norm"), "model.layers.0.post_attention_layernorm");
        let (_, g3) = by_gguf_arch("gemma3").unwrap();
        assert_eq!(g3.names.block(5, "post_mlp_norm"), "blk.5.post_ffw_norm");
        assert_eq!(g3.names.block(5, ""), "blk.5.");
    }
}
