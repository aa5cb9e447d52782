//! The Focus Lens desktop app (egui/eframe). The root holds the app, its state and the worker;
//! everything else is in a folder named for what it holds:
//!
//! - `app`: `FocusLensApp`, the per-frame loop: receive messages (`app/messages.rs`),
//!   reconcile, let the views draw, apply the commands they return (`app/commands.rs`, the
//!   exports in `app/exporting.rs`);
//! - `state`: what is remembered (settings, persisted: the input set `Inputs` and its `Setup`,
//!   which a session file stores too, and the app's `Prefs`) and the shapes of loaded inputs,
//!   results, selection and timing;
//! - `compared`: a comparison of two runs as the views show and export it (below `export` and
//!   `jobs`, which both use it);
//! - `worker`: background work on threads, and the one channel its results come back on;
//! - `session/`: what is loaded and analysed, and the reconcile step that starts what the
//!   settings ask for (`mod.rs`); session files (`file.rs`);
//! - `jobs/`: the slow functions the worker runs, one file per job (the figures themselves are
//!   core's: `focus_core::analysis`; `streaming` the Generate view's job over the CLI's loop,
//!   `crate::sampling`), and the native file dialogs (`dialogs`); `jobs::Msg` (in `mod.rs`) is
//!   the one message type that comes back, over the worker's one channel (file dialogs and PNG
//!   screenshots post to it too);
//! - `views/`: one module per view, each with its own state and its SVG export; every view
//!   implements `views::View`: it reads a `ViewCtx` and returns `Command`s;
//! - `export/`: shared export helpers and the SVG writer;
//! - `paint/`: the group colours (`palette`), the busy indicator (`busy`) and the fallback fonts
//!   for CJK and other scripts (`fonts`).

pub mod app;
pub mod compared;
pub mod export;
pub mod jobs;
pub mod paint;
pub mod session;
pub mod state;
pub mod views;
pub mod worker;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_inputs_replace_the_remembered_ones() {
        let mut stored = Settings::default();
        stored.inputs.text = Some("/old.txt".into());
        stored.setup.params.window = Some(64);
        let inputs = Inputs { text: Some("new.txt".into()), adapter: Some("/ad".into()), ..Default::default() };
        let s = startup_settings(stored.clone(), &StartArgs { inputs, ..Default::default() });
        assert_eq!(s.inputs.text, Some(std::env::current_dir().unwrap().join("new.txt")));
        assert_eq!(s.inputs.adapter, Some("/ad".into()));
        assert_eq!(s.setup.params.window, None, "a new adapter brings its own window");
        assert_eq!(s.inputs.model, None);
        let same = startup_settings(stored.clone(), &StartArgs::default());
        assert_eq!((same.inputs.text, same.setup.params.window), (stored.inputs.text, Some(64)));
    }
}

pub use app::FocusLensApp;
pub use state::{Inputs, Settings};

/// Is there a display to open a window on?
pub fn display_available() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// `focus-lens gui [--model M] [--adapter A] [--session S] [TEXT]`: what to open instead of the
/// remembered (or embedded default) inputs (paths made absolute against the working directory).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct StartArgs {
    #[command(flatten)]
    pub inputs: Inputs,
    /// A session file saved from the app (File → Save session…): its inputs, settings, view and
    /// selection; --model, --adapter and TEXT override its inputs.
    #[arg(long)]
    pub session: Option<std::path::PathBuf>,
}

fn absolute(p: std::path::PathBuf) -> std::path::PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// The settings the window starts with: the stored ones, with the inputs named on the command
/// line in place of the remembered ones (a new adapter brings its own window and Sinkhorn
/// variant, as when opened from the menu).
pub fn startup_settings(mut s: Settings, a: &StartArgs) -> Settings {
    if let Some(m) = &a.inputs.model {
        s.inputs.model = Some(absolute(m.clone()));
    }
    if let Some(ad) = &a.inputs.adapter {
        // The remembered k belongs to the remembered adapter: this one brings its own k.
        let remembered = s.inputs.adapter.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        s.setup.k_adapter.get_or_insert(remembered);
        s.inputs.adapter = Some(absolute(ad.clone()));
        s.setup.params.window = None;
        s.setup.params.causal = None;
        if a.inputs.model.is_none() {
            // An adapter alone: its own base model (which it records), when the remembered one
            // does not fit it and that base model is known locally.
            if let Some(m) = base_model_for(ad, s.inputs.model.as_deref(), &s.prefs.recent) {
                s.inputs.model = m;
            }
        }
    }
    if let Some(t) = &a.inputs.text {
        s.inputs.text = Some(absolute(t.clone()));
    }
    s
}

/// The model to open with the adapter at `adapter` when the remembered model (`current`, None:
/// the default) does not fit it: the first local candidate (the default model, then recent
/// models) whose identity is the base model the adapter's config records, else the default
/// model (`Some(None)`; the adapter's load then says what it was made for). None: keep
/// `current` (it fits, or it is the default, or the adapter cannot be read: its load reports
/// that).
pub fn base_model_for(adapter: &std::path::Path, current: Option<&std::path::Path>, recent: &[(state::InputKind, std::path::PathBuf)]) -> Option<Option<std::path::PathBuf>> {
    // Through the guarded reader: a FIFO named adapter_config.json blocked the window before it
    // painted (issue 51).
    let want = focus_core::focus::adapter::recorded_base_model(adapter).ok()?;
    let default = crate::defaults::default_model_path();
    let fits = |p: &std::path::Path| p.exists() && focus_core::Model::load(p, &candle_core::Device::Cpu).is_ok_and(|m| m.identity() == want);
    if fits(current.unwrap_or(&default)) {
        return None;
    }
    if current.is_some() && fits(&default) {
        return Some(None);
    }
    let known = recent.iter().filter(|(k, p)| *k == state::InputKind::Model && Some(p.as_path()) != current).find(|(_, p)| fits(p));
    match known {
        Some((_, p)) => Some(Some(p.clone())),
        None => current.is_some().then_some(None),
    }
}

/// `focus-lens gui`: opens the window (an error when it cannot).
pub fn run(args: StartArgs) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("Focus Lens").with_inner_size([1400.0, 900.0]).with_drag_and_drop(true),
        // The app brings its own fallback fonts (`paint::fonts`: the embedded CJK font, then the
        // system's), instead of eframe's provider, which this build does not enable.
        system_font_fallback: false,
        ..Default::default()
    };
    eframe::run_native(
        "Focus Lens",
        options,
        Box::new(|cc| {
            cc.egui_ctx.set_theme(egui::Theme::Light);
            let stored = cc.storage.map(Settings::stored).unwrap_or_default();
            let mut app = FocusLensApp::new(stored);
            // The window keeps finished analyses on disk: a recent text reopens at once.
            app.session.disk_cache = Some(jobs::disk_cache::DiskCache::default_location());
            if let Some(p) = &args.session {
                app.open_session(p);
            }
            app.settings = startup_settings(app.settings.clone(), &args);
            // The remembered text (not one named now): a long analysis waits to be asked for.
            if args.inputs.text.is_none() && args.session.is_none() {
                app.hold_long_restart();
            }
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
