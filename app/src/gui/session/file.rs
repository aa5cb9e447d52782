//! Session files: what a researcher needs to come back to a view, in one JSON file: the model,
//! adapter and text paths, every run setting, the layer, head, tab, layer columns, colouring,
//! the selected token and the compare view's run B. Saved from File → Save session…, reopened
//! from File → Open session… or `focus-lens gui --session FILE`. Paths are stored as given
//! (absolute when they were opened through the app); `None` is the embedded default.

use crate::gui::state::{Inputs, Settings, Setup};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "focus-lens-session";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFile {
    pub format: String,
    pub version: u32,
    /// Stored as the fields `model`, `adapter` and `text`.
    #[serde(flatten)]
    pub inputs: Inputs,
    /// Stored as the fields `params`, `layer`, `head`, `tab`, `side_layers`, `strip`,
    /// `color_by_category`, `raw_groups`, `colour_blind` and `compare`.
    #[serde(flatten)]
    pub setup: Setup,
    /// The selected token (its partners are computed again on opening).
    #[serde(default)]
    pub selected: Option<usize>,
    /// The selected range of tokens `[a, b]` (starting at `selected`), if any.
    #[serde(default)]
    pub range: Option<(usize, usize)>,
    /// What wrote it (`focus-lens VERSION`), and the fingerprints of the model and adapter that
    /// were loaded (`None` in files written before they were recorded): the paths alone (`null`
    /// for the embedded defaults) do not say which weights, and the embedded default adapter
    /// changes between versions. Reopening compares them with what loads.
    #[serde(default)]
    pub app: Option<String>,
    #[serde(default)]
    pub model_fingerprint: Option<String>,
    #[serde(default)]
    pub adapter_sha256: Option<String>,
}

impl SessionFile {
    pub fn from_settings(s: &Settings, selected: Option<usize>) -> SessionFile {
        SessionFile {
            format: FORMAT.into(),
            version: 1,
            inputs: s.inputs.clone(),
            setup: s.setup.clone(),
            selected,
            range: None,
            app: Some(format!("focus-lens {}", env!("CARGO_PKG_VERSION"))),
            model_fingerprint: None,
            adapter_sha256: None,
        }
    }

    /// The settings this session asks for (the rest, e.g. recent files, from `s`).
    pub fn apply(&self, s: &mut Settings) {
        s.inputs = self.inputs.clone();
        s.setup = self.setup.clone();
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a session serialises")
    }

    pub fn read(path: &Path) -> Result<SessionFile, String> {
        // Read on the UI thread: a FIFO would block the window, a huge file fill memory.
        let text = focus_core::io::read_capped_string(path, focus_core::io::MAX_JSON_BYTES, "session").map_err(|e| e.to_string())?;
        let s: SessionFile = serde_json::from_str(&text).map_err(|e| format!("{} is not a session file: {e}", path.display()))?;
        if s.format != FORMAT {
            return Err(format!("{} is not a session file (format {:?})", path.display(), s.format));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gui::state::Tab;

    #[test]
    fn round_trip() {
        let mut s = Settings::default();
        s.inputs.text = Some("/t.txt".into());
        s.setup.layer = 9;
        s.setup.params.k = 3;
        s.setup.tab = Tab::Compare;
        let f = SessionFile::from_settings(&s, Some(42));
        let dir = std::env::temp_dir().join(format!("focus-lens-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        std::fs::write(&p, f.to_json()).unwrap();
        let back = SessionFile::read(&p).unwrap();
        assert_eq!(back, f);
        let mut t = Settings::default();
        back.apply(&mut t);
        assert_eq!((t.inputs.text, t.setup.layer, t.setup.params.k, t.setup.tab), (s.inputs.text, 9, 3, Tab::Compare));
        std::fs::write(&p, "{\"format\": \"other\"}").unwrap();
        assert!(SessionFile::read(&p).is_err());
    }

    /// The inputs are stored as the top-level fields `model`, `adapter` and `text`, as in the
    /// session files written before they were one type.
    #[test]
    fn inputs_are_top_level_fields() {
        let mut s = Settings::default();
        s.inputs.model = Some("/m.gguf".into());
        let v: serde_json::Value = serde_json::from_str(&SessionFile::from_settings(&s, None).to_json()).unwrap();
        assert_eq!((v["model"].as_str(), v["adapter"].is_null(), v["text"].is_null()), (Some("/m.gguf"), true, true));
        let mut old = v.clone();
        old["text"] = "/t.txt".into();
        let back: SessionFile = serde_json::from_value(old).unwrap();
        assert_eq!(back.inputs, Inputs { model: Some("/m.gguf".into()), adapter: None, text: Some("/t.txt".into()) });
    }
}
