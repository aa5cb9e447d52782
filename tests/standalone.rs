//! A binary that stands alone: `focus-lens` copied out of the build tree (away from the checkout
//! it was built from) still runs `eval` on its built-in suites, and holds no compiled-in path to
//! the checkout's data; the GUI's adapter picker finds shipped adapters at run time (working
//! directory, executable, `FOCUS_LENS_ADAPTERS`), not through a build path.

mod common;

use focus_lens::gui::views::files::adapter_dirs_in;
use std::error::Error;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

type TestResult = Result<(), Box<dyn Error>>;

/// `eval` with its default data, run by a copy of the binary in an empty folder, from another
/// empty folder: the three suites (TruthfulQA MC, the cloze, the long-context cloze) load and
/// score their first items.
#[test]
fn eval_runs_from_a_copied_binary_on_its_built_in_data() -> TestResult {
    let bin_dir = tempfile::tempdir()?;
    let work_dir = tempfile::tempdir()?;
    let bin = bin_dir.path().join("focus-lens");
    std::fs::copy(env!("CARGO_BIN_EXE_focus-lens"), &bin)?;
    let out = Command::new(&bin)
        .args(["eval", "--limit", "2", "--no-base", "--json"])
        .env("FOCUS_LENS_MODEL", common::model_path())
        .current_dir(work_dir.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval from a copied binary failed: {stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let results = json["results"].as_array().ok_or("no results array")?;
    let suites: Vec<(&str, u64)> = results.iter().map(|r| (r["suite"].as_str().unwrap_or_default(), r["items"].as_u64().unwrap_or(0))).collect();
    assert_eq!(suites, [("truthfulqa-mc", 2), ("cloze", 2), ("long-cloze", 2)], "the three built-in suites, 2 items each");
    for r in results {
        let acc = r["accuracy"].as_f64().ok_or("no accuracy")?;
        assert!((0.0..=1.0).contains(&acc), "accuracy {acc}");
    }
    Ok(())
}

/// A file passed with `--truthfulqa` is still read (and its errors name it): the flags take files.
#[test]
fn eval_flags_still_take_files() -> TestResult {
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("task_mc.json");
    std::fs::write(&bad, r#"{"examples": [{"input": "Q?", "target_scores": {"a": 0, "b": 0}}]}"#)?;
    let out = Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .args(["eval", "--suite", "truthfulqa-mc", "--limit", "1", "--truthfulqa"])
        .arg(&bad)
        .env("FOCUS_LENS_MODEL", common::model_path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a task with no true answer was accepted");
    assert!(stderr.contains("one true answer") && stderr.contains("task_mc.json"), "{stderr}");
    Ok(())
}

/// The binary names no folder of the checkout it was built from as a place to read data: the
/// suites' old compiled-in defaults (`<checkout>/app/../assets/eval/...`) are gone.
#[test]
fn the_binary_holds_no_build_path_to_its_data() -> TestResult {
    let bytes = std::fs::read(env!("CARGO_BIN_EXE_focus-lens"))?;
    let root = common::root();
    for data in ["assets/eval", "sample_adapters"] {
        for p in [root.join("app/..").join(data), root.join(data)] {
            let needle = p.to_string_lossy().into_owned();
            assert!(!bytes.windows(needle.len()).any(|w| w == needle.as_bytes()), "the binary holds the build path {needle}");
        }
    }
    Ok(())
}

/// Copies one shipped adapter folder into `dest/sample_adapters/NAME`.
fn ship_one(dest: &Path) -> Result<std::path::PathBuf, Box<dyn Error>> {
    let to = dest.join("sample_adapters/smollm2-135m-k4");
    std::fs::create_dir_all(&to)?;
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(common::root().join("sample_adapters/smollm2-135m-k4").join(f), to.join(f))?;
    }
    Ok(dest.join("sample_adapters").canonicalize()?)
}

/// The picker's folders: `sample_adapters/` found from a working directory inside a tree, beside
/// (or above) the executable, and the folders `FOCUS_LENS_ADAPTERS` lists; nothing elsewhere.
#[test]
fn the_adapter_picker_finds_adapters_where_the_binary_runs() -> TestResult {
    let tree = tempfile::tempdir()?;
    let shipped = ship_one(tree.path())?;
    let deep = tree.path().join("a/b");
    std::fs::create_dir_all(&deep)?;
    assert_eq!(adapter_dirs_in(None, Some(&deep), None), [shipped.clone()], "from a working directory two folders down");
    assert_eq!(adapter_dirs_in(None, None, Some(&tree.path().join("bin/focus-lens"))), [shipped.clone()], "above the executable");

    let other = tempfile::tempdir()?;
    let listed = ship_one(other.path())?;
    let nowhere = tempfile::tempdir()?;
    assert!(adapter_dirs_in(None, Some(nowhere.path()), Some(&nowhere.path().join("focus-lens"))).is_empty(), "a folder without adapters");
    let var = std::env::join_paths([listed.clone(), nowhere.path().join("missing")])?;
    assert_eq!(adapter_dirs_in(Some(OsStr::new(&var)), Some(&deep), None), [listed, shipped], "FOCUS_LENS_ADAPTERS first, a missing folder skipped");
    Ok(())
}
