//! A comparison as the views show and export it: core's `Comparison` of run A (the analysis on
//! screen) and run B, with what was compared and whether the runs' group numbers correspond.
//! Below `export` and `jobs` (both use it: `jobs::compare` and `jobs::intervene` make it,
//! `export` writes it), so neither imports the other for it.

use crate::gui::state::*;
use focus_core::analysis::compare::Comparison;

/// A comparison and what it compared: the analysis on screen (run A) and the spec of run B.
pub struct Compared {
    pub key: AnalysisKey,
    pub spec: CompareSpec,
    pub result: Comparison,
    /// K of run A's adapter and of run B's.
    pub groups: (usize, usize),
    /// What an intervention did (`intervene::InterveneJob`: A is the intervened run, B the
    /// original); None for a comparison of two runs.
    pub note: Option<String>,
}

impl Compared {
    /// Do the runs' group numbers name the same groups? Not when their adapters have different
    /// K: then "top-k groups change" means nothing and is not reported.
    pub fn groups_correspond(&self) -> bool {
        self.groups.0 == self.groups.1
    }

    /// The warning shown (and exported) when they do not.
    pub fn groups_warning(&self) -> Option<String> {
        (!self.groups_correspond()).then(|| {
            format!(
                "Run A has K = {} groups and run B K = {}: their group numbers do not correspond, so whether a token's groups change is not reported (loss and pruned mass compare as usual).",
                self.groups.0, self.groups.1
            )
        })
    }
}

/// The exports. When the runs' groups do not correspond (adapters of different K) the exports
/// say so, as the screen does, and leave out every group-change figure (a count of "layers
/// changed" between unrelated group numbers means nothing); loss and pruned mass stay.
impl Compared {
    /// The per-token table as CSV (`Comparison::csv`).
    pub fn csv(&self, layer: usize, head: usize) -> String {
        let s = self.result.csv(layer, head);
        match self.groups_warning() {
            None => s,
            // Its last two columns are the group-change counts.
            Some(w) => format!("# {w}\n{}", drop_last_fields(&s, 2)),
        }
    }

    /// The per-layer figures as CSV (`Comparison::layers_csv`).
    pub fn layers_csv(&self, head: usize) -> String {
        let s = self.result.layers_csv(head);
        let Some(w) = self.groups_warning() else { return s };
        // Every field is a number: drop tokens_changed, changed_share (columns 1-2) and
        // delta_loss_changed / unchanged (the last two).
        let mut out = format!("# {w}\n");
        for line in s.lines() {
            if line.starts_with('#') {
                if !line.contains("delta_loss_*") {
                    out += line;
                    out.push('\n');
                }
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            let keep: Vec<&str> = f.iter().enumerate().filter(|&(i, _)| i != 1 && i != 2 && i + 2 < f.len()).map(|(_, x)| *x).collect();
            out += &keep.join(",");
            out.push('\n');
        }
        out
    }

    /// Everything as JSON (`Comparison::json`), with both runs' K and whether their groups
    /// correspond.
    pub fn json(&self, layer: usize, head: usize) -> String {
        let mut v: serde_json::Value = serde_json::from_str(&self.result.json(layer, head)).expect("the comparison's own JSON");
        v["groups"] = serde_json::json!({ "k_a": self.groups.0, "k_b": self.groups.1, "correspond": self.groups_correspond() });
        if let Some(w) = self.groups_warning() {
            v["groups"]["warning"] = w.into();
            for t in v["per_token"].as_array_mut().into_iter().flatten() {
                t.as_object_mut().map(|o| o.remove("groups_changed_layers"));
            }
            for l in v["per_layer"].as_array_mut().into_iter().flatten() {
                if let Some(o) = l.as_object_mut() {
                    for k in ["tokens_changed", "changed_share", "delta_loss_changed", "delta_loss_unchanged"] {
                        o.remove(k);
                    }
                }
            }
            v.as_object_mut().map(|o| o.remove("per_layer_note"));
        }
        serde_json::to_string_pretty(&v).expect("JSON of numbers and strings")
    }
}

/// `csv` without the last `n` fields of each record; comment lines (`#`) stay. Quote-aware: a
/// token's text is quoted and may hold commas and newlines.
pub fn drop_last_fields(csv: &str, n: usize) -> String {
    let cut = |record: &str, commas: &[usize]| -> String {
        if record.starts_with('#') || commas.len() < n {
            record.to_string()
        } else {
            record[..commas[commas.len() - n]].to_string()
        }
    };
    let mut out = String::with_capacity(csv.len());
    let (mut record, mut commas, mut quoted) = (String::new(), Vec::new(), false);
    for c in csv.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c == '\n' && !quoted {
            out += &cut(&record, &commas);
            out.push('\n');
            record.clear();
            commas.clear();
            continue;
        }
        if c == ',' && !quoted {
            commas.push(record.len());
        }
        record.push(c);
    }
    out + &cut(&record, &commas)
}

impl std::ops::Deref for Compared {
    type Target = Comparison;
    fn deref(&self) -> &Comparison {
        &self.result
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn drop_last_fields_keeps_quoted_commas_and_newlines() {
        let csv = "# a, b\nindex,token,x,y\n0,\"a,b\",1,2\n1,\"c\nd,e\",3,4\n2,\"\"\"\",5,6";
        assert_eq!(super::drop_last_fields(csv, 2), "# a, b\nindex,token\n0,\"a,b\"\n1,\"c\nd,e\"\n2,\"\"\"\"");
    }
}
