//! What every export shares: the kinds (statistics as CSV or JSON, the current view as SVG or
//! PNG) and their default file names, the statistics (core's `analysis::export`, the same files
//! `focus-lens analyze --out` writes, with the GUI's provenance), the atomic file write, and the
//! PNG path (a screenshot of the central view, cropped and encoded). `svg` is the SVG writer and
//! its charts; `arrow` the per-token groups as Arrow IPC; `manifest` a set of files as plain
//! files with the manifest that says they belong together. Every export carries where it came
//! from (`fingerprints`: the app version, the model and adapter with their fingerprints): the
//! JSON in its provenance, a set in its manifest, an SVG in its `<metadata>`, a PNG in a text
//! chunk. Each view's own SVG is drawn next to the view, in `views/`.

pub mod arrow;
pub mod manifest;
pub mod svg;

use super::state::{AnalysisResult, Settings};
use focus_core::analysis::export::StatsExport;
use focus_core::analysis::shown::Numbering;
use focus_core::analysis::structure::StructureReport;
use std::path::{Path, PathBuf};

/// The SHA-256 of `bytes` in lowercase hex (the provenance's text hashes).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

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
        "model_fingerprint": res.model.fingerprint,
        "adapter_sha256": res.adapter_sha256,
        "model_path": path(&settings.inputs.model).unwrap_or_else(|| format!("default: {}", crate::defaults::default_model_path().display())),
        "adapter_path": path(&settings.inputs.adapter).unwrap_or_else(|| format!("embedded default: {}", crate::defaults::SAMPLE_ADAPTER_NAME)),
        "text_path": path(&settings.inputs.text).unwrap_or_else(|| format!("embedded default: {}", crate::defaults::SAMPLE_TEXT_NAME)),
        "text_sha256": text.map(|t| sha256_hex(t.as_bytes())),
        "text_bytes": text.map(str::len),
        "analysed_bytes": analysed,
        "analysed_sha256": text.and_then(|t| t.get(..analysed)).map(|t| sha256_hex(t.as_bytes())),
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
        // How the exported group numbers relate to the adapter's centroids: the numbers the
        // screen shows (matched across layers, or to a compared run), or the raw indices when the
        // user ticked "raw group numbers". Each layer's `group_raw_of_shown` maps them back.
        "group_numbers": Numbering::raw_if(settings.setup.raw_groups).note(),
        "groups_aligned_to": res.aligned_to,
        // The selected token and range (token indices, both ends included), and for a range the
        // tokens of each group in the selected layer (by shown number) and its byte span.
        "selection": {
            "token": selection.selected,
            "range": selection.range.map(|(a, b)| [a, b]),
            "range_group_tokens": selection.range.filter(|&(_, b)| b < res.tokens()).map(|(a, b)| {
                let layer = settings.setup.layer.min(res.layers().saturating_sub(1));
                let mut n = vec![0usize; res.groups()];
                for &g in &res.argmax[layer][a..=b] {
                    let s = res.shown_group(layer, g as usize, settings.setup.raw_groups);
                    if s >= n.len() {
                        n.resize(s + 1, 0);
                    }
                    n[s] += 1;
                }
                n
            }),
            "range_bytes": selection.range.filter(|&(_, b)| b < res.tokens()).map(|(a, b)| [res.analysis.tokens[a].start, res.analysis.tokens[b].end]),
        },
    })
}

/// The statistics of `res` as core writes them (`analysis::export`, numbered as shown unless
/// `raw`: the "raw group numbers" setting), with the structure of its analysis (no untrained twin:
/// `focus-lens analyze --no-twin`'s).
pub fn stats_export(res: &AnalysisResult, raw: bool) -> StatsExport<'_> {
    StatsExport::new(&res.shown, Numbering::raw_if(raw), &StructureReport::of_analysis(&res.analysis, None))
}

/// The statistics of `res` as JSON, with its `provenance`.
pub fn stats_json(res: &AnalysisResult, provenance: serde_json::Value, raw: bool) -> Result<String, String> {
    stats_export(res, raw).json(Some(&provenance)).map_err(|e| e.to_string())
}

/// The CSV set `focus-lens analyze --out STEM.csv` writes (`analysis::export::StatsExport::files`:
/// per group at `path`, category profiles, tokens, each token's group per layer as CSV and Arrow
/// IPC, the structure and its table), as plain files with their manifest
/// (`manifest::write_set`, the provenance `fingerprints`). Returns the paths written.
pub fn write_csv_set(res: &AnalysisResult, path: &Path, raw: bool) -> Result<Vec<PathBuf>, String> {
    let files = stats_export(res, raw).files(path, None, &arrow::token_groups_arrow).map_err(|e| e.to_string())?;
    manifest::write_set(&files, &fingerprints(res))
}

/// The compare view's CSV set: the per-token table at `path` and the per-layer figures at
/// STEM.layers.csv, with their manifest. Returns the paths written.
pub fn write_compare_csv(c: &crate::gui::compared::Compared, res: &AnalysisResult, path: &Path, layer: usize, head: usize) -> Result<Vec<PathBuf>, String> {
    let files = vec![(path.to_path_buf(), c.csv(layer, head).into_bytes()), (path.with_extension("layers.csv"), c.layers_csv(head).into_bytes())];
    manifest::write_set(&files, &fingerprints(res))
}

/// Where an analysis came from, as every export records it: the app and its version, the model
/// (name, file, weights' fingerprint) and the adapter (name, the SHA-256 of its files: the
/// embedded default's changed between versions), and what the group numbers are matched to.
pub fn fingerprints(res: &AnalysisResult) -> serde_json::Value {
    serde_json::json!({
        "app": format!("focus-lens {}", env!("CARGO_PKG_VERSION")),
        "model": res.analysis.model,
        "model_fingerprint": res.model.fingerprint,
        "adapter": res.analysis.adapter,
        "adapter_sha256": res.adapter_sha256,
        "mode": res.analysis.mode,
        "groups_aligned_to": res.aligned_to,
    })
}

/// `svg` with the provenance in a `<metadata>` element (after the root's opening tag), and
/// `what` (the range the file holds, say) in a `<desc>`.
pub fn svg_with_provenance(svg: &str, provenance: &serde_json::Value, what: Option<&str>) -> String {
    let Some(start) = svg.find("<svg") else { return svg.to_string() };
    let Some(end) = svg[start..].find('>').map(|e| start + e + 1) else { return svg.to_string() };
    let meta = svg::escape(&provenance.to_string());
    let desc = what.map(|w| format!("<desc>{}</desc>\n", svg::escape(w))).unwrap_or_default();
    format!("{}\n<metadata>{meta}</metadata>\n{desc}{}", &svg[..end], &svg[end..])
}

/// A PNG with `text` in a tEXt chunk of `keyword` (right after the header chunk).
pub fn png_with_text(png: &[u8], keyword: &str, text: &str) -> Vec<u8> {
    // The signature (8 bytes), then IHDR: length 13, so 25 bytes with its type and CRC.
    const AFTER_IHDR: usize = 8 + 25;
    if png.len() < AFTER_IHDR || &png[12..16] != b"IHDR" {
        return png.to_vec();
    }
    let mut data = Vec::with_capacity(keyword.len() + 1 + text.len());
    data.extend_from_slice(keyword.as_bytes());
    data.push(0);
    // tEXt is Latin-1: anything else is written as an escape.
    data.extend(text.chars().flat_map(|c| if (c as u32) < 0x100 { vec![c as u8] } else { c.escape_unicode().to_string().into_bytes() }));
    let mut chunk = Vec::with_capacity(12 + data.len());
    chunk.extend_from_slice(&(data.len() as u32).to_be_bytes());
    chunk.extend_from_slice(b"tEXt");
    chunk.extend_from_slice(&data);
    chunk.extend_from_slice(&crc32(&chunk[4..]).to_be_bytes());
    let mut out = png[..AFTER_IHDR].to_vec();
    out.extend_from_slice(&chunk);
    out.extend_from_slice(&png[AFTER_IHDR..]);
    out
}

/// CRC-32 (ISO-HDLC, as PNG chunks use).
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in bytes {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

/// Writes `bytes` to `path` atomically (a reader never sees half a file).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    focus_core::io::write_atomic(path, bytes).map_err(|e| e.to_string())
}

/// Asks eframe for a screenshot; its callback crops it to `rect` (the central view), writes the
/// PNG to `path` and hands the outcome to `done` (from the callback, in a later frame).
/// `text`: the provenance, written into the PNG (`png_with_text`).
pub fn request_png(ctx: &egui::Context, rect: egui::Rect, path: PathBuf, text: Option<String>, done: impl FnOnce(Result<PathBuf, String>) + Send + 'static) {
    let ppp = ctx.pixels_per_point();
    let ctx2 = ctx.clone();
    let cb = egui::ScreenshotCallback::new(move |img| {
        done(save_png_with(&img, rect, ppp, &path, text.as_deref()).map(|_| path.clone()));
        ctx2.request_repaint();
    });
    ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(cb));
}

/// Crops `img` (physical pixels) to `rect` (points) and writes it as PNG.
pub fn save_png(img: &egui::ColorImage, rect: egui::Rect, ppp: f32, path: &Path) -> Result<(), String> {
    save_png_with(img, rect, ppp, path, None)
}

/// `save_png` with `text` (the provenance) in a tEXt chunk named "focus-lens".
pub fn save_png_with(img: &egui::ColorImage, rect: egui::Rect, ppp: f32, path: &Path, text: Option<&str>) -> Result<(), String> {
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
    if let Some(t) = text {
        bytes = png_with_text(&bytes, "focus-lens", t);
    }
    write(path, &bytes)
}
