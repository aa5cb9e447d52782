//! The Focus Lens desktop app (egui/eframe). The layout:
//!
//! - `state`: what is remembered (settings, persisted) and the shapes of loaded inputs, results,
//!   selection and timing;
//! - `session`: what is loaded and analysed, and the reconcile step that starts what the
//!   settings ask for;
//! - `worker` + `jobs`: background work on threads, and the slow functions it runs; `jobs::Msg`
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
pub mod state;
pub mod views;
pub mod worker;

pub use app::FocusLensApp;
pub use state::Settings;

/// Is there a display to open a window on?
pub fn display_available() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// `focus-lens gui`: opens the window (an error when it cannot).
pub fn run() -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("Focus Lens").with_inner_size([1400.0, 900.0]).with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "Focus Lens",
        options,
        Box::new(|cc| {
            cc.egui_ctx.set_theme(egui::Theme::Light);
            let settings: Settings = cc.storage.and_then(|s| eframe::get_value(s, eframe::APP_KEY)).unwrap_or_default();
            Ok(Box::new(FocusLensApp::new(settings)))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
