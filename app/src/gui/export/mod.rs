//! What every export shares: the kinds (statistics as CSV or JSON, the current view as SVG or
//! PNG) and their default file names, the statistics themselves (the same as `focus-lens
//! analyze`), the atomic file write, and the PNG path (a screenshot of the central view, cropped
//! and encoded). `svg` is the SVG writer and its charts. Each view's own SVG is drawn next to the
//! view, in `views/`.

pub mod svg;

use super::state::{AnalysisResult, Settings};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    StatsCsv,
    StatsJson,
    ViewSvg,
    ViewPng,
}

impl ExportKind {
    pub const ALL: [ExportKind; 4] = [ExportKind::StatsCsv, ExportKind::StatsJson, ExportKind::ViewSvg, ExportKind::ViewPng];
    pub fn label(self) -> &'static str {
        match self {
            ExportKind::StatsCsv => "Statistics as CSV…",
            ExportKind::StatsJson => "Statistics as JSON…",
            ExportKind::ViewSvg => "Current view as SVG…",
            ExportKind::ViewPng => "Current view as PNG…",
        }
    }
    pub fn ext(self) -> &'static str {
        match self {
            ExportKind::StatsCsv => "csv",
            ExportKind::StatsJson => "json",
            ExportKind::ViewSvg => "svg",
            ExportKind::ViewPng => "png",
        }
    }
}

/// The file name an export gets by default.
pub fn default_name(settings: &Settings, kind: ExportKind) -> String {
    let what = match kind {
        ExportKind::StatsCsv | ExportKind::StatsJson => "stats".to_string(),
        _ => format!("{}-layer{}", settings.tab.label().to_lowercase().replace(' ', "-"), settings.layer),
    };
    format!("focus-lens-{what}.{}", kind.ext())
}

/// The assignment statistics of `res` as CSV or JSON.
pub fn stats(res: &AnalysisResult, kind: ExportKind) -> Result<String, String> {
    match kind {
        ExportKind::StatsJson => serde_json::to_string_pretty(&res.analysis).map_err(|e| e.to_string()),
        _ => Ok(res.analysis.to_csv()),
    }
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
