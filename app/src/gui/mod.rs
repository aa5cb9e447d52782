//! The Focus Lens desktop app (egui/eframe). The layout:
//!
//! - `state`: what is remembered (settings, persisted) and the shapes of loaded inputs, results,
//!   selection and timing;
//! - `session`: what is loaded and analysed, and the reconcile step that starts what the
//!   settings ask for;
//! - `worker` + `jobs/`: background work on threads, and the slow functions it runs (the
//!   figures themselves are core's: `focus_core::analysis`; `jobs::bench` the speed view's
//!   benchmarks, `jobs::streaming` the Generate view's job over the CLI's loop,
//!   `crate::sampling`); `jobs::Msg`
//!   is the one message type that comes back, over the worker's one channel (file dialogs,
//!   `dialogs`, and PNG screenshots post to it too);
//! - `app`: `FocusLensApp`, the per-frame loop: receive messages, reconcile, let the views draw,
//!   apply the commands they return;
//! - `views`: one module per view, each with its own state and its SVG export; views read a
//!   `ViewCtx` and return `Command`s;
//! - `export` (shared export helpers and the SVG writer), `palette` (colours), `busy` (the busy
//!   indicator).

pub mod app;
pub mod busy;
pub mod dialogs;
pub mod export;
pub mod jobs;
pub mod palette;
pub mod session;
pub mod sessionfile;
pub mod state;
pub mod views;
pub mod worker;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_inputs_replace_the_remembered_ones() {
        let mut stored = Settings::default();
        stored.text = Some("/old.txt".into());
        stored.params.window = Some(64);
        let s = startup_settings(stored.clone(), &StartArgs { text: Some("new.txt".into()), adapter: Some("/ad".into()), ..Default::default() });
        assert_eq!(s.text, Some(std::env::current_dir().unwrap().join("new.txt")));
        assert_eq!(s.adapter, Some("/ad".into()));
        assert_eq!(s.params.window, None, "a new adapter brings its own window");
        assert_eq!(s.model, None);
        let same = startup_settings(stored.clone(), &StartArgs::default());
        assert_eq!((same.text, same.params.window), (stored.text, Some(64)));
    }
}

pub use app::FocusLensApp;
pub use state::Settings;

/// Is there a display to open a window on?
pub fn display_available() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// What `focus-lens gui [--model M] [--adapter A] [TEXT]` asks to open instead of the
/// remembered inputs (paths made absolute against the working directory).
#[derive(Debug, Default, Clone)]
pub struct StartArgs {
    pub model: Option<std::path::PathBuf>,
    pub adapter: Option<std::path::PathBuf>,
    pub text: Option<std::path::PathBuf>,
    /// A session file to reopen (its inputs and settings; the others above override it).
    pub session: Option<std::path::PathBuf>,
}

fn absolute(p: std::path::PathBuf) -> std::path::PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// The settings the window starts with: the stored ones, with the inputs named on the command
/// line in place of the remembered ones (a new adapter brings its own window and Sinkhorn
/// variant, as when opened from the menu).
pub fn startup_settings(mut s: Settings, a: &StartArgs) -> Settings {
    if let Some(m) = &a.model {
        s.model = Some(absolute(m.clone()));
    }
    if let Some(ad) = &a.adapter {
        s.adapter = Some(absolute(ad.clone()));
        s.params.window = None;
        s.params.causal = None;
    }
    if let Some(t) = &a.text {
        s.text = Some(absolute(t.clone()));
    }
    s
}

/// `focus-lens gui`: opens the window (an error when it cannot).
pub fn run(args: StartArgs) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("Focus Lens").with_inner_size([1400.0, 900.0]).with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "Focus Lens",
        options,
        Box::new(|cc| {
            cc.egui_ctx.set_theme(egui::Theme::Light);
            let stored: Settings = cc.storage.and_then(|s| eframe::get_value(s, eframe::APP_KEY)).unwrap_or_default();
            let mut app = FocusLensApp::new(stored);
            if let Some(p) = &args.session {
                app.open_session(p);
            }
            app.settings = startup_settings(app.settings.clone(), &args);
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
