//! What every export shares: the kinds (statistics as CSV or JSON, the current view as SVG or
//! PNG) and their default file names, the statistics themselves (the same as `focus-lens
//! analyze`), the atomic file write, and the PNG path (a screenshot of the central view, cropped
//! and encoded). `svg` is the SVG writer and its charts. Each view's own SVG is drawn next to the
//! view, in `views/`.

pub mod arrow;
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
        // How the exported group numbers relate to the adapter's centroids: the numbers the
        // screen shows (matched across layers, or to a compared run), or the raw indices when the
        // user ticked "raw group numbers". Each layer's `group_raw_of_shown` maps them back.
        "group_numbers": if settings.setup.raw_groups { "raw centroid indices (as shown with raw group numbers ticked)" } else { "shown: matched across layers (align::chain) or to the compared run, as on screen; group_raw columns give the centroid index" },
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

/// The assignment statistics of `res` as CSV or JSON (the JSON with its `provenance`), group
/// numbers as shown (`raw`: the "raw group numbers" setting).
pub fn stats(res: &AnalysisResult, kind: ExportKind, provenance: serde_json::Value, raw: bool) -> Result<String, String> {
    match kind {
        ExportKind::StatsJson => {
            let mut v = serde_json::to_value(&res.analysis).map_err(|e| e.to_string())?;
            renumber_json(res, raw, &mut v);
            if let Some(o) = v.as_object_mut() {
                o.insert("provenance".into(), provenance);
            }
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
        }
        _ => Ok(groups_csv(res, raw)),
    }
}

/// `shown[g]` for each raw group of `layer`, and its inverse (`raw_of[s]`, None where no raw
/// group shows as `s`: a run aligned to one of larger K).
fn group_maps(res: &AnalysisResult, layer: usize, raw: bool) -> (Vec<usize>, Vec<Option<usize>>) {
    let shown: Vec<usize> = (0..res.groups()).map(|g| res.shown_group(layer, g, raw)).collect();
    let n = shown.iter().map(|&s| s + 1).max().unwrap_or(0).max(res.groups());
    let mut raw_of = vec![None; n];
    for (g, &s) in shown.iter().enumerate() {
        raw_of[s] = Some(g);
    }
    (shown, raw_of)
}

/// Rewrites the rows of a core CSV whose first two fields are `layer,group` (raw): `group`
/// becomes the shown number, `group_raw` follows it, rows sorted by (layer, shown group).
fn renumber_csv(res: &AnalysisResult, raw: bool, csv: &str) -> String {
    let mut lines = csv.lines();
    let Some(header) = lines.next() else { return String::new() };
    let (a, rest) = header.split_once(',').unwrap_or((header, ""));
    let (b, rest) = rest.split_once(',').unwrap_or((rest, ""));
    let mut out = format!("{a},{b},group_raw,{rest}\n");
    let mut rows: Vec<(usize, usize, String)> = lines
        .map(|line| {
            let mut f = line.splitn(3, ',');
            let layer: usize = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let g: usize = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let rest = f.next().unwrap_or("");
            let s = res.shown_group(layer, g, raw);
            (layer, s, format!("{layer},{s},{g},{rest}\n"))
        })
        .collect();
    rows.sort_by_key(|r| (r.0, r.1));
    rows.into_iter().for_each(|r| out += &r.2);
    out
}

/// The per-group CSV with the shown group numbers and a `group_raw` column.
pub fn groups_csv(res: &AnalysisResult, raw: bool) -> String {
    renumber_csv(res, raw, &res.analysis.to_csv())
}

/// The category profiles CSV with the shown group numbers and a `group_raw` column.
pub fn profiles_csv(res: &AnalysisResult, raw: bool) -> String {
    renumber_csv(res, raw, &res.analysis.profiles_csv())
}

/// One row per (token, layer), tidy: the token's index and text, the layer, its top group as
/// shown and raw, its confidence (largest membership; empty when the analysis kept no
/// per-token routing) and its word's category.
pub fn token_groups_csv(res: &AnalysisResult, raw: bool) -> String {
    let mut s = String::from("token,text,layer,group,group_raw,confidence,category\n");
    for (i, t) in res.analysis.tokens.iter().enumerate() {
        let text = csv_field(&t.text);
        for layer in 0..res.layers() {
            let g = res.argmax[layer][i] as usize;
            let conf = res.token_routing(layer, i).map(|r| format!("{:.6}", r.confidence)).unwrap_or_default();
            s += &format!("{i},{text},{layer},{},{g},{conf},{}\n", res.shown_group(layer, g, raw), t.category);
        }
    }
    s
}

/// A CSV field, quoted (RFC 4180) when it holds a comma, quote or line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The analysis JSON with group numbers as shown: each layer's per-group arrays indexed by shown
/// number (null where no group shows as that number), its tokens' `top` and `memberships` the
/// same way, the profiles' `group` shown with `group_raw` beside it, and each layer's
/// `group_raw_of_shown` mapping.
fn renumber_json(res: &AnalysisResult, raw: bool, v: &mut serde_json::Value) {
    use serde_json::Value;
    let permute = |arr: &mut Value, raw_of: &[Option<usize>]| {
        if let Some(a) = arr.as_array() {
            let new: Vec<Value> = raw_of.iter().map(|r| r.and_then(|g| a.get(g).cloned()).unwrap_or(Value::Null)).collect();
            *arr = Value::Array(new);
        }
    };
    if let Some(layers) = v.get_mut("layers").and_then(Value::as_array_mut) {
        for (l, lv) in layers.iter_mut().enumerate() {
            let (shown, raw_of) = group_maps(res, l, raw);
            for key in ["group_size", "mass_before", "mass_after"] {
                if let Some(a) = lv.get_mut(key) {
                    permute(a, &raw_of);
                }
            }
            if let Some(toks) = lv.get_mut("tokens").and_then(Value::as_array_mut) {
                for t in toks {
                    if let Some(m) = t.get_mut("memberships") {
                        permute(m, &raw_of);
                    }
                    if let Some(top) = t.get_mut("top").and_then(Value::as_array_mut) {
                        for g in top.iter_mut() {
                            if let Some(x) = g.as_u64() {
                                *g = Value::from(shown.get(x as usize).copied().unwrap_or(x as usize));
                            }
                        }
                    }
                }
            }
            if let Some(o) = lv.as_object_mut() {
                o.insert("group_raw_of_shown".into(), serde_json::json!(raw_of));
            }
        }
    }
    if let Some(profiles) = v.get_mut("profiles").and_then(Value::as_array_mut) {
        for (l, pv) in profiles.iter_mut().enumerate() {
            let layer = pv.get("layer").and_then(Value::as_u64).map(|x| x as usize).unwrap_or(l);
            if let Some(cs) = pv.get_mut("centroids").and_then(Value::as_array_mut) {
                for c in cs.iter_mut() {
                    let g = c.get("group").and_then(Value::as_u64).unwrap_or(0) as usize;
                    if let Some(o) = c.as_object_mut() {
                        o.insert("group".into(), Value::from(res.shown_group(layer, g, raw)));
                        o.insert("group_raw".into(), Value::from(g));
                    }
                }
                cs.sort_by_key(|c| c.get("group").and_then(Value::as_u64).unwrap_or(0));
            }
        }
    }
}

/// The CSV set `focus-lens analyze --out STEM.csv` writes, with group numbers as shown (and
/// `group_raw` beside them): the per-group file at `path`, the category profiles at
/// STEM.profiles.csv, the tokens at STEM.tokens.csv, and each token's group in every layer at
/// STEM.groups.csv and, with its memberships, as Arrow IPC at STEM.groups.arrow (`arrow`), all
/// as one set (`write_all`). Returns the paths written.
pub fn write_csv_set(res: &AnalysisResult, path: &Path, raw: bool) -> Result<Vec<PathBuf>, String> {
    write_all(vec![
        (path.to_path_buf(), groups_csv(res, raw).into_bytes()),
        (path.with_extension("profiles.csv"), profiles_csv(res, raw).into_bytes()),
        (path.with_extension("tokens.csv"), res.analysis.tokens_csv().into_bytes()),
        (path.with_extension("groups.csv"), token_groups_csv(res, raw).into_bytes()),
        (path.with_extension("groups.arrow"), arrow::token_groups_arrow(res, raw)?),
    ])
}

/// The compare view's CSV set: the per-token table at `path` and the per-layer figures at
/// STEM.layers.csv (as one set). Returns the paths written.
pub fn write_compare_csv(c: &crate::gui::compared::Compared, path: &Path, layer: usize, head: usize) -> Result<Vec<PathBuf>, String> {
    write_all(vec![(path.to_path_buf(), c.csv(layer, head).into_bytes()), (path.with_extension("layers.csv"), c.layers_csv(head).into_bytes())])
}

/// Writes the files as one set (`focus_core::io::write_atomic_set`: the visible names show the
/// whole old set or the whole new one at every instant); returns the paths written.
fn write_all(files: Vec<(PathBuf, Vec<u8>)>) -> Result<Vec<PathBuf>, String> {
    let paths = files.iter().map(|(p, _)| p.clone()).collect();
    focus_core::io::write_atomic_set(&files).map_err(|e| e.to_string())?;
    Ok(paths)
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
