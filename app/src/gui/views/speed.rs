//! Speed: dense vs Focus top-k over lengths, run in the background, either as attention kernels
//! alone (`jobs::bench::attention_bench`, `focus_core::bench::run_attention_bench`, the default) or as
//! prefill of the whole model (`jobs::bench::bench`), with the speedup against its theoretical bound;
//! or quality and speed against length (`jobs::bench::quality`, `focus-lens ppl --ctx A,B --modes
//! ...`'s table: each mode's perplexity against dense and the prefill speed of the same runs), run
//! here or loaded from that command's JSON; and the charts as SVG. The view owns its benchmarks'
//! state: it prepares a run (`jobs::bench::BenchJob`) for the app to start, and receives its rows.

use super::view::{Command, View, ViewCtx};
use crate::gui::export::svg::{line_chart, stack, Series};
use crate::gui::jobs::bench::{self as jobs, BenchJob, QualityJob};
use crate::gui::jobs::JobError;
use crate::gui::state::{AnalysisResult, BenchKind, DeviceChoice, Setting};
use crate::gui::worker::TaskKind;
use egui_plot::{Corner, HLine, Legend, Line, LineStyle, Plot, PlotPoints, Points};
use focus_core::bench::{AttentionRow, BenchRow};
use focus_core::eval::ppl::{LengthRow, LengthTable};
use focus_core::Mode;
use std::sync::Arc;

const DENSE_C: egui::Color32 = egui::Color32::from_rgb(0x1f, 0x77, 0xb4);
const TOPK_C: egui::Color32 = egui::Color32::from_rgb(0xff, 0x7f, 0x0e);
const SPEED_C: egui::Color32 = egui::Color32::from_rgb(0x2c, 0xa0, 0x2c);
const BOUND_C: egui::Color32 = egui::Color32::from_rgb(0xd6, 0x27, 0x28);
const CANDLE_C: egui::Color32 = egui::Color32::from_rgb(0x94, 0x67, 0xbd);

/// The speed view's state: the last run of each benchmark.
#[derive(Default)]
pub struct SpeedView {
    /// The whole-model benchmark.
    pub bench: Option<BenchState>,
    /// The attention-kernel benchmark.
    pub attn_bench: Option<AttnBenchState>,
    /// Quality against length: a run started here, or a table loaded from `ppl`'s JSON.
    pub quality: Option<QualityState>,
    /// The path field of "Load table" (a `focus-lens ppl --ctx ... --modes ... --json` file).
    pub quality_json: String,
}

/// The benchmark settings as this frame edits them.
struct Edited {
    kind: BenchKind,
    bench_lengths: String,
    attn_lengths: String,
    repeats: usize,
    attn_device: DeviceChoice,
    quality_lengths: String,
    quality_chunks: usize,
}

impl SpeedView {

    /// The benchmark the edited settings ask for, with its state set up to receive the rows
    /// (`Err`: the lengths are not numbers).
    fn prepare(&mut self, res: &Arc<AnalysisResult>, e: &Edited, model_device: DeviceChoice) -> Result<BenchJob, String> {
        match e.kind {
            BenchKind::Attention => {
                let Some(lengths) = parse_lengths(&e.attn_lengths) else {
                    return Err(format!("benchmark lengths {:?}: expected positive numbers separated by commas", e.attn_lengths));
                };
                let device = if DeviceChoice::available().contains(&e.attn_device) { e.attn_device } else { DeviceChoice::Cpu };
                let cfg = jobs::attention_config(res, lengths, e.repeats, device);
                let (settings, cli) = jobs::attention_settings(res, &cfg, device);
                let live = Arc::new(std::sync::Mutex::new(Vec::new()));
                let spreads = Arc::new(std::sync::Mutex::new(Vec::new()));
                self.attn_bench = Some(AttnBenchState { live: live.clone(), spreads: spreads.clone(), settings, cli, ..Default::default() });
                // One benchmark at a time (they would slow each other down): starting one
                // cancels a running one.
                Ok(BenchJob::Attention { cfg, device, live, spreads })
            }
            BenchKind::Quality => Err("quality against length is prepared with the loaded inputs (prepare_quality)".into()),
            BenchKind::WholeModel => {
                let lengths: Result<Vec<usize>, _> = e.bench_lengths.split(',').map(|s| s.trim().parse::<usize>()).collect();
                let lengths = match lengths {
                    Ok(l) if !l.is_empty() => l,
                    _ => return Err(format!("benchmark lengths {:?}: expected numbers separated by commas", e.bench_lengths)),
                };
                let repeats = e.repeats.max(1);
                let live = Arc::new(std::sync::Mutex::new(Vec::new()));
                self.bench = Some(BenchState { live: live.clone(), ..Default::default() });
                Ok(BenchJob::WholeModel { res: res.clone(), lengths, repeats, device: model_device, live })
            }
        }
    }

    /// The quality-against-length run of the loaded model, adapter and whole text: dense, soft
    /// and top-k with k = 1, 2, 3 (those within the adapter's K) at each length.
    fn prepare_quality(&mut self, cx: &ViewCtx, res: &AnalysisResult, e: &Edited) -> Result<BenchJob, String> {
        let Some(ctxs) = parse_lengths(&e.quality_lengths) else {
            return Err(format!("lengths {:?}: expected positive numbers separated by commas", e.quality_lengths));
        };
        let (Some(m), Some(a), Some(t)) = (&cx.session.model, &cx.session.adapter, &cx.session.text) else {
            return Err("quality against length needs a model, an adapter and a text loaded".into());
        };
        let groups = a.adapter.config.groups;
        let mut modes = vec![Mode::Dense, Mode::Soft];
        modes.extend((1..=3).filter_map(|k| focus_core::focus::mask::TopK::new(k, groups).ok()).map(Mode::TopK));
        let job = QualityJob {
            model: m.model.clone(),
            adapter: a.adapter.clone(),
            adapter_path: a.path.as_ref().map(|p| p.display().to_string()),
            text: t.text.clone(),
            // The text's path where it has one (the command line reads it), else its label.
            text_label: cx.settings.inputs.text.as_ref().map_or_else(|| res.text_label.clone(), |p| p.display().to_string()),
            ctxs,
            modes,
            max_chunks: e.quality_chunks.max(1),
            device: m.device,
        };
        let live = Arc::new(std::sync::Mutex::new(Vec::new()));
        self.quality = Some(QualityState { live: live.clone(), cli: job.cli(), source: "run in the app".into(), ..Default::default() });
        Ok(BenchJob::Quality { job, live })
    }

    /// A table from `focus-lens ppl --ctx ... --modes ... --json` (read with a size cap; a
    /// FIFO or device is refused before it is opened).
    pub fn load_quality(&mut self, path: &std::path::Path) -> Result<(), String> {
        let text = focus_core::io::read_capped_string(path, 16 << 20, "quality table").map_err(|e| e.to_string())?;
        let table: LengthTable = serde_json::from_str(&text).map_err(|e| format!("{}: not a table of `focus-lens ppl --ctx ... --modes ... --json` ({e})", path.display()))?;
        if table.table != "ppl_lengths" {
            return Err(format!("{}: not a quality-against-length table (\"table\": {:?})", path.display(), table.table));
        }
        self.quality = Some(QualityState { table: Some(table), source: format!("loaded from {}", path.display()), ..Default::default() });
        Ok(())
    }

    /// The quality run's result.
    pub fn receive_quality(&mut self, r: Result<LengthTable, JobError>) {
        let b = self.quality.get_or_insert_with(QualityState::default);
        match r {
            Ok(t) => {
                b.table = Some(t);
                b.error = None;
            }
            Err(JobError::Cancelled) => b.error = Some("benchmark cancelled".into()),
            Err(JobError::Failed(e)) => b.error = Some(e),
        }
    }

    /// The benchmark was cancelled from this view: say so where no run has finished.
    fn cancelled(&mut self) {
        if let Some(b) = &mut self.quality {
            if b.table.is_none() {
                b.error = Some("benchmark cancelled".into());
            }
        }
        if let Some(b) = &mut self.bench {
            if b.rows.is_empty() {
                b.error = Some("benchmark cancelled".into());
            }
        }
        if let Some(b) = &mut self.attn_bench {
            if b.rows.is_empty() {
                b.error = Some("benchmark cancelled".into());
            }
        }
    }

    /// The whole-model benchmark's result.
    pub fn receive_model(&mut self, r: Result<(Vec<BenchRow>, String), JobError>) {
        let b = self.bench.get_or_insert_with(BenchState::default);
        match r {
            Ok((rows, settings)) => {
                b.rows = rows;
                b.settings = settings;
                b.error = None;
            }
            Err(JobError::Cancelled) => b.error = Some("benchmark cancelled".into()),
            Err(JobError::Failed(e)) => b.error = Some(e),
        }
    }

    /// The attention benchmark's result.
    pub fn receive_attention(&mut self, r: Result<Vec<AttentionRow>, JobError>) {
        let b = self.attn_bench.get_or_insert_with(AttnBenchState::default);
        match r {
            Ok(rows) => {
                b.rows = rows;
                b.error = None;
            }
            Err(JobError::Cancelled) => b.error = Some("benchmark cancelled".into()),
            Err(JobError::Failed(e)) => b.error = Some(e),
        }
    }

    /// The SVG of the benchmark of this kind (`Err`: none has run yet).
    pub fn svg(&self, kind: BenchKind, res: &AnalysisResult) -> Result<String, String> {
        match kind {
            BenchKind::Attention => match &self.attn_bench {
                Some(b) if !b.current_rows().is_empty() => Ok(attention_svg(b, res)),
                _ => Err("no benchmark results yet: run the benchmark first".into()),
            },
            BenchKind::WholeModel => match &self.bench {
                Some(b) if !b.current_rows().is_empty() => Ok(speed_svg(b, res)),
                _ => Err("no benchmark results yet: run the benchmark first".into()),
            },
            BenchKind::Quality => match &self.quality {
                Some(b) if !b.current_rows().is_empty() => Ok(quality_svg(&b.current_rows())),
                _ => Err("no benchmark results yet: run the benchmark (or load a table) first".into()),
            },
        }
    }
}

impl View for SpeedView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let mut out = Vec::new();
        let s = &cx.settings.prefs;
        // Edited here, asked for below; this frame shows the edited values.
        let mut e = Edited {
            kind: s.bench_kind,
            bench_lengths: s.bench_lengths.clone(),
            attn_lengths: s.attn_bench_lengths.clone(),
            repeats: s.bench_repeats,
            attn_device: s.attn_bench_device,
            quality_lengths: s.quality_lengths.clone(),
            quality_chunks: s.quality_chunks,
        };
        ui.horizontal(|ui| {
            ui.label("benchmark:");
            for kind in BenchKind::ALL {
                ui.selectable_value(&mut e.kind, kind, kind.label());
            }
        });
        // The settings and the run button on a row of their own, so that the spinner and the
        // cancel button fit while it runs.
        ui.horizontal(|ui| {
            let kind = e.kind;
            let lengths_label = ui.label("lengths (tokens):");
            // One field per benchmark, each with its own fixed id: the focus (and the text being
            // typed) belongs to that id, whatever else this row shows from frame to frame.
            let (text, salt) = match kind {
                BenchKind::Attention => (&mut e.attn_lengths, "attn_bench_lengths"),
                BenchKind::WholeModel => (&mut e.bench_lengths, "model_bench_lengths"),
                BenchKind::Quality => (&mut e.quality_lengths, "quality_lengths"),
            };
            ui.add(egui::TextEdit::singleline(text).id_salt(salt).desired_width(200.0)).labelled_by(lengths_label.id);
            if kind == BenchKind::Quality {
                ui.add(egui::DragValue::new(&mut e.quality_chunks).range(1..=64).prefix("chunks per length ")).on_hover_text("perplexity is scored on this many chunks of each length at most (llama-perplexity's chunks: the second half of each scored); each mode runs the same chunks");
            } else {
                ui.add(egui::DragValue::new(&mut e.repeats).range(1..=10).prefix("repeats "));
            }
            if kind == BenchKind::Attention && DeviceChoice::available().len() > 1 {
                egui::ComboBox::from_id_salt("attn_bench_device").selected_text(e.attn_device.label()).show_ui(ui, |ui| {
                    for d in DeviceChoice::available() {
                        ui.selectable_value(&mut e.attn_device, d, d.label());
                    }
                });
            }
            let running = cx.worker.is_running(TaskKind::Bench);
            if running {
                crate::gui::paint::busy::busy(ui);
                if ui.button("Cancel benchmark").clicked() {
                    out.push(Command::Cancel(TaskKind::Bench));
                    self.cancelled();
                }
            } else if ui.button("Run benchmark").clicked() {
                let job = if kind == BenchKind::Quality { self.prepare_quality(cx, res, &e) } else { self.prepare(res, &e, cx.settings.setup.params.device) };
                out.push(match job {
                    Ok(job) => Command::StartBench(job),
                    Err(msg) => Command::Error(msg),
                });
            }
        });
        if e.kind != s.bench_kind {
            out.push(Command::Set(Setting::BenchKind(e.kind)));
        }
        if e.bench_lengths != s.bench_lengths {
            out.push(Command::Set(Setting::BenchLengths(e.bench_lengths.clone())));
        }
        if e.attn_lengths != s.attn_bench_lengths {
            out.push(Command::Set(Setting::AttnBenchLengths(e.attn_lengths.clone())));
        }
        if e.repeats != s.bench_repeats {
            out.push(Command::Set(Setting::BenchRepeats(e.repeats)));
        }
        if e.attn_device != s.attn_bench_device {
            out.push(Command::Set(Setting::AttnBenchDevice(e.attn_device)));
        }
        if e.quality_lengths != s.quality_lengths {
            out.push(Command::Set(Setting::QualityLengths(e.quality_lengths.clone())));
        }
        if e.quality_chunks != s.quality_chunks {
            out.push(Command::Set(Setting::QualityChunks(e.quality_chunks)));
        }
        match e.kind {
            BenchKind::Attention => attention(self.attn_bench.as_ref(), res, ui),
            BenchKind::WholeModel => whole_model(self.bench.as_ref(), res, ui),
            BenchKind::Quality => {
                ui.horizontal(|ui| {
                    let l = ui.label("or a table from `focus-lens ppl --ctx … --modes … --json`:");
                    ui.add(egui::TextEdit::singleline(&mut self.quality_json).id_salt("quality_json").hint_text("path to the JSON").desired_width(320.0)).labelled_by(l.id);
                    if ui.button("Load table").clicked() {
                        let path = std::path::PathBuf::from(self.quality_json.trim());
                        if let Err(msg) = self.load_quality(&path) {
                            out.push(Command::Error(msg));
                        }
                    }
                });
                quality(self.quality.as_ref(), ui);
            }
        }
        out
    }
}

/// The whole-model benchmark: prefill, dense vs Focus top-k.
fn whole_model(bench: Option<&BenchState>, res: &AnalysisResult, ui: &mut egui::Ui) {
    let (kk, k) = (res.groups() as f64, res.key.params.k as f64);
    // Why the measured gain can be far below K/k: the window and shared groups keep pairs.
    let kept = res.analysis.layers.iter().map(|l| l.pairs.retained).sum::<f64>() / res.layers().max(1) as f64;
    ui.label(format!(
        "Prefill time of the whole model, dense vs Focus top-k (K = {}, k = {}, w = {}). Attention alone gains at most 1 / (fraction of causal pairs kept): at long lengths with balanced groups that is {:.2} (K/k = {:.1} only for k = 1); on the analysed {} tokens this adapter keeps {:.0}% of causal pairs (mean over layers), so attention gains at most {:.1}x there, and projections and MLPs, which Focus does not change, take the rest of the time.",
        res.groups(),
        res.key.params.k,
        res.window(),
        bound_limit(res.groups(), res.key.params.k.max(1)),
        kk / k,
        res.tokens(),
        100.0 * kept,
        1.0 / kept.max(1e-9)
    ));
    let Some(b) = bench else {
        ui.weak(format!("Machine: {}, device {}. Run the benchmark to measure.", crate::gui::jobs::bench::machine(), res.key.params.device.label()));
        return;
    };
    if let Some(e) = &b.error {
        ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
    }
    let rows = b.current_rows();
    if rows.is_empty() {
        return;
    }
    if b.rows.is_empty() {
        ui.label(format!("{} length(s) measured so far", rows.len()));
    } else {
        ui.weak(format!("Measured on {}", b.settings));
    }
    ui.weak("Figures are medians of the timed repeats; (min-max): the fastest and slowest repeat (for the speedup, of single repeats: the two modes alternate within a repeat). Bars on the time plot show that spread.");
    table(ui, &rows);
    let h = (ui.available_height() - 20.0).max(150.0);
    // One colour per series for its line and its points (as in the SVG export), so that the
    // legend has one entry per series; legends at the top left, away from the longest lengths.
    let (dense_c, topk_c, speed_c) = (egui::Color32::from_rgb(0x1f, 0x77, 0xb4), egui::Color32::from_rgb(0xff, 0x7f, 0x0e), egui::Color32::from_rgb(0x2c, 0xa0, 0x2c));
    let legend = || Legend::default().position(Corner::LeftTop);
    let xs: Vec<f64> = rows.iter().map(|r| r.tokens as f64).collect();
    ui.columns(2, |cols| {
        cols[0].label("seconds per prefill");
        Plot::new("bench_time").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("tokens").y_axis_label("s").include_y(0.0).show(&mut cols[0], |p| {
            let series: [(&str, egui::Color32, fn(&BenchRow) -> f64); 2] = [("dense", dense_c, |r| r.dense_s), ("Focus top-k", topk_c, |r| r.topk_s)];
            for (m, (name, c, f)) in series.into_iter().enumerate() {
                let pts: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, f(r)]).collect();
                p.line(Line::new(name, PlotPoints::from(pts.clone())).color(c));
                p.points(Points::new(name, PlotPoints::from(pts)).radius(3.0).color(c));
                // The spread of the repeats: a bar from the fastest to the slowest at each length.
                for r in &rows {
                    let (lo, _, hi) = r.spread()[m];
                    if hi > lo {
                        let x = r.tokens as f64;
                        p.line(Line::new(name, PlotPoints::from(vec![[x, lo], [x, hi]])).color(c).width(4.0));
                    }
                }
            }
        });
        cols[1].label("speedup (dense time / top-k time)");
        Plot::new("bench_speedup").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("tokens").include_y(0.0).include_y(kk / k * 1.6).show(&mut cols[1], |p| {
            let s: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, r.topk_over_dense_speed]).collect();
            p.line(Line::new("measured", PlotPoints::from(s.clone())).color(speed_c));
            p.points(Points::new("measured", PlotPoints::from(s)).radius(3.0).color(speed_c));
            let limit = bound_limit(res.groups(), res.key.params.k.max(1));
            p.hline(HLine::new(format!("long-length limit, balanced groups = {limit:.2}"), limit).color(BOUND_C).width(1.5));
            p.hline(HLine::new(format!("theoretical K/k = {:.1} (k = 1)", kk / k), kk / k).color(egui::Color32::from_rgb(0x55, 0x55, 0x55)).width(2.0).style(LineStyle::dashed_loose()));
            p.hline(HLine::new("1 (no gain)", 1.0).color(egui::Color32::from_gray(160)));
        });
    });
}

/// The measured numbers, one row per length: medians of the timed repeats with their spread
/// (fastest-slowest repeat; the speedup's of single repeats, whose modes ran back to back), and
/// a note where the spread is wide enough that the median speedup means little.
fn table(ui: &mut egui::Ui, rows: &[BenchRow]) {
    egui::Grid::new("bench_table").striped(true).num_columns(10).show(ui, |ui| {
        for h in ["tokens", "dense s", "(min-max)", "top-k s", "(min-max)", "dense tok/s", "top-k tok/s", "speedup", "(min-max)", "note"] {
            ui.strong(h);
        }
        ui.end_row();
        for r in rows {
            let [d, t, sp] = r.spread();
            let spread = r.repeats.is_some_and(|n| n > 1);
            let range = |x: (f64, f64, f64), digits: usize| if spread { format!("{:.digits$}-{:.digits$}", x.0, x.2) } else { "-".into() };
            ui.label(r.tokens.to_string());
            ui.label(format!("{:.3}", r.dense_s));
            ui.weak(range(d, 3));
            ui.label(format!("{:.3}", r.topk_s));
            ui.weak(range(t, 3));
            ui.label(format!("{:.0}", r.dense_tokens_per_s));
            ui.label(format!("{:.0}", r.topk_tokens_per_s));
            ui.label(format!("{:.2}x", r.topk_over_dense_speed));
            ui.weak(range(sp, 2));
            match spread_note(r) {
                Some(n) => ui.colored_label(egui::Color32::from_rgb(190, 80, 0), n),
                None => ui.label(""),
            };
            ui.end_row();
        }
    });
}

/// A warning when a row's repeats disagree: the speedup's range straddles 1 (faster or slower
/// depends on the repeat), or the slowest repeat of a mode took over 1.5x its fastest.
pub fn spread_note(r: &BenchRow) -> Option<String> {
    if !r.repeats.is_some_and(|n| n > 1) {
        return None;
    }
    let [d, t, s] = r.spread();
    if s.0 < 1.0 && s.2 > 1.0 && (s.1 - 1.0).abs() > 1e-9 {
        return Some(format!("the repeats disagree on the sign of the gain ({:.2}-{:.2}x): noise", s.0, s.2));
    }
    let wide = |x: (f64, f64, f64)| x.0 > 0.0 && x.2 / x.0 > 1.5;
    (wide(d) || wide(t)).then(|| "repeats vary by more than 1.5x: other load on the machine?".to_string())
}

/// A time series of the attention plot: name, colour, value per row.
type AttnSeries = (&'static str, egui::Color32, fn(&AttentionRow) -> Option<f64>);

/// The attention-kernel benchmark: one attention call, dense vs Focus top-k.
fn attention(bench: Option<&AttnBenchState>, res: &AnalysisResult, ui: &mut egui::Ui) {
    let (kk, k) = (res.groups(), res.key.params.k.clamp(1, res.groups().max(1)));
    let c = res.model.config();
    ui.label(format!(
        "One causal attention call (all heads), our tiled dense kernel vs exact hard top-k Focus attention (K = {kk}, k = {k}, window w = {}), on random inputs with the shapes of {} ({} query heads, {} KV heads x {} dims, f32) and top-k memberships balanced as Sinkhorn leaves them. Focus computes only the pairs its mask keeps, so its speedup is bounded by 1 / (fraction of causal pairs kept). Past the window that bound tends to 1 / (1 - C(K-k, k) / C(K, k)) = {:.2}: K/k = {:.1} is reached only for k = 1, since two tokens with k > 1 groups each share one more often than k/K.",
        res.window(),
        res.analysis.model,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        bound_limit(kk, k),
        kk as f64 / k as f64
    ));
    let Some(b) = bench else {
        ui.weak(format!("Machine: {}. Run the benchmark to measure.", crate::gui::jobs::bench::machine()));
        return;
    };
    if let Some(e) = &b.error {
        ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
    }
    ui.weak(format!("Measured on {}", b.settings));
    command_line(ui, &b.cli);
    let rows = b.current_rows();
    if rows.is_empty() {
        return;
    }
    if b.rows.is_empty() {
        ui.label(format!("{} length(s) measured so far", rows.len()));
    }
    let spreads = b.spreads.lock().map(|v| v.clone()).unwrap_or_default();
    attention_table(ui, &rows, &spreads, limit_of(res));
    let (asymptote, limit) = (kk as f64 / k as f64, bound_limit(kk, k));
    let h = (ui.available_height() - 20.0).max(150.0);
    let xs: Vec<f64> = rows.iter().map(|r| r.n as f64).collect();
    let legend = || Legend::default().position(Corner::LeftTop);
    let x = |r: &AttentionRow| r.n as f64;
    ui.columns(2, |cols| {
        cols[0].label("milliseconds per attention call");
        Plot::new("attn_bench_time").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("tokens").y_axis_label("ms").include_y(0.0).show(&mut cols[0], |p| {
            let series: [AttnSeries; 3] =
                [("dense", DENSE_C, |r| r.dense_ms), ("Focus top-k", TOPK_C, |r| r.focus_ms), ("candle (matmul + softmax)", CANDLE_C, |r| r.candle_ms)];
            for (name, c, f) in series {
                let pts: Vec<[f64; 2]> = rows.iter().filter_map(|r| f(r).map(|y| [x(r), y])).collect();
                if pts.is_empty() {
                    continue;
                }
                p.line(Line::new(name, PlotPoints::from(pts.clone())).color(c).width(2.0));
                p.points(Points::new(name, PlotPoints::from(pts)).radius(3.5).color(c));
            }
        });
        cols[1].label("speedup (dense time / Focus time) and its bound");
        Plot::new("attn_bench_speedup").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("tokens").include_y(0.0).include_y(asymptote * 1.6).show(&mut cols[1], |p| {
            let s: Vec<[f64; 2]> = rows.iter().filter_map(|r| r.speedup.map(|y| [x(r), y])).collect();
            if !s.is_empty() {
                p.line(Line::new("measured", PlotPoints::from(s.clone())).color(SPEED_C).width(2.5));
                p.points(Points::new("measured", PlotPoints::from(s)).radius(4.0).color(SPEED_C));
            }
            let bound: Vec<[f64; 2]> = rows.iter().map(|r| [x(r), r.bound]).collect();
            p.line(Line::new("bound 1 / pairs kept", PlotPoints::from(bound.clone())).color(BOUND_C).width(2.0).style(LineStyle::dashed_dense()));
            p.points(Points::new("bound 1 / pairs kept", PlotPoints::from(bound)).radius(3.0).color(BOUND_C));
            p.hline(HLine::new(format!("limit of the bound = {limit:.2}"), limit).color(BOUND_C).width(1.5));
            p.hline(HLine::new(format!("K/k = {asymptote:.1} (the limit for k = 1)"), asymptote).color(egui::Color32::from_rgb(0x55, 0x55, 0x55)).width(2.0).style(LineStyle::dashed_loose()));
            p.hline(HLine::new("1 (no gain)", 1.0).color(egui::Color32::from_gray(140)).width(1.0));
        });
    });
}

pub use focus_core::bench::bound_limit;

/// Grid lines (and tick labels) on the x axis at the measured lengths only: egui_plot's own
/// marks at round numbers are too close together at these scales and lose their labels.
fn length_marks(xs: Vec<f64>) -> impl Fn(egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    move |input| {
        let w = (input.bounds.1 - input.bounds.0).abs().max(1.0);
        xs.iter().map(|&value| egui_plot::GridMark { value, step_size: w }).collect()
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1}"))
}

/// The long-length limit of the pair bound for this analysis' K and k.
fn limit_of(res: &AnalysisResult) -> f64 {
    let k = res.key.params.k.clamp(1, res.groups().max(1));
    bound_limit(res.groups(), k)
}

/// Why a measured speedup cannot be trusted as it stands: above its own bound (1 / pairs
/// kept) or above the bound's long-length limit, which time proportional to pairs computed
/// cannot exceed; the figure is noise (or the dense kernel's own cost per pair growing).
pub fn noise_note(speedup: Option<f64>, bound: f64, limit: f64) -> Option<String> {
    let s = speedup?;
    if s > bound * 1.0001 {
        Some(format!("above its bound {bound:.2}x ({:.0}%): noise", 100.0 * s / bound))
    } else if s > limit * 1.0001 {
        Some(format!("above the limit {limit:.2}x: noise"))
    } else {
        None
    }
}

fn spread_ms(s: Option<&crate::gui::jobs::bench::Spread>, f: fn(&crate::gui::jobs::bench::Spread) -> (f64, f64, f64)) -> String {
    match s {
        Some(s) if s.repeats > 1 => {
            let (a, _, c) = f(s);
            format!("{a:.1}-{c:.1}")
        }
        _ => "-".into(),
    }
}

/// The attention benchmark's numbers, one row per length: medians, the spread of the repeats
/// (min-max), and a warning where a speedup exceeds what its bound allows.
fn attention_table(ui: &mut egui::Ui, rows: &[AttentionRow], spreads: &[crate::gui::jobs::bench::Spread], limit: f64) {
    let candle = rows.iter().any(|r| r.candle_ms.is_some());
    egui::Grid::new("attn_bench_table").striped(true).show(ui, |ui| {
        let mut heads = vec!["n", "dense ms", "(min-max)", "focus ms", "(min-max)", "speedup", "(min-max)", "pairs fraction", "bound", "efficiency", "CPU-time speedup"];
        if candle {
            heads.push("candle ms");
        }
        heads.push("note");
        for h in heads {
            ui.strong(h);
        }
        ui.end_row();
        for r in rows {
            let sp = spreads.iter().find(|s| s.n == r.n);
            ui.label(r.n.to_string());
            ui.label(opt_ms(r.dense_ms));
            ui.weak(spread_ms(sp, |s| s.dense_ms));
            ui.label(opt_ms(r.focus_ms));
            ui.weak(spread_ms(sp, |s| s.focus_ms));
            ui.label(r.speedup.map_or("-".into(), |s| format!("{s:.2}x")));
            ui.weak(match sp {
                Some(s) if s.repeats > 1 => format!("{:.2}-{:.2}x", s.speedup.0, s.speedup.2),
                _ => "-".into(),
            });
            ui.label(format!("{:.3}", r.pairs_fraction));
            ui.label(format!("{:.2}x", r.bound));
            ui.label(r.efficiency.map_or("-".into(), |e| format!("{:.0}%", 100.0 * e)));
            ui.label(r.speedup_cpu.map_or("-".into(), |s| format!("{s:.2}x")));
            if candle {
                ui.label(opt_ms(r.candle_ms));
            }
            match noise_note(r.speedup, r.bound, limit) {
                Some(n) => ui.colored_label(egui::Color32::from_rgb(190, 80, 0), n),
                None => ui.label(""),
            };
            ui.end_row();
        }
    });
}

/// "1024, 2048,4096" -> lengths; None when empty, not numbers, or zero.
pub fn parse_lengths(s: &str) -> Option<Vec<usize>> {
    let v: Vec<usize> = s.split(',').filter(|p| !p.trim().is_empty()).map(|p| p.trim().parse::<usize>().ok().filter(|&n| n > 0)).collect::<Option<_>>()?;
    (!v.is_empty()).then_some(v)
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

/// A mode's colour in the quality plots (dense blue, soft purple, top-1/2/3 green, orange, red),
/// and in their SVG.
fn mode_colour(mode: &str) -> egui::Color32 {
    match mode {
        "dense" => DENSE_C,
        "soft" => CANDLE_C,
        "top-1" => SPEED_C,
        "top-2" => TOPK_C,
        "top-3" => BOUND_C,
        _ => egui::Color32::from_rgb(0x8c, 0x56, 0x4b),
    }
}

/// The modes of a table's rows, in their order (the first row that ran names them).
fn table_mode_names(rows: &[LengthRow]) -> Vec<String> {
    rows.iter().find(|r| r.skipped.is_none()).or(rows.first()).map(|r| r.modes.iter().map(|m| m.mode.clone()).collect()).unwrap_or_default()
}

/// Per mode, (ctx, value) where `f` has one: the points of a quality plot.
fn mode_points(rows: &[LengthRow], f: fn(&focus_core::eval::ppl::ModeAtLength) -> Option<f64>) -> Vec<(String, Vec<[f64; 2]>)> {
    table_mode_names(rows)
        .into_iter()
        .map(|name| {
            let pts = rows.iter().filter_map(|r| r.mode(&name).and_then(f).map(|y| [r.ctx as f64, y])).collect();
            (name, pts)
        })
        .collect()
}

/// Quality and speed against length: what was run, the table (perplexity with % vs dense, then
/// prefill tokens/s with the ratio to dense, per mode; skipped lengths and runs said), and two
/// plots against length: perplexity vs dense (%) per mode, and prefill tokens/s per mode.
fn quality(state: Option<&QualityState>, ui: &mut egui::Ui) {
    ui.label("Perplexity (llama-perplexity's convention: chunks of each length from position 0, the second half scored) of dense, soft and top-k (k = 1, 2, 3) at each length, on the loaded text (all of it, not only the analysed tokens), with the prefill speed of the same runs (tokens/s of the layers; the modes run one after another on each chunk). Lengths above the model's context, beyond the text, or (CPU) whose run would not fit in memory are skipped and said.");
    let Some(b) = state else {
        ui.weak("Run the benchmark, or load a table, to see quality and speed against length.");
        return;
    };
    if let Some(e) = &b.error {
        ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
    }
    if let Some(t) = &b.table {
        ui.weak(format!(
            "{}: {}, adapter {}, {} ({} tokens), {} ({} threads), at most {} chunk(s) per length",
            b.source,
            t.model,
            t.adapter.as_deref().unwrap_or("none"),
            t.text,
            t.tokens,
            t.device,
            t.threads,
            t.max_chunks.map_or("every".into(), |n| n.to_string())
        ));
    }
    if !b.cli.is_empty() {
        command_line(ui, &b.cli);
    }
    let rows = b.current_rows();
    if rows.is_empty() {
        return;
    }
    if b.table.is_none() {
        ui.label(format!("{} length(s) measured so far", rows.len()));
    }
    // Two columns per mode: wider than the panel with five modes, so it scrolls on its own
    // (the plots below keep the panel's width).
    egui::ScrollArea::horizontal().id_salt("quality_table_scroll").show(ui, |ui| quality_table(ui, &rows));
    let h = (ui.available_height() - 20.0).max(150.0);
    let xs: Vec<f64> = rows.iter().filter(|r| r.skipped.is_none()).map(|r| r.ctx as f64).collect();
    let legend = || Legend::default().position(Corner::LeftTop);
    // Headroom above the highest point, so the legend (top left) covers no data.
    let top = |f: fn(&focus_core::eval::ppl::ModeAtLength) -> Option<f64>| mode_points(&rows, f).iter().flat_map(|(_, pts)| pts.iter().map(|p| p[1])).fold(0.0, f64::max) * 1.7;
    let (ppl_top, speed_top) = (top(|m| m.vs_dense_pct), top(|m| m.tokens_per_s));
    ui.columns(2, |cols| {
        cols[0].label("perplexity vs dense (%): + is worse");
        Plot::new("quality_ppl").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("context (tokens)").y_axis_label("%").include_y(0.0).include_y(ppl_top).show(&mut cols[0], |p| {
            for (name, pts) in mode_points(&rows, |m| m.vs_dense_pct) {
                if name == "dense" || pts.is_empty() {
                    continue;
                }
                let c = mode_colour(&name);
                p.line(Line::new(name.clone(), PlotPoints::from(pts.clone())).color(c).width(2.0));
                p.points(Points::new(name, PlotPoints::from(pts)).radius(3.5).color(c));
            }
            p.hline(HLine::new("dense (0%)", 0.0).color(DENSE_C).width(1.5).style(LineStyle::dashed_loose()));
        });
        cols[1].label("prefill tokens/s (the same runs)");
        Plot::new("quality_speed").height(h).x_grid_spacer(length_marks(xs.clone())).legend(legend()).x_axis_label("context (tokens)").y_axis_label("tok/s").include_y(0.0).include_y(speed_top).show(&mut cols[1], |p| {
            for (name, pts) in mode_points(&rows, |m| m.tokens_per_s) {
                if pts.is_empty() {
                    continue;
                }
                let c = mode_colour(&name);
                p.line(Line::new(name.clone(), PlotPoints::from(pts.clone())).color(c).width(2.0));
                p.points(Points::new(name, PlotPoints::from(pts)).radius(3.5).color(c));
            }
        });
    });
}

/// The quality table: a row per length; per mode its perplexity (and % vs dense), then per mode
/// its prefill tokens/s (and the ratio to dense); a skipped length or run says why.
fn quality_table(ui: &mut egui::Ui, rows: &[LengthRow]) {
    let names = table_mode_names(rows);
    let mut notes = Vec::new();
    egui::Grid::new("quality_table").striped(true).show(ui, |ui| {
        ui.strong("ctx");
        ui.strong("chunks");
        for n in &names {
            ui.strong(format!("{n} ppl"));
        }
        for n in &names {
            ui.strong(format!("{n} tok/s"));
        }
        ui.end_row();
        for r in rows {
            ui.label(r.ctx.to_string());
            if let Some(why) = &r.skipped {
                ui.weak(format!("skipped: {why}"));
                ui.end_row();
                continue;
            }
            ui.label(r.chunks.to_string());
            for n in &names {
                match r.mode(n) {
                    Some(m) if m.skipped.is_some() => {
                        notes.push(format!("{n} at ctx {}: {}", r.ctx, m.skipped.as_deref().unwrap_or_default()));
                        ui.weak("skipped")
                    }
                    Some(m) => match (m.ppl, m.vs_dense_pct) {
                        (Some(p), Some(d)) if n != "dense" => ui.label(format!("{p:.3} ({d:+.2}%)")),
                        (Some(p), _) => ui.label(format!("{p:.3}")),
                        _ => ui.weak("-"),
                    },
                    None => ui.weak("-"),
                };
            }
            for n in &names {
                match r.mode(n).and_then(|m| m.tokens_per_s.map(|t| (t, m.speed_vs_dense))) {
                    Some((t, Some(x))) if n != "dense" => ui.label(format!("{t:.0} ({x:.2}x)")),
                    Some((t, _)) => ui.label(format!("{t:.0}")),
                    None => ui.weak("-"),
                };
            }
            ui.end_row();
        }
    });
    for n in notes {
        ui.colored_label(egui::Color32::from_rgb(190, 80, 0), n);
    }
}

/// The quality plots as SVG: perplexity vs dense (%) and prefill tokens/s against length.
pub fn quality_svg(rows: &[LengthRow]) -> String {
    let series = |f: fn(&focus_core::eval::ppl::ModeAtLength) -> Option<f64>, skip_dense: bool| -> Vec<Series> {
        mode_points(rows, f)
            .into_iter()
            .filter(|(n, p)| !(skip_dense && n == "dense") && !p.is_empty())
            .map(|(name, pts)| Series { color: crate::gui::paint::palette::hex(mode_colour(&name)), name, points: pts.into_iter().map(|[x, y]| (x, y)).collect(), dashed: false })
            .collect()
    };
    let ppl = line_chart("perplexity vs dense (%)", "context (tokens)", "%", &series(|m| m.vs_dense_pct, true), &[("dense".into(), 0.0)]);
    let speed = line_chart("prefill tokens/s", "context (tokens)", "tok/s", &series(|m| m.tokens_per_s, false), &[]);
    stack(&[ppl, speed], 640.0, &[400.0, 400.0])
}

/// Quality against length: the finished (or loaded) table, rows so far, and what was run.
#[derive(Default)]
pub struct QualityState {
    pub table: Option<LengthTable>,
    /// Lengths as they finish, shared with the running task.
    pub live: Arc<std::sync::Mutex<Vec<LengthRow>>>,
    /// The equivalent `focus-lens ppl` command (empty for a loaded table).
    pub cli: String,
    /// "run in the app", or "loaded from PATH".
    pub source: String,
    pub error: Option<String>,
}

impl QualityState {
    /// The rows to show: the finished run's (or the loaded table's), else those so far.
    pub fn current_rows(&self) -> Vec<LengthRow> {
        match &self.table {
            Some(t) => t.rows.clone(),
            None => self.live.lock().map(|v| v.clone()).unwrap_or_default(),
        }
    }
}

/// The attention-kernel benchmark: finished rows, rows so far, and what was run.
#[derive(Default)]
pub struct AttnBenchState {
    pub rows: Vec<focus_core::bench::AttentionRow>,
    pub live: std::sync::Arc<std::sync::Mutex<Vec<focus_core::bench::AttentionRow>>>,
    /// Each length's spread over its repeats, as they finish.
    pub spreads: std::sync::Arc<std::sync::Mutex<Vec<crate::gui::jobs::bench::Spread>>>,
    /// Machine, threads, dtype, shapes and settings, in words.
    pub settings: String,
    /// The equivalent `focus-lens bench attention` command.
    pub cli: String,
    pub error: Option<String>,
}

impl AttnBenchState {
    pub fn current_rows(&self) -> Vec<focus_core::bench::AttentionRow> {
        if !self.rows.is_empty() {
            return self.rows.clone();
        }
        self.live.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
pub struct BenchState {
    /// The finished benchmark's rows.
    pub rows: Vec<BenchRow>,
    /// Rows as they finish, shared with the running task (shown while it runs or after a cancel).
    pub live: std::sync::Arc<std::sync::Mutex<Vec<BenchRow>>>,
    pub settings: String,
    pub error: Option<String>,
}

impl BenchState {
    /// The rows to show: the finished run's, else those measured so far.
    pub fn current_rows(&self) -> Vec<BenchRow> {
        if !self.rows.is_empty() {
            return self.rows.clone();
        }
        self.live.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// "Same run from the command line:" and the command, copyable.
fn command_line(ui: &mut egui::Ui, cli: &str) {
    ui.horizontal(|ui| {
        ui.weak("Same run from the command line:");
        ui.add(egui::Label::new(egui::RichText::new(cli).monospace()).wrap());
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn speedups_above_their_bound_are_flagged() {
        assert!(super::noise_note(Some(1.30), 1.69, 1.20).unwrap().contains("above the limit 1.20x"));
        assert!(super::noise_note(Some(2.34), 2.08, 2.15).unwrap().contains("above its bound 2.08x (112%)"));
        assert!(super::noise_note(Some(1.10), 1.69, 2.15).is_none());
        assert!(super::noise_note(None, 1.69, 2.15).is_none());
    }
}
