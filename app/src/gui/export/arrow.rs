//! Each token's group and memberships in every layer as an Arrow IPC file (STEM.groups.arrow,
//! beside the tidy STEM.groups.csv): the same rows and numbers, in a columnar file that pandas,
//! polars, DuckDB or R's arrow read without parsing text, for long texts (32K tokens x 30 layers
//! is a million rows). Written with the Apache Arrow crates (`arrow-ipc`), one record batch per
//! layer. Core's statistics set (`focus_core::analysis::export`) calls it as its `ArrowEncoder`,
//! for `focus-lens analyze --out` and the GUI's export alike.

use focus_core::analysis::shown::{Numbering, ShownAnalysis};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder, UInt16Builder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use std::sync::Arc;

/// The schema: one row per (token, layer). `group` is the group's number (`numbering`),
/// `group_raw` the centroid's index; `memberships[s]` is the membership of the group numbered
/// `s` (null where no group has number `s`); `confidence` the largest membership (null when the
/// analysis kept no per-token routing, as memberships then).
pub fn schema(res: &ShownAnalysis, numbering: Numbering) -> Schema {
    let fields = vec![
        Field::new("token", DataType::UInt32, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("layer", DataType::UInt16, false),
        Field::new("group", DataType::UInt16, false),
        Field::new("group_raw", DataType::UInt16, false),
        Field::new("confidence", DataType::Float32, true),
        Field::new("category", DataType::Utf8, false),
        Field::new("memberships", DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true))), true),
    ];
    let meta = [("group_numbers", numbering.note().to_string()), ("model", res.analysis.model.clone()), ("adapter", res.analysis.adapter.clone()), ("mode", res.analysis.mode.clone())];
    Schema::new_with_metadata(fields, meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<std::collections::HashMap<_, _>>())
}

/// The Arrow IPC file's bytes.
pub fn token_groups_arrow(res: &ShownAnalysis, numbering: Numbering) -> focus_core::Result<Vec<u8>> {
    let schema = Arc::new(schema(res, numbering));
    let err = |e: arrow_schema::ArrowError| focus_core::Error::Invalid(format!("Arrow IPC: {e}"));
    let mut w = arrow_ipc::writer::FileWriter::try_new(Vec::new(), &schema).map_err(err)?;
    let n = res.tokens();
    for layer in 0..res.layers() {
        let (shown, raw_of) = res.numbers(layer, numbering);
        let routing = res.analysis.routing.get(layer).filter(|r| r.t == n);
        let (mut token, mut text, mut lay, mut group, mut group_raw) = (UInt32Builder::with_capacity(n), StringBuilder::new(), UInt16Builder::with_capacity(n), UInt16Builder::with_capacity(n), UInt16Builder::with_capacity(n));
        let (mut conf, mut cat, mut mem) = (Float32Builder::with_capacity(n), StringBuilder::new(), ListBuilder::new(Float32Builder::new()));
        for (i, t) in res.analysis.tokens.iter().enumerate() {
            let Some(&g) = res.argmax.get(layer).and_then(|a| a.get(i)) else { continue };
            let g = g as usize;
            token.append_value(i as u32);
            text.append_value(&t.text);
            lay.append_value(layer as u16);
            group.append_value(shown[g] as u16);
            group_raw.append_value(g as u16);
            conf.append_option(res.token_routing(layer, i).map(|r| r.confidence));
            cat.append_value(t.category.name());
            let row = routing.map(|r| r.row(i)).or_else(|| res.token_routing(layer, i).map(|r| r.memberships.as_slice()));
            match row {
                Some(m) => {
                    raw_of.iter().for_each(|r| mem.values().append_option(r.and_then(|g| m.get(g).copied())));
                    mem.append(true);
                }
                None => mem.append(false),
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(token.finish()),
            Arc::new(text.finish()),
            Arc::new(lay.finish()),
            Arc::new(group.finish()),
            Arc::new(group_raw.finish()),
            Arc::new(conf.finish()),
            Arc::new(cat.finish()),
            Arc::new(mem.finish()),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), columns).map_err(err)?).map_err(err)?;
    }
    w.finish().map_err(err)?;
    w.into_inner().map_err(err)
}
