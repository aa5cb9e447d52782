//! Exports: assignment statistics (CSV, JSON: the same as `focus-lens analyze`), the current view
//! as SVG (our own writer: vector output for papers) or PNG (a screenshot of the view). Every
//! file is written atomically.

use super::app::FocusLensApp;
use super::dialogs::Purpose;
use super::jobs::MaskImage;
use super::palette;
use super::panels::tokens::display_text;
use super::state::{AnalysisResult, AttnBenchState, BenchKind, BenchState, Tab};
use super::svg::{bar_chart, line_chart, Series, Svg};
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
pub fn default_name(app: &FocusLensApp, kind: ExportKind) -> String {
    let what = match kind {
        ExportKind::StatsCsv | ExportKind::StatsJson => "stats".to_string(),
        _ => format!("{}-layer{}", app.settings.tab.label().to_lowercase().replace(' ', "-"), app.settings.layer),
    };
    format!("focus-lens-{what}.{}", kind.ext())
}

/// The Export menu: asks for a path (a native dialog, answered in a later frame through
/// `export_to`), or writes into `export_dir` at once when that is set.
pub fn export(app: &mut FocusLensApp, kind: ExportKind) {
    if app.result.is_none() {
        app.errors.push("nothing to export yet: no analysis has finished".into());
        return;
    }
    let name = default_name(app, kind);
    match &app.export_dir {
        Some(d) => {
            let path = d.join(name);
            export_to(app, kind, path)
        }
        None => {
            let ctx = app.worker_context();
            app.dialogs.show(Purpose::Export(kind), &name, ctx);
        }
    }
}

/// Writes the export to `path` (the path chosen in the dialog).
pub fn export_to(app: &mut FocusLensApp, kind: ExportKind, path: PathBuf) {
    let Some(res) = app.result.clone() else {
        app.errors.push("nothing to export yet: no analysis has finished".into());
        return;
    };
    if kind == ExportKind::ViewPng {
        request_png(app, path);
        return;
    }
    let bytes = match kind {
        ExportKind::StatsCsv => Ok(res.analysis.to_csv()),
        ExportKind::StatsJson => serde_json::to_string_pretty(&res.analysis).map_err(|e| e.to_string()),
        ExportKind::ViewSvg => view_svg(app, &res),
        ExportKind::ViewPng => unreachable!(),
    };
    match bytes.and_then(|b| focus_core::io::write_atomic(&path, b.as_bytes()).map_err(|e| e.to_string())) {
        Ok(()) => app.status = format!("wrote {}", path.display()),
        Err(e) => app.errors.push(format!("export to {} failed: {e}", path.display())),
    }
}

/// The SVG of the current tab.
pub fn view_svg(app: &FocusLensApp, res: &AnalysisResult) -> Result<String, String> {
    let layer = app.settings.layer.min(res.layers() - 1);
    Ok(match app.settings.tab {
        Tab::Tokens => tokens_svg(res, &[layer], 100, 4000),
        Tab::Layers => tokens_svg(res, &app.settings.side_layers, 48, 1500),
        Tab::Balance => balance_svg(res, layer),
        Tab::Mask => match app.panels.mask.current(&res.key, layer) {
            Some(m) => mask_svg(m, res, 128),
            None => return Err("the mask image is still being built: try again in a moment".into()),
        },
        Tab::Speed if app.settings.bench_kind == BenchKind::Attention => match &app.attn_bench {
            Some(b) if !b.current_rows().is_empty() => attention_svg(b, res),
            _ => return Err("no benchmark results yet: run the benchmark first".into()),
        },
        Tab::Speed => match &app.bench {
            Some(b) if !b.current_rows().is_empty() => speed_svg(b, res),
            _ => return Err("no benchmark results yet: run the benchmark first".into()),
        },
        Tab::Categories => categories_svg(res, layer)?,
        Tab::Routing => routing_svg(res, layer)?,
    })
}

/// Tokens of the first `max_tokens` tokens coloured by group, one column per layer, wrapped at
/// `cols` characters (monospace), with a legend per column.
pub fn tokens_svg(res: &AnalysisResult, layers: &[usize], cols: usize, max_tokens: usize) -> String {
    let size = 11.0;
    let cw = size * 0.6;
    let row = size * 1.6;
    let n = res.tokens().min(max_tokens);
    // Line breaks by character count, the same for every column.
    let mut pos = Vec::with_capacity(n);
    let (mut line, mut x) = (0usize, 0usize);
    for t in &res.analysis.tokens[..n] {
        let len = display_text(&t.text).chars().count();
        if x > 0 && x + len > cols {
            line += 1;
            x = 0;
        }
        pos.push((line, x));
        x += len;
        if t.text.contains('\n') {
            line += 1;
            x = 0;
        }
    }
    let col_w = cols as f64 * cw + 30.0;
    let legend_h = (res.groups() as f64 + 2.0) * row;
    let height = legend_h + (line + 2) as f64 * row + 20.0;
    let mut s = Svg::new(col_w * layers.len().max(1) as f64 + 20.0, height);
    for (c, &l) in layers.iter().enumerate() {
        let x0 = 10.0 + c as f64 * col_w;
        let ls = &res.analysis.layers[l];
        s.text(x0, row, &format!("layer {l} ({} of {} tokens)", n, res.tokens()), size + 2.0, "black", "start");
        for g in 0..res.groups() {
            let y = row * (g as f64 + 1.5);
            s.rect(x0, y, 10.0, 10.0, &palette::hex(palette::group(g)), None);
            s.text(x0 + 14.0, y + 9.0, &format!("g{g}: {} tokens, {}", ls.group_size[g], res.labels[l][g]), size, "black", "start");
        }
        for (i, t) in res.analysis.tokens[..n].iter().enumerate() {
            let (ln, cx) = pos[i];
            let txt = display_text(&t.text);
            let (x, y) = (x0 + cx as f64 * cw, legend_h + ln as f64 * row);
            let g = res.argmax[l][i] as usize;
            s.rect(x, y, txt.chars().count() as f64 * cw, row - 2.0, &palette::hex(palette::group(g)), None);
            s.mono(x, y + row * 0.7, &txt, size);
        }
    }
    s.finish()
}

/// Stacks SVG documents vertically into one.
pub fn stack(docs: &[String], width: f64, heights: &[f64]) -> String {
    let total: f64 = heights.iter().sum();
    let mut out = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{total}\" viewBox=\"0 0 {width} {total}\">\n");
    let mut y = 0.0;
    for (d, h) in docs.iter().zip(heights) {
        let body = d.split_once("?>\n").map(|x| x.1).unwrap_or(d);
        out += &body.replacen("<svg ", &format!("<svg y=\"{y}\" "), 1);
        y += h;
    }
    out + "</svg>\n"
}

pub fn balance_svg(res: &AnalysisResult, layer: usize) -> String {
    let l = &res.analysis.layers[layer];
    let k = res.groups() as f64;
    let cats: Vec<String> = (0..res.groups()).map(|g| format!("g{g}")).collect();
    let mass = bar_chart(
        &format!("layer {layer}: membership mass per group"),
        &cats,
        &[("before Sinkhorn".into(), "#9ecae1".into(), l.mass_before.clone()), ("after Sinkhorn".into(), "#3182bd".into(), l.mass_after.clone())],
        Some(("ideal 1/K".into(), 1.0 / k)),
    );
    let per_layer = |f: fn(&focus_core::stats::LayerStats) -> f64| res.analysis.layers.iter().map(|l| (l.layer as f64, f(l))).collect::<Vec<_>>();
    let dom = line_chart(
        "dominance per layer",
        "layer",
        "share of tokens in the largest group",
        &[Series { name: "dominance".into(), color: "#d62728".into(), points: per_layer(|l| l.dominance), dashed: false }],
        &[("ideal 1/K".into(), 1.0 / k)],
    );
    let conf = line_chart(
        "mean confidence per layer",
        "layer",
        "largest membership",
        &[Series { name: "confidence".into(), color: "#2ca02c".into(), points: per_layer(|l| l.mean_confidence), dashed: false }],
        &[("uniform 1/K".into(), 1.0 / k)],
    );
    let ent = line_chart(
        "mean membership entropy per layer",
        "layer",
        "nats",
        &[Series { name: "entropy".into(), color: "#9467bd".into(), points: per_layer(|l| l.mean_entropy), dashed: false }],
        &[("uniform ln K".into(), k.ln())],
    );
    stack(&[mass, dom, conf, ent], 640.0, &[400.0; 4])
}

/// The mask in at most `max_side` blocks per side (blocks of the screen image merged).
pub fn mask_svg(m: &MaskImage, res: &AnalysisResult, max_side: usize) -> String {
    let merge = m.side.div_ceil(max_side.max(1)).max(1);
    let side = m.side.div_ceil(merge);
    let mut counts = vec![[0u64; 3]; side * side];
    for bi in 0..m.side {
        for bj in 0..m.side {
            let c = m.counts[bi * m.side + bj];
            let o = &mut counts[(bi / merge) * side + bj / merge];
            for n in 0..3 {
                o[n] += c[n] as u64;
            }
        }
    }
    let cell = (600.0 / side as f64).max(1.0);
    let top = 60.0;
    let mut s = Svg::new(side as f64 * cell + 40.0, side as f64 * cell + top + 30.0);
    s.text(
        20.0,
        20.0,
        &format!("layer {}: hard top-k mask, {:.3}% of causal pairs retained; {} tokens in blocks of {}", m.layer, 100.0 * res.analysis.layers[m.layer].pairs.retained, m.tokens, m.block * merge),
        13.0,
        "black",
        "start",
    );
    let mut lx = 20.0;
    for (c, name) in [(palette::LOCAL, "local"), (palette::SAME_GROUP, "same group"), (palette::PRUNED, "pruned")] {
        s.rect(lx, 32.0, 10.0, 10.0, &palette::hex(c), None);
        s.text(lx + 14.0, 41.0, name, 11.0, "black", "start");
        lx += 110.0;
    }
    for bi in 0..side {
        for bj in 0..=bi.min(side - 1) {
            let [l, g, p] = counts[bi * side + bj];
            if l + g + p == 0 {
                continue;
            }
            let c = palette::mix(&[(palette::LOCAL, l as f32), (palette::SAME_GROUP, g as f32), (palette::PRUNED, p as f32)]);
            s.rect(20.0 + bj as f64 * cell, top + bi as f64 * cell, cell, cell, &palette::hex(c), None);
        }
    }
    s.finish()
}

pub fn speed_svg(b: &BenchState, res: &AnalysisResult) -> String {
    let rows = b.current_rows();
    let pts = |f: fn(&focus_core::bench::BenchRow) -> f64| rows.iter().map(|r| (r.tokens as f64, f(r))).collect::<Vec<_>>();
    let measured = Series { name: "measured".into(), color: "#2ca02c".into(), points: pts(|r| r.topk_over_dense_speed), dashed: false };
    time_and_speedup(res, ("prefill time", "seconds"), pts(|r| r.dense_s), pts(|r| r.topk_s), vec![measured])
}

pub fn attention_svg(b: &AttnBenchState, res: &AnalysisResult) -> String {
    let rows = b.current_rows();
    let pts = |f: fn(&focus_core::bench::AttentionRow) -> Option<f64>| rows.iter().filter_map(|r| f(r).map(|y| (r.n as f64, y))).collect::<Vec<_>>();
    let speed = vec![
        Series { name: "measured".into(), color: "#2ca02c".into(), points: pts(|r| r.speedup), dashed: false },
        Series { name: "bound 1/pairs".into(), color: "#d62728".into(), points: pts(|r| Some(r.bound)), dashed: true },
    ];
    time_and_speedup(res, ("attention time (one call, all heads)", "ms"), pts(|r| r.dense_ms), pts(|r| r.focus_ms), speed)
}

/// The two speed charts of both benchmarks: dense vs Focus time, and the speedup with the
/// long-length limit of the pair bound, K/k and 1 as reference lines.
fn time_and_speedup(res: &AnalysisResult, (title, unit): (&str, &str), dense: Vec<(f64, f64)>, focus: Vec<(f64, f64)>, speed: Vec<Series>) -> String {
    let k = res.key.params.k.clamp(1, res.groups().max(1));
    let (kk, limit) = (res.groups() as f64 / k as f64, focus_core::bench::bound_limit(res.groups(), k));
    let time = line_chart(
        title,
        "tokens",
        unit,
        &[
            Series { name: "dense".into(), color: "#1f77b4".into(), points: dense, dashed: false },
            Series { name: "Focus top-k".into(), color: "#ff7f0e".into(), points: focus, dashed: false },
        ],
        &[],
    );
    let speed = line_chart(
        "speedup (dense / Focus)",
        "tokens",
        "x",
        &speed,
        &[(format!("limit = {limit:.2}"), limit), (format!("theoretical K/k = {kk:.1}"), kk), ("1".into(), 1.0)],
    );
    stack(&[time, speed], 640.0, &[400.0, 400.0])
}

/// Asks eframe for a screenshot; the callback crops it to the central view and writes the PNG.
fn request_png(app: &mut FocusLensApp, path: PathBuf) {
    let Some(rect) = app.view_rect else {
        app.errors.push("PNG export: the view has not been drawn yet".into());
        return;
    };
    let Some(ctx) = app.worker_context() else {
        app.errors.push("PNG export needs the window".into());
        return;
    };
    let ppp = ctx.pixels_per_point();
    let (tx, rx) = std::sync::mpsc::channel();
    app.png_rx = Some(rx);
    let ctx2 = ctx.clone();
    let cb = egui::ScreenshotCallback::new(move |img| {
        let r = save_png(&img, rect, ppp, &path).map(|_| path.clone());
        let _ = tx.send(r);
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
    focus_core::io::write_atomic(path, &bytes).map_err(|e| e.to_string())
}

/// The K x category matrix of one layer with purity and labels.
pub fn categories_svg(res: &AnalysisResult, layer: usize) -> Result<String, String> {
    let p = res.analysis.profiles.get(layer).ok_or("no category profile for this layer")?;
    let (cell_w, cell_h, left, top) = (70.0, 22.0, 60.0, 60.0);
    let ncat = p.categories.len();
    let width = left + cell_w * (ncat as f64 + 1.0) + 260.0;
    let height = top + cell_h * (p.centroids.len() as f64 + 1.0);
    let mut s = Svg::new(width, height);
    s.text(10.0, 20.0, &format!("layer {layer}: tokens per group (largest membership) by category"), 14.0, "black", "start");
    for (c, cat) in p.categories.iter().enumerate() {
        s.text(left + cell_w * (c as f64 + 0.5), top - 8.0, cat.name(), 10.0, "black", "middle");
    }
    s.text(left + cell_w * (ncat as f64 + 0.5), top - 8.0, "purity", 10.0, "black", "middle");
    for (r, c) in p.centroids.iter().enumerate() {
        let y = top + r as f64 * cell_h;
        s.rect(10.0, y + 3.0, 40.0, cell_h - 6.0, &palette::hex(palette::group(c.group)), None);
        s.text(30.0, y + cell_h * 0.7, &format!("g{}", c.group), 11.0, "black", "middle");
        let max = c.by_category.iter().cloned().max().unwrap_or(0).max(1) as f64;
        for (k, &n) in c.by_category.iter().enumerate() {
            let shade = 255.0 - 155.0 * n as f64 / max;
            let fill = format!("#{0:02x}{0:02x}ff", shade as u8);
            s.rect(left + cell_w * k as f64, y, cell_w, cell_h, &fill, Some("#ffffff"));
            s.text(left + cell_w * (k as f64 + 0.5), y + cell_h * 0.7, &n.to_string(), 11.0, "black", "middle");
        }
        let pur = c.purity.map(|p| format!("{:.0}%", 100.0 * p)).unwrap_or_else(|| "-".into());
        s.text(left + cell_w * (ncat as f64 + 0.5), y + cell_h * 0.7, &pur, 11.0, "black", "middle");
        s.text(left + cell_w * (ncat as f64 + 1.0) + 10.0, y + cell_h * 0.7, &c.label, 11.0, "black", "start");
    }
    Ok(s.finish())
}

/// The routing space of one layer: tokens coloured by group, centroids outlined.
pub fn routing_svg(res: &AnalysisResult, layer: usize) -> Result<String, String> {
    let p = res.analysis.projection(&res.adapter, layer).map_err(|e| e.to_string())?;
    let all = p.points.iter().chain(&p.centroids);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for q in all {
        x0 = x0.min(q[0]);
        x1 = x1.max(q[0]);
        y0 = y0.min(q[1]);
        y1 = y1.max(q[1]);
    }
    let span = (x1 - x0).max(y1 - y0).max(1e-9);
    let (size, m) = (600.0, 40.0);
    let px = |x: f64| m + (x - x0) / span * size;
    let py = |y: f64| m + size - (y - y0) / span * size;
    let mut s = Svg::new(size + 2.0 * m + 200.0, size + 2.0 * m);
    s.text(10.0, 20.0, &format!("layer {layer}: routing vectors on their two principal axes ({:.0}% / {:.0}% of the variance)", 100.0 * p.explained[0], 100.0 * p.explained[1]), 13.0, "black", "start");
    for (i, q) in p.points.iter().enumerate() {
        let g = res.argmax[layer].get(i).cloned().unwrap_or(0) as usize;
        s.circle(px(q[0]), py(q[1]), 1.8, &palette::hex(palette::group(g)));
    }
    for (g, q) in p.centroids.iter().enumerate() {
        s.rect(px(q[0]) - 5.0, py(q[1]) - 5.0, 10.0, 10.0, &palette::hex(palette::group(g)), Some("#000000"));
        s.text(px(q[0]) + 8.0, py(q[1]) + 4.0, &format!("c{g}"), 11.0, "black", "start");
    }
    for g in 0..res.groups() {
        let y = m + 18.0 * g as f64;
        s.rect(size + 2.0 * m, y, 10.0, 10.0, &palette::hex(palette::group(g)), None);
        s.text(size + 2.0 * m + 14.0, y + 9.0, &format!("g{g} {}", res.labels[layer][g]), 10.0, "black", "start");
    }
    Ok(s.finish())
}
