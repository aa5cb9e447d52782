//! Loading the inputs: the model, the adapter (or the embedded sample) and the text (or the
//! embedded sample), each a job of its own that reports back as a `Msg`.

use super::error::JobError;
use super::msg::Msg;
use crate::gui::state::{DeviceChoice, MAX_TEXT_BYTES};
use crate::gui::worker::Handle;
use focus_core::analysis::DEFAULT_SEGMENT;
use focus_core::model::memory::{self, ModelHeader, RoutingKept, Workload};
use focus_core::{Adapter, Model};
use std::path::PathBuf;
use std::sync::Arc;

pub fn load_model(path: Option<PathBuf>, device: DeviceChoice, h: &Handle) -> Msg {
    h.set_progress(0, 0, "loading the model");
    let r = (|| -> Result<Arc<Model>, JobError> {
        let p = match &path {
            Some(p) => p.clone(),
            None => {
                let p = crate::defaults::default_model_path();
                if !p.exists() {
                    return Err(JobError::Failed(format!("the default model is not at {}: {}", p.display(), fetch_hint())));
                }
                p
            }
        };
        let dev = device.device()?;
        // Refused before any weight is read when an analysis would not fit in memory (CPU
        // only: on a GPU the weights live in device memory).
        if dev.is_cpu() {
            let h = ModelHeader::open(&p)?;
            let routing = RoutingKept::shipped(DEFAULT_SEGMENT, 1);
            let w = Workload::analysis(DEFAULT_SEGMENT, DEFAULT_SEGMENT, false, routing, super::KEEP_BYTES as u64);
            let what = format!("{} with an analysis of {DEFAULT_SEGMENT} tokens", p.display());
            memory::check_fits(&what, &h.estimate(&w), memory::available().as_ref())?;
        }
        // The bar counts megabytes of the checkpoint read and checked.
        let mb = |b: u64| (b / 1_000_000) as usize;
        let report = |done: u64, total: u64| h.set_progress(mb(done), mb(total), "loading the model (MB read)");
        Ok(Arc::new(Model::load_reporting(&p, &dev, &report)?))
    })();
    Msg::Model(r, path, device)
}

/// How to get the default model: the fetch script where this is a checkout (the working folder
/// or the executable's, up to three folders above), else what a user with only the binary can
/// do (the script is not beside a copied binary).
pub fn fetch_hint() -> String {
    let mut places: Vec<PathBuf> = Vec::new();
    if let Ok(d) = std::env::current_dir() {
        places.extend(d.ancestors().take(4).map(|a| a.join("scripts/fetch-model.sh")));
    }
    if let Ok(exe) = std::env::current_exe() {
        places.extend(exe.ancestors().skip(1).take(4).map(|a| a.join("scripts/fetch-model.sh")));
    }
    match places.into_iter().find(|p| p.is_file()) {
        Some(s) => format!("run {} (it fetches SmolLM2-135M-Instruct, 98 MB), or open a model file (File menu, Open model…)", s.display()),
        None => format!(
            "open a model file (File menu, Open model…: a GGUF such as {} of SmolLM2-135M-Instruct, or a Hugging Face model folder), or set FOCUS_LENS_MODEL to one",
            crate::defaults::DEFAULT_MODEL_FILE
        ),
    }
}

pub fn load_adapter(model: Arc<Model>, path: Option<PathBuf>, model_gen: u64, h: &Handle) -> Msg {
    h.set_progress(0, 0, "loading the adapter");
    let r = match &path {
        Some(p) => Adapter::load(p, &model.identity(), model.device()),
        None => crate::defaults::sample_adapter(&model),
    };
    let r = r.map(|a| (Arc::new(a), adapter_fingerprint(path.as_deref())));
    Msg::Adapter(r.map_err(JobError::from), path, model_gen)
}

/// The adapter's fingerprint: the SHA-256 of its files (`index::build::adapter_sha256`, as a
/// corpus index records it; the embedded sample's files for `None`), or where they cannot be
/// read again its folder's path. The group numbers (`analysis::identity`), the exports and the
/// sessions name the adapter by it.
pub fn adapter_fingerprint(path: Option<&std::path::Path>) -> String {
    crate::index::build::adapter_sha256(path).unwrap_or_else(|_| format!("path:{}", path.map(|p| p.display().to_string()).unwrap_or_default()))
}

/// Reads and checks a text; files over `MAX_TEXT_BYTES` are truncated (at a character
/// boundary) with a note that the window shows.
pub fn read_text(path: &Option<PathBuf>) -> Result<(String, Option<String>), JobError> {
    read_text_as(path, false)
}

/// `read_text`, or with `latin1` a file that is not UTF-8 read as Latin-1 (ISO-8859-1: each
/// byte one character, U+0000-U+00FF), with a note that says so: lossy for any other encoding.
pub fn read_text_as(path: &Option<PathBuf>, latin1: bool) -> Result<(String, Option<String>), JobError> {
    let Some(p) = path else { return Ok((crate::defaults::SAMPLE_TEXT.to_string(), None)) };
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if meta.is_dir() {
        return Err(JobError::Failed(format!("{} is a folder, not a text file", p.display())));
    }
    // A FIFO (or socket, or device) would block the reader forever, or never end.
    focus_core::io::check_regular(p, "text")?;
    let mut bytes = Vec::new();
    use std::io::Read;
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_TEXT_BYTES as u64 + 4).read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let mut note = None;
    if meta.len() > MAX_TEXT_BYTES as u64 {
        bytes.truncate(MAX_TEXT_BYTES);
        // Drop a character cut in half at the end.
        while !bytes.is_empty() && std::str::from_utf8(&bytes).is_err_and(|e| e.error_len().is_none()) {
            bytes.pop();
        }
        note = Some(format!(
            "{} is {:.1} MiB: only its first {} MiB are used",
            p.display(),
            meta.len() as f64 / (1 << 20) as f64,
            MAX_TEXT_BYTES >> 20
        ));
    }
    if latin1 {
        if let Err(e) = std::str::from_utf8(&bytes) {
            let at = e.valid_up_to();
            bytes = bytes.iter().map(|&b| b as char).collect::<String>().into_bytes();
            let read = format!("{} is not UTF-8 (first invalid byte at offset {at}): read as Latin-1, lossy: characters of another encoding show wrongly", p.display());
            note = Some(match note {
                Some(n) => format!("{read}; {n}"),
                None => read,
            });
        }
    }
    let text = focus_core::io::text::text_from_bytes(bytes, &p.display().to_string())?;
    Ok((text, note))
}

pub fn load_text(path: Option<PathBuf>, latin1: bool, h: &Handle) -> Msg {
    h.set_progress(0, 0, "reading the text");
    Msg::Text(read_text_as(&path, latin1).map(|(t, n)| (Arc::new(t), n)), path)
}
