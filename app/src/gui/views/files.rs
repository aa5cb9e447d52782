//! The in-app file window: a path field that can be clicked and typed into, a small file
//! browser, the recent files and, for adapters, a picker of the shipped and recent adapters with
//! their K, training tokens and held-out perplexity. It serves both opening (model, adapter,
//! text) and exporting (a path to write to), in a window of its own, so that it works on every
//! display: the system dialog (XDG portal or zenity) is one button in it, and when that cannot
//! open the window says so and stays.

use super::view::{Command, FileTask, View, ViewCtx};
use crate::gui::state::InputKind;
use std::path::{Path, PathBuf};

/// One adapter the picker offers, with what its config records.
#[derive(Debug, Clone)]
pub struct AdapterInfo {
    pub path: PathBuf,
    pub name: String,
    pub groups: Option<usize>,
    pub top_k: Option<usize>,
    /// Tokens seen in training; `None` for an untrained adapter.
    pub tokens: Option<f64>,
    /// Perplexities measured on one held-out text at one context (`results.ppl.ctx1024`: dense,
    /// soft, top-k at the adapter's k), so that they compare like for like. The training log's
    /// own final perplexity (another text and mode) is not shown beside them.
    pub ppl: Vec<(String, f64)>,
    /// What the perplexities were measured on (`results.ppl_file`, up to its first " (").
    pub ppl_text: Option<String>,
    /// The base model the adapter records (`None`: not recorded, or unreadable).
    pub base_model: Option<focus_core::focus::identity::BaseModel>,
    pub error: Option<String>,
}

impl AdapterInfo {
    /// Reads `dir/adapter_config.json` (only the fields the picker shows).
    pub fn read(dir: &Path) -> AdapterInfo {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
        let mut info = AdapterInfo { path: dir.to_path_buf(), name, groups: None, top_k: None, tokens: None, ppl: Vec::new(), ppl_text: None, base_model: None, error: None };
        let v: serde_json::Value = match focus_core::io::read_capped_string(&dir.join("adapter_config.json"), focus_core::io::MAX_JSON_BYTES, "adapter config").map_err(|e| e.to_string()).and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string())) {
            Ok(v) => v,
            Err(e) => {
                info.error = Some(e);
                return info;
            }
        };
        info.groups = v["groups"].as_u64().map(|x| x as usize);
        info.top_k = v["top_k"].as_u64().map(|x| x as usize);
        info.tokens = v["training"]["tokens_seen"].as_f64();
        info.base_model = serde_json::from_value(v["base_model"].clone()).ok();
        let ctx = &v["results"]["ppl"]["ctx1024"];
        let topk = info.top_k.map(|k| (format!("topk{k}"), format!("top-{k}")));
        for (key, label) in [("dense".to_string(), "dense".to_string()), ("soft".into(), "soft".into())].into_iter().chain(topk) {
            if let Some(p) = ctx[&key].as_f64() {
                info.ppl.push((label, p));
            }
        }
        info.ppl_text = v["results"]["ppl_file"].as_str().map(|f| f.split(" (").next().unwrap_or(f).rsplit('/').next().unwrap_or(f).to_string());
        info
    }

    /// Can the adapter run on a model of identity `want`? The checks `Adapter::load` makes
    /// (architecture, shapes, weights' fingerprint; the name may differ). An adapter that
    /// records no base model is offered (its load says whether it fits).
    pub fn fits(&self, want: &focus_core::focus::identity::BaseModel) -> bool {
        self.base_model.as_ref().is_none_or(|b| {
            (&b.arch, b.n_layers, b.d_model, b.n_heads, b.n_kv_heads, b.vocab, &b.fingerprint) == (&want.arch, want.n_layers, want.d_model, want.n_heads, want.n_kv_heads, want.vocab, &want.fingerprint)
        })
    }

    /// "K = 8, k = 2 · 4.10M training tokens · held-out PPL on ppl_persuasion_60k.txt, ctx 1024:
    /// dense 31.66, soft 31.83, top-2 32.60".
    pub fn summary(&self) -> String {
        if let Some(e) = &self.error {
            return format!("unreadable: {e}");
        }
        let mut parts = vec![format!("K = {}, k = {}", opt(self.groups), opt(self.top_k))];
        parts.push(match self.tokens {
            Some(n) => format!("{:.2}M training tokens", n / 1e6),
            None => "untrained (random init)".into(),
        });
        if self.ppl.is_empty() {
            parts.push("no held-out perplexity recorded".into());
        } else {
            let on = self.ppl_text.as_deref().map(|t| format!(" on {t}")).unwrap_or_default();
            let figures = self.ppl.iter().map(|(m, p)| format!("{m} {p:.2}")).collect::<Vec<_>>().join(", ");
            parts.push(format!("held-out PPL{on}, ctx 1024: {figures}"));
        }
        parts.join(" · ")
    }
}

fn opt(x: Option<usize>) -> String {
    x.map_or("?".into(), |v| v.to_string())
}

/// Folders that may hold the shipped adapters, in this order: the folders listed in
/// `FOCUS_LENS_ADAPTERS` (separated as in `PATH`), then `sample_adapters/` in the working
/// directory or up to three folders above it (anywhere inside a checkout), then beside the
/// executable or up to three folders above it (a build tree, or an install that puts the folder
/// beside the binary). Found at run time, never a path compiled in: a binary copied elsewhere
/// looks where it is. (Without any, the embedded default adapter still loads.)
pub fn sample_adapter_dirs() -> Vec<PathBuf> {
    let (cwd, exe) = (std::env::current_dir().ok(), std::env::current_exe().ok());
    adapter_dirs_in(std::env::var_os("FOCUS_LENS_ADAPTERS").as_deref(), cwd.as_deref(), exe.as_deref())
}

/// `sample_adapter_dirs` for a given `FOCUS_LENS_ADAPTERS` value, working directory and
/// executable: the folders among its candidates that exist, canonical, each once.
pub fn adapter_dirs_in(listed: Option<&std::ffi::OsStr>, cwd: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = listed.map(|v| std::env::split_paths(v).collect()).unwrap_or_default();
    if let Some(d) = cwd {
        c.extend(d.ancestors().take(4).map(|a| a.join("sample_adapters")));
    }
    if let Some(exe) = exe {
        c.extend(exe.ancestors().skip(1).take(4).map(|a| a.join("sample_adapters")));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for d in c {
        if let Ok(d) = d.canonicalize() {
            if d.is_dir() && !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The adapters the picker lists: every folder with an adapter_config.json under the sample
/// folders, then the recent adapters (each once).
pub fn adapters(recent: &[(InputKind, PathBuf)]) -> Vec<AdapterInfo> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for d in sample_adapter_dirs() {
        let mut sub: Vec<PathBuf> = std::fs::read_dir(&d).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.join("adapter_config.json").is_file()).collect();
        sub.sort();
        paths.extend(sub);
    }
    for (k, p) in recent {
        if *k == InputKind::Adapter {
            paths.push(p.clone());
        }
    }
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for p in paths {
        let key = p.canonicalize().unwrap_or_else(|_| p.clone());
        if !seen.contains(&key) {
            seen.push(key);
            out.push(AdapterInfo::read(&p));
        }
    }
    out
}

/// The adapters of `all` that fit the model of identity `model` (all when none is loaded), and
/// the names of those hidden because they were made for another model.
pub fn fitting(all: &[AdapterInfo], model: Option<&focus_core::focus::identity::BaseModel>) -> (Vec<AdapterInfo>, Vec<String>) {
    let (fit, other): (Vec<&AdapterInfo>, Vec<&AdapterInfo>) = all.iter().partition(|a| model.is_none_or(|m| a.fits(m)));
    (fit.into_iter().cloned().collect(), other.into_iter().map(|a| a.name.clone()).collect())
}

/// Does the embedded default adapter fit the model of identity `want` (as `AdapterInfo::fits`
/// checks a folder's)?
pub fn embedded_fits(want: &focus_core::focus::identity::BaseModel) -> bool {
    let config = crate::defaults::sample_adapter_files()[0].1;
    let v: serde_json::Value = serde_json::from_slice(config).unwrap_or_default();
    let base_model = serde_json::from_value(v["base_model"].clone()).ok();
    AdapterInfo { path: PathBuf::new(), name: String::new(), groups: None, top_k: None, tokens: None, ppl: Vec::new(), ppl_text: None, base_model, error: None }.fits(want)
}

/// "2 adapters made for other models are hidden (gemma3-270m-k8, gemma3-270m-k8-global)".
pub fn hidden_note(hidden: &[String]) -> Option<String> {
    match hidden.len() {
        0 => None,
        1 => Some(format!("1 adapter made for another model is hidden ({})", hidden[0])),
        n => Some(format!("{n} adapters made for other models are hidden ({})", hidden.join(", "))),
    }
}

/// One row of the browser.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub path: PathBuf,
    pub dir: bool,
    /// A folder that is an adapter (adapter_config.json) or a Hugging Face model (config.json).
    pub tag: Option<&'static str>,
}

/// The entries of `dir`, folders first, then files, each sorted by name; hidden ones left out.
pub fn list_dir(dir: &Path) -> Result<Vec<Entry>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut v: Vec<Entry> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                return None;
            }
            let path = e.path();
            let dir = path.is_dir();
            let tag = if !dir {
                None
            } else if path.join("adapter_config.json").is_file() {
                Some("adapter")
            } else if path.join("config.json").is_file() {
                Some("model folder")
            } else {
                None
            };
            Some(Entry { name, path, dir, tag })
        })
        .collect();
    v.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.to_lowercase().cmp(&b.name.to_lowercase())));
    Ok(v)
}

/// Where exports go unless the user browses elsewhere: `~/Documents/focus-lens` when there is a
/// `~/Documents`, else the cache folder's `exports` (`FOCUS_LENS_CACHE`, ~/.cache/focus-lens).
/// Never the working directory, which is often the source tree (exports landed in the
/// repository).
pub fn default_export_dir() -> PathBuf {
    let docs = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("Documents")).filter(|d| d.is_dir());
    match docs {
        Some(d) => d.join("focus-lens"),
        None => crate::defaults::cache_dir().join("exports"),
    }
}

/// Is a system file dialog likely to open here? rfd asks the XDG desktop portal over the
/// session D-Bus, then falls back to zenity; with neither it returns "cancelled" at once.
pub fn native_dialog_possible() -> bool {
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|s| !s.is_empty())
        || std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| Path::new(&d).join("bus").exists());
    let zenity = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("zenity").is_file()));
    bus || zenity || cfg!(any(target_os = "macos", target_os = "windows"))
}

/// The file window's state.
pub struct FilesView {
    pub task: Option<FileTask>,
    /// The path field.
    pub path: String,
    /// The folder the browser shows, and its listing.
    pub dir: PathBuf,
    /// The folder the browser was last in when opening files (it starts in the working
    /// directory), and when exporting (`None`: `default_export_dir`), each kept for the next time.
    open_dir: PathBuf,
    pub export_folder: Option<PathBuf>,
    listing: Option<(PathBuf, Result<Vec<Entry>, String>)>,
    /// Why the window is open instead of a system dialog (shown at its top).
    pub message: Option<String>,
    /// The adapter picker's rows (read when the window opens for an adapter).
    pub adapters: Vec<AdapterInfo>,
    /// Can a system dialog open here (`native_dialog_possible`, settable by tests)?
    pub native: bool,
}

impl Default for FilesView {
    fn default() -> Self {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        FilesView {
            task: None,
            path: String::new(),
            dir: cwd.clone(),
            open_dir: cwd,
            export_folder: None,
            listing: None,
            message: None,
            adapters: Vec::new(),
            native: native_dialog_possible(),
        }
    }
}

impl FilesView {
    /// Opens the window for `task`; `suggested`: the path field's starting text (an export's
    /// default file name, in the browser's folder).
    pub fn show_task(&mut self, task: FileTask, suggested: Option<&str>, recent: &[(InputKind, PathBuf)], message: Option<String>) {
        self.task = Some(task);
        // Exports start in their own folder (made when missing), outside the source tree.
        self.dir = match task {
            FileTask::Export(_) => {
                let d = self.export_folder.clone().unwrap_or_else(default_export_dir);
                let _ = std::fs::create_dir_all(&d);
                d
            }
            _ => self.open_dir.clone(),
        };
        self.message = message.or_else(|| {
            (!self.native).then(|| "No system file dialog on this display (no XDG desktop portal on a session bus, no zenity): type a path or pick one below.".to_string())
        });
        self.path = match suggested {
            // A path as typed (after a failed export) stays as it is.
            Some(name) if Path::new(name).is_absolute() => name.to_string(),
            Some(name) => self.dir.join(name).display().to_string(),
            None => String::new(),
        };
        self.listing = None;
        self.adapters = if task == FileTask::Open(InputKind::Adapter) { adapters(recent) } else { Vec::new() };
    }

    pub fn close(&mut self) {
        self.task = None;
        self.message = None;
    }

    fn go(&mut self, dir: PathBuf) {
        match self.task {
            Some(FileTask::Export(_)) => self.export_folder = Some(dir.clone()),
            _ => self.open_dir = dir.clone(),
        }
        self.dir = dir;
        self.listing = None;
    }

    fn contents(&mut self, cx: &ViewCtx, task: FileTask, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        if let Some(m) = &self.message {
            ui.colored_label(egui::Color32::from_rgb(170, 90, 0), m);
            ui.separator();
        }
        let mut submit = false;
        ui.horizontal(|ui| {
            let label = ui.label("Path:");
            let r = ui.add(egui::TextEdit::singleline(&mut self.path).id_salt("files_path").hint_text("/path/to/file").desired_width(ui.available_width() - 10.0)).labelled_by(label.id);
            submit = r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        });
        let path = PathBuf::from(self.path.trim());
        let has_path = !self.path.trim().is_empty();
        ui.horizontal(|ui| {
            match task {
                FileTask::Open(kind) => {
                    // The window's own kind first; the other two are there for a path that is
                    // something else.
                    let mut kinds = vec![kind];
                    kinds.extend([InputKind::Model, InputKind::Adapter, InputKind::Text].into_iter().filter(|&k| k != kind));
                    for (n, k) in kinds.into_iter().enumerate() {
                        let b = egui::Button::new(format!("Open as {}", k.label()));
                        if ui.add_enabled(has_path, b).clicked() || (n == 0 && submit && has_path) {
                            out.push(Command::Open(k, path.clone()));
                            self.close();
                        }
                    }
                }
                FileTask::OpenModelFolder => {
                    if ui.add_enabled(has_path, egui::Button::new("Open as model")).clicked() || (submit && has_path) {
                        out.push(Command::Open(InputKind::Model, path.clone()));
                        self.close();
                    }
                }
                FileTask::OpenSession => {
                    if ui.add_enabled(has_path, egui::Button::new("Open this session")).clicked() || (submit && has_path) {
                        out.push(Command::OpenSession(path.clone()));
                        self.close();
                    }
                }
                FileTask::Export(kind) => {
                    if ui.add_enabled(has_path, egui::Button::new("Save")).clicked() || (submit && has_path) {
                        // The next export starts in this one's folder.
                        if let Some(d) = path.parent().filter(|d| d.is_dir()) {
                            self.export_folder = Some(d.to_path_buf());
                        }
                        out.push(Command::ExportTo(kind, path.clone()));
                        self.close();
                    }
                }
            }
            if ui.button("Cancel").clicked() {
                self.close();
            }
            let sys = ui
                .add_enabled(self.native && !cx.dialog_open, egui::Button::new("System dialog…"))
                .on_disabled_hover_text("no XDG desktop portal and no zenity here: use the path field or the browser");
            if sys.clicked() {
                out.push(Command::Dialog(task.purpose()));
                self.close();
            }
        });
        if self.task.is_none() {
            return;
        }
        if task == FileTask::Open(InputKind::Adapter) {
            ui.separator();
            ui.strong("Adapters (shipped and recent)");
            // Only the adapters that fit the loaded model are offered: the embedded default
            // too (it is SmolLM2-135M's), and the recent ones (listed here, not below).
            let model = cx.session.model.as_ref().map(|m| m.model.identity());
            if model.as_ref().is_none_or(embedded_fits) {
                if ui.button("the embedded default (smollm2-135m-k8)").clicked() {
                    out.push(Command::UseDefault(InputKind::Adapter));
                    self.close();
                    return;
                }
            } else {
                ui.weak("the embedded default adapter (smollm2-135m-k8) is made for SmolLM2-135M, not this model");
            }
            let (offered, hidden) = fitting(&self.adapters, model.as_ref());
            if let Some(note) = hidden_note(&hidden) {
                ui.weak(note);
            }
            let mut chosen = None;
            egui::Grid::new("adapter_picker").striped(true).show(ui, |ui| {
                for a in &offered {
                    if ui.button(&a.name).on_hover_text(a.path.display().to_string()).clicked() {
                        chosen = Some(a.path.clone());
                    }
                    ui.label(a.summary());
                    ui.end_row();
                }
            });
            if let Some(p) = chosen {
                out.push(Command::Open(InputKind::Adapter, p));
                self.close();
                return;
            }
        }
        // Recent adapters are in the picker above, filtered by fit: not listed again unfiltered.
        let recent: Vec<&PathBuf> = cx.settings.prefs.recent.iter().filter(|(k, _)| *k != InputKind::Adapter && matches!(task, FileTask::Open(kind) if kind == *k)).map(|(_, p)| p).collect();
        if !recent.is_empty() {
            ui.separator();
            ui.strong("Recent");
            for p in recent {
                if ui.selectable_label(false, p.display().to_string()).clicked() {
                    self.path = p.display().to_string();
                }
            }
        }
        ui.separator();
        self.browser(task, ui, out);
    }

    /// The folder listing: click a folder to enter it (and, for folder inputs, to choose it), a
    /// file to put it in the path field; double-click a file to open it at once.
    fn browser(&mut self, task: FileTask, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        ui.horizontal(|ui| {
            if ui.button("Up").clicked() {
                if let Some(p) = self.dir.parent() {
                    let p = p.to_path_buf();
                    self.go(p);
                }
            }
            if ui.button("Home").clicked() {
                if let Some(h) = std::env::var_os("HOME") {
                    self.go(PathBuf::from(h));
                }
            }
            ui.label(format!("Folder: {}", self.dir.display()));
        });
        if self.listing.as_ref().is_none_or(|(d, _)| d != &self.dir) {
            self.listing = Some((self.dir.clone(), list_dir(&self.dir)));
        }
        let entries = match &self.listing.as_ref().expect("just listed").1 {
            Ok(v) => v.clone(),
            Err(e) => {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
                return;
            }
        };
        let folder_input = matches!(task, FileTask::Open(InputKind::Adapter) | FileTask::OpenModelFolder);
        let mut go = None;
        egui::ScrollArea::vertical().id_salt("files_list").max_height(260.0).auto_shrink([false, true]).show_rows(ui, 18.0, entries.len(), |ui, range| {
            for e in &entries[range] {
                let text = match (e.dir, e.tag) {
                    (true, Some(t)) => format!("{}/  ({t})", e.name),
                    (true, None) => format!("{}/", e.name),
                    (false, _) => e.name.clone(),
                };
                let r = ui.selectable_label(self.path == e.path.display().to_string(), text);
                if r.double_clicked() && !e.dir {
                    if let FileTask::Open(k) = task {
                        out.push(Command::Open(k, e.path.clone()));
                        self.task = None;
                    } else if task == FileTask::OpenSession {
                        out.push(Command::OpenSession(e.path.clone()));
                        self.task = None;
                    }
                } else if r.clicked() {
                    if e.dir {
                        if folder_input || e.tag.is_some() {
                            self.path = e.path.display().to_string();
                        }
                        if e.tag.is_none() || !folder_input {
                            go = Some(e.path.clone());
                        }
                    } else {
                        self.path = e.path.display().to_string();
                    }
                }
            }
        });
        if let Some(d) = go {
            if let FileTask::Export(_) = task {
                let name = Path::new(self.path.trim()).file_name().map(|n| n.to_os_string());
                if let Some(n) = name {
                    self.path = d.join(n).display().to_string();
                }
            }
            self.go(d);
        }
    }
}

impl View for FilesView {
    /// The window, when open.
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let Some(task) = self.task else { return out };
        let mut open = true;
        egui::Window::new(task.title())
            .open(&mut open)
            .collapsible(false)
            .resizable(true)
            .default_size([640.0, 520.0])
            .default_pos([220.0, 90.0])
            .show(ui.ctx(), |ui| self.contents(cx, task, ui, &mut out));
        if !open {
            self.close();
        }
        out
    }
}
