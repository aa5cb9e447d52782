//! Exports as the app runs them: the Export menu asks for a path (the file window, or
//! `export_dir` at once), `export_to` writes the chosen kind (atomically; a PNG when its
//! screenshot arrives), and the status line or the error list says how it went.

use super::FocusLensApp;
use crate::gui::export::{self, ExportKind};
use crate::gui::jobs::Msg;
use crate::gui::state::AnalysisResult;
use crate::gui::views::FileTask;
use std::path::{Path, PathBuf};

impl FocusLensApp {

    /// The Export menu: asks for a path in the file window (which offers the system dialog
    /// too), or writes into `export_dir` at once when that is set.
    pub(super) fn export(&mut self, kind: ExportKind) {
        if self.session.result.is_none() && kind != ExportKind::Session {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        }
        let name = export::default_name(&self.settings, kind);
        match &self.export_dir {
            Some(d) => {
                let path = d.join(name);
                self.export_to(kind, path)
            }
            None => self.views.files.show_task(FileTask::Export(kind), Some(&name), &self.settings.prefs.recent, None),
        }
    }

    /// Writes the export to `path` (atomically); a PNG is written when its screenshot arrives.
    pub(super) fn export_to(&mut self, kind: ExportKind, path: PathBuf) {
        if kind == ExportKind::Session {
            let mut f = crate::gui::session::file::SessionFile::from_settings(&self.settings, self.selection.selected);
            f.range = self.selection.range;
            f.model_fingerprint = self.session.model.as_ref().map(|m| m.model.fingerprint.clone());
            f.adapter_sha256 = self.session.adapter.as_ref().map(|a| a.sha256.clone());
            let json = f.to_json();
            match export::write(&path, json.as_bytes()) {
                Ok(()) => self.export_done(format!("saved session {}", path.display())),
                Err(e) => self.export_failed(kind, &path, format!("saving the session to {} failed: {e}", path.display())),
            }
            return;
        }
        let Some(res) = self.session.result.clone() else {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        };
        if kind == ExportKind::ViewPng {
            return self.request_png(path);
        }
        // The selected layer and head (the compare exports' pruned mass in them).
        let (layer, head) = (self.settings.setup.layer.min(res.layers() - 1), self.settings.setup.head.min(res.model.config().n_heads.saturating_sub(1)));
        if matches!(kind, ExportKind::StatsCsv | ExportKind::CompareCsv) {
            // Sets of files: `focus-lens analyze`'s (per group, profiles, tokens), or the
            // comparison's (per token, per layer).
            let written = match (kind, &self.views.compare.result) {
                (ExportKind::StatsCsv, _) => export::write_csv_set(&res, &path, self.settings.setup.raw_groups),
                (_, Some(c)) => export::write_compare_csv(c, &res, &path, layer, head),
                (_, None) => Err("no comparison yet: press Run comparison first".to_string()),
            };
            match written {
                Ok(paths) => self.export_done(format!("wrote {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))),
                Err(e) => self.export_failed(kind, &path, format!("export to {} failed: {e}", path.display())),
            }
            return;
        }
        let text = match kind {
            ExportKind::StatsJson => {
                let text = self.session.text.as_ref().filter(|t| t.gen == res.key.text_gen).map(|t| t.text.clone());
                export::stats_json(&res, export::provenance(&res, &self.settings, text.as_deref().map(|s| s.as_str()), &self.selection), self.settings.setup.raw_groups)
            }
            // Every SVG carries where it came from (`export::fingerprints`) in its metadata.
            ExportKind::ViewSvg => self.views.svg(&self.settings, &res, self.selection.selected, self.selection.range).map(|s| export::svg_with_provenance(&s, &export::fingerprints(&res), None)),
            ExportKind::CompareJson => self.views.compare.result.as_ref().map(|c| with_provenance(&c.json(layer, head), &res)).ok_or_else(|| "no comparison yet: press Run comparison first".to_string()),
            ExportKind::StatsCsv | ExportKind::CompareCsv | ExportKind::ViewPng | ExportKind::Session => unreachable!(),
        };
        match text.and_then(|t| export::write(&path, t.as_bytes())) {
            Ok(()) => self.export_done(format!("wrote {}", path.display())),
            Err(e) => self.export_failed(kind, &path, format!("export to {} failed: {e}", path.display())),
        }
    }

    /// An export succeeded: say so, and drop the errors of earlier attempts (now stale).
    pub(super) fn export_done(&mut self, status: String) {
        self.errors.retain(|e| !(e.starts_with("export to ") || e.starts_with("saving the session to ") || e.starts_with("PNG export")));
        self.status = status;
    }

    /// An export failed: the error, and the file window again with the path the user typed
    /// (when exports go through it), so that it can be corrected rather than typed again.
    fn export_failed(&mut self, kind: ExportKind, path: &Path, error: String) {
        self.errors.push(error.clone());
        if self.export_dir.is_none() {
            self.views.files.show_task(FileTask::Export(kind), Some(&path.display().to_string()), &self.settings.prefs.recent, Some(format!("{error}. Correct the path and press Save again.")));
        }
    }

    /// Asks for a screenshot of the central view; the PNG's outcome arrives as `Msg::Png`.
    fn request_png(&mut self, path: PathBuf) {
        let Some(rect) = self.views.rect else {
            self.errors.push("PNG export: the view has not been drawn yet".into());
            return;
        };
        let Some(ctx) = self.ctx.clone() else {
            self.errors.push("PNG export needs the window".into());
            return;
        };
        let post = self.worker.poster();
        let text = self.session.result.as_ref().map(|r| export::fingerprints(r).to_string());
        export::request_png(&ctx, rect, path, text, move |r| post.send(Msg::Png(r)));
    }
}

/// A JSON export (an object) with `provenance` (`export::fingerprints`) added, unless it has one.
fn with_provenance(json: &str, res: &AnalysisResult) -> String {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.entry("provenance").or_insert_with(|| export::fingerprints(res));
            serde_json::to_string_pretty(&serde_json::Value::Object(m)).unwrap_or_else(|_| json.to_string())
        }
        _ => json.to_string(),
    }
}
