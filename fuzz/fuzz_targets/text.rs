//! The text loader: arbitrary bytes as a user's text file.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = focus_core::io::text::text_from_bytes(data.to_vec(), "fuzz input");
    let p = common::scratch().join("text.txt");
    std::fs::write(&p, data).unwrap();
    let _ = focus_core::io::text::read_text(&p);
});
