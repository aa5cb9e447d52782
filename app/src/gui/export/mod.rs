//! What every export shares: the kinds (statistics as CSV or JSON, the current view as SVG or
//! PNG) and their default file names, the statistics themselves (the same as `focus-lens
//! analyze`), the atomic file write, and the PNG path (a screenshot of the central view, cropped
//! and encoded). `svg` is the SVG writer and its charts. Each view's own SVG is drawn next to the
//! view, in `views/`.

pub mod sha256;
pub mod svg;

use super::state::{AnalysisResult, Settings};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    StatsCsv,
    StatsJson,
    ViewSvg,
    ViewPng,
    /// The compare view's per-token table and per-layer figures.
    CompareCsv,
    /// The compare view's comparison, whole.
    CompareJson,
    /// A session file (`session::file`).
    Session,
}

impl ExportKind {
    /// The Export menu's items.
    pub const ALL: [ExportKind; 4] = [ExportKind::StatsCsv, ExportKind::StatsJson, ExportKind::ViewSvg, ExportKind::ViewPng];
    pub fn label(self) -> &'static str {
        match self {
            ExportKind::StatsCsv => "Statistics as CSV…",
            ExportKind::StatsJson => "Statistics as JSON…",
            ExportKind::ViewSvg => "Current view as SVG…",
            ExportKind::ViewPng => "Current view as PNG…",
            ExportKind::CompareCsv => "Comparison table as CSV…",
            ExportKind::CompareJson => "Comparison as JSON…",
            ExportKind::Session => "Session…",
        }
    }
    pub fn ext(self) -> &'static str {
        match self {
            ExportKind::StatsCsv | ExportKind::CompareCsv => "csv",
            ExportKind::StatsJson | ExportKind::CompareJson | ExportKind::Session => "json",
            ExportKind::ViewSvg => "svg",
            ExportKind::ViewPng => "png",
        }
    }
}

/// The file name an export gets by default.
pub fn default_name(settings: &Settings, kind: ExportKind) -> String {
    let what = match kind {
        ExportKind::StatsCsv | ExportKind::StatsJson => "stats".to_string(),
        ExportKind::CompareCsv | ExportKind::CompareJson => "compare".to_string(),
        ExportKind::Session => "session".to_string(),
        _ => format!("{}-layer{}", settings.setup.tab.label().to_lowercase().replace(' ', "-"), settings.setup.layer),
    };
    format!("focus-lens-{what}.{}", kind.ext())
}

/// Where the analysis came from and how it was run, for the JSON export: paths (none: the
/// embedded default), the text's SHA-256 and every setting.
pub fn provenance(res: &AnalysisResult, settings: &Settings, text: Option<&str>, selection: &crate::gui::state::Selection) -> serde_json::Value {
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let analysed = res.analysis.tokens.last().map(|t| t.end).unwrap_or(0);
    serde_json::json!({
        "app": format!("focus-lens {}", env!("CARGO_PKG_VERSION")),
        "model_path": path(&settings.inputs.model).unwrap_or_else(|| format!("default: {}", crate::defaults::default_model_path().display())),
        "adapter_path": path(&settings.inputs.adapter).unwrap_or_else(|| format!("embedded default: {}", crate::defaults::SAMPLE_ADAPTER_NAME)),
        "text_path": path(&settings.inputs.text).unwrap_or_else(|| format!("embedded default: {}", crate::defaults::SAMPLE_TEXT_NAME)),
        "text_sha256": text.map(|t| sha256::hex(t.as_bytes())),
        "text_bytes": text.map(str::len),
        "analysed_bytes": analysed,
        "analysed_sha256": text.and_then(|t| t.get(..analysed)).map(|t| sha256::hex(t.as_bytes())),
        "text_tokens": res.text_tokens,
        "analysed_tokens": res.tokens(),
        "settings": {
            "device": res.key.params.device.label(),
            "mode": res.analysis.mode,
            "k": res.key.params.k,
            "window": res.window(),
            "window_overridden": res.key.params.window.is_some(),
            "causal_sinkhorn": res.adapter.config.causal_sinkhorn,
            "causal_overridden": res.key.params.causal.is_some(),
            "sinkhorn_iters": res.adapter.config.sinkhorn_iters,
            "tau": res.adapter.config.tau,
            "groups": res.groups(),
            "max_tokens": res.key.params.max_tokens,
            "segment_len": res.analysis.segment_len,
            "layer": settings.setup.layer,
            "head": settings.setup.head,
            "raw_group_indices": settings.setup.raw_groups,
        },
        // The selected token and range (token indices, both ends included), and for a range the
        // tokens of each group in the selected layer (raw indices) and its byte span.
        "selection": {
            "token": selection.selected,
            "range": selection.range.map(|(a, b)| [a, b]),
            "range_group_tokens": selection.range.filter(|&(_, b)| b < res.tokens()).map(|(a, b)| {
                let layer = settings.setup.layer.min(res.layers().saturating_sub(1));
                let mut n = vec![0usize; res.groups()];
                for &g in &res.argmax[layer][a..=b] {
                    n[g as usize] += 1;
                }
                n
            }),
            "range_bytes": selection.range.filter(|&(_, b)| b < res.tokens()).map(|(a, b)| [res.analysis.tokens[a].start, res.analysis.tokens[b].end]),
        },
    })
}

/// The assignment statistics of `res` as CSV or JSON (the JSON with its `provenance`).
pub fn stats(res: &AnalysisResult, kind: ExportKind, provenance: serde_json::Value) -> Result<String, String> {
    match kind {
        ExportKind::StatsJson => {
            let mut v = serde_json::to_value(&res.analysis).map_err(|e| e.to_string())?;
            if let Some(o) = v.as_object_mut() {
                o.insert("provenance".into(), provenance);
            }
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
        }
        _ => Ok(res.analysis.to_csv()),
    }
}

/// The CSV set `focus-lens analyze --out STEM.csv` writes: the per-group file at `path`, the
/// category profiles at STEM.profiles.csv and the tokens at STEM.tokens.csv (each atomically).
/// Returns the paths written.
pub fn write_csv_set(res: &AnalysisResult, path: &Path) -> Result<Vec<PathBuf>, String> {
    write_all(vec![
        (path.to_path_buf(), res.analysis.to_csv()),
        (path.with_extension("profiles.csv"), res.analysis.profiles_csv()),
        (path.with_extension("tokens.csv"), res.analysis.tokens_csv()),
    ])
}

/// The compare view's CSV set: the per-token table at `path` and the per-layer figures at
/// STEM.layers.csv (each atomically). Returns the paths written.
pub fn write_compare_csv(c: &focus_core::analysis::compare::Comparison, path: &Path, layer: usize, head: usize) -> Result<Vec<PathBuf>, String> {
    write_all(vec![(path.to_path_buf(), c.csv(layer, head)), (path.with_extension("layers.csv"), c.layers_csv(head))])
}

/// Writes each (path, text), atomically, in order; returns the paths written.
fn write_all(files: Vec<(PathBuf, String)>) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for (p, text) in files {
        write(&p, text.as_bytes()).map_err(|e| format!("{}: {e}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// Writes `bytes` to `path` atomically (a reader never sees half a file).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    focus_core::io::write_atomic(path, bytes).map_err(|e| e.to_string())
}

/// Asks eframe for a screenshot; its callback crops it to `rect` (the central view), writes the
/// PNG to `path` and hands the outcome to `done` (from the callback, in a later frame).
pub fn request_png(ctx: &egui::Context, rect: egui::Rect, path: PathBuf, done: impl FnOnce(Result<PathBuf, String>) + Send + 'static) {
    let ppp = ctx.pixels_per_point();
    let ctx2 = ctx.clone();
    let cb = egui::ScreenshotCallback::new(move |img| {
        done(save_png(&img, rect, ppp, &path).map(|_| path.clone()));
        ctx2.request_repaint();
    });
    ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(cb));
}

/// Crops `img` (physical pixels) to `rect` (points) and writes it as PNG.
pub fn save_png(img: &egui::ColorImage, rect: egui::Rect, ppp: f32, path: &Path) -> Result<(), String> {
    let [w, h] = img.size;
    let x0 = ((rect.min.x * ppp).round().max(0.0) as usize).min(w);
    let y0 = ((rect.min.y * ppp).round().max(0.0) as usize).min(h);
    let x1 = ((rect.max.x * ppp).round() as usize).clamp(x0, w);
    let y1 = ((rect.max.y * ppp).round() as usize).clamp(y0, h);
    let mut out = image::RgbaImage::new((x1 - x0) as u32, (y1 - y0) as u32);
    for y in y0..y1 {
        for x in x0..x1 {
            let c = img.pixels[y * w + x];
            out.put_pixel((x - x0) as u32, (y - y0) as u32, image::Rgba([c.r(), c.g(), c.b(), c.a()]));
        }
    }
    let mut bytes = Vec::new();
    out.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).map_err(|e| format!("PNG encoding: {e}"))?;
    write(path, &bytes)
}
