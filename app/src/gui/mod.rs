//! The Focus Lens desktop app (egui/eframe). Layout follows the usual egui split:
//! `state` (what is remembered and loaded), `worker` + `jobs` (background work), `app` (the
//! per-frame reconcile and layout) and `panels` (one module per view); `svg`, `palette` and
//! `export` serve the exports; `dialogs` runs the native file dialogs off the UI thread.

pub mod app;
pub mod dialogs;
pub mod export;
pub mod jobs;
pub mod palette;
pub mod panels;
pub mod state;
pub mod svg;
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

/// `focus-lens` with no arguments: the window when there is a display, else (or when the window
/// cannot open) a clear message and the text demo.
pub fn run_or_demo() -> anyhow::Result<()> {
    if !display_available() {
        eprintln!("focus-lens: no display (neither DISPLAY nor WAYLAND_DISPLAY is set), so no window: printing the text demo instead (`focus-lens demo`; `focus-lens --help` lists the commands)");
        return crate::cli::demo::run();
    }
    if let Err(e) = run() {
        eprintln!("focus-lens: {e:#}: printing the text demo instead");
        return crate::cli::demo::run();
    }
    Ok(())
}
