//! The `focus-lens` binary end to end, on the real default model (SmolLM2-135M, Q4_1 GGUF).

#[path = "common/mod.rs"]
mod common;
/// The fuzz targets' helpers: the byte-level tokenizer that lets the tiny Llama read a text.
#[path = "../fuzz/common/mod.rs"]
mod fuzz_common;

use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn focus_lens<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .args(args)
        .env("FOCUS_LENS_MODEL", common::model_path())
        .output()
        .expect("run focus-lens")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command; returns its arguments as text (for messages) and its output.
fn run_shown<I, S>(args: I) -> (Vec<String>, std::process::Output)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    let shown = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    (shown, focus_lens(&args))
}

/// The default adapter with a local window of 64 (`adapter derive`, the weights the same), in
/// `dir`: short texts then have distant pairs for Focus to route (the shipped window, 512,
/// covers a 512-token text whole).
fn narrow_default(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("k8w64");
    let src = common::root().join("sample_adapters/smollm2-135m-k8");
    ok([std::ffi::OsStr::new("adapter"), "derive".as_ref(), src.as_os_str(), "--out".as_ref(), out.as_os_str(), "--window".as_ref(), "64".as_ref()]);
    out
}

/// Runs a command that must succeed and returns its stdout.
fn ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (shown, o) = run_shown(args);
    assert!(o.status.success(), "focus-lens {shown:?} failed: {}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    stdout(&o)
}

fn ok_json<I, S>(args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out}"))
}

/// Runs a command that must fail with one `error: ...` line on stderr; returns that line.
fn fails<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (shown, o) = run_shown(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "focus-lens {shown:?} succeeded: {}", stdout(&o));
    assert_eq!(o.status.code(), Some(1), "focus-lens {shown:?}: {err}");
    assert!(!err.contains("panicked"), "focus-lens {shown:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "focus-lens {shown:?}: stderr is not one line: {err:?}");
    assert!(lines[0].starts_with("error: "), "focus-lens {shown:?}: {err:?}");
    assert!(stdout(&o).trim().is_empty(), "focus-lens {shown:?} printed {:?}", stdout(&o));
    lines[0].to_string()
}

fn has(line: &str, phrases: &[&str]) {
    for p in phrases {
        assert!(line.contains(p), "{line:?} lacks {p:?}");
    }
}

/// The first `chars` characters of the Persuasion fixture, written to `dir/name`.
fn persuasion(dir: &Path, name: &str, chars: usize) -> PathBuf {
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let slice: String = text.chars().take(chars).collect();
    let p = dir.join(name);
    std::fs::write(&p, slice).unwrap();
    p
}

fn token_count(file: &Path) -> usize {
    let v = ok_json([OsStr::new("tokenize"), OsStr::new("--json"), file.as_os_str()]);
    let n = v["count"].as_u64().unwrap() as usize;
    assert_eq!(v["ids"].as_array().unwrap().len(), n);
    n
}

/// `adapter init --groups 4 --seed 3` (for the default model, or `model`).
fn init_adapter(dir: &Path, model: Option<&Path>) {
    let mut args: Vec<&OsStr> = vec!["adapter", "init", "--groups", "4", "--seed", "3", "--out"].into_iter().map(OsStr::new).collect();
    args.push(dir.as_os_str());
    if let Some(m) = model {
        args.push(OsStr::new("--model"));
        args.push(m.as_os_str());
    }
    ok(&args);
    assert!(dir.join("adapter_config.json").is_file());
    assert!(dir.join("adapter_model.safetensors").is_file());
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

#[test]
fn info_json() {
    let v = ok_json(["info", "--json"]);
    assert_eq!(v["format"], "gguf");
    assert_eq!(Path::new(v["path"].as_str().unwrap()), common::model_path());
    let c = &v["config"];
    assert_eq!(c["arch"], "llama");
    assert_eq!(c["n_layers"], 30);
    assert_eq!(c["d_model"], 576);
    assert_eq!(c["n_heads"], 9);
    assert_eq!(c["n_kv_heads"], 3);
    assert_eq!(c["head_dim"], 64);
    assert_eq!(c["ffn_dim"], 1536);
    assert_eq!(c["vocab"], 49152);
    assert_eq!(c["context"], 8192);
    assert_eq!(c["tied_embeddings"], true);
    assert_eq!(c["positions"]["Rope"]["theta"].as_f64(), Some(100000.0));
    assert_eq!(c["positions"]["Rope"]["interleaved"], true);
    assert_eq!(v["tokenizer_vocab"], 49152);
    assert_eq!(v["add_bos"], false);
    let fp = v["fingerprint"].as_str().unwrap();
    assert!(fp.len() == 32 && fp.chars().all(|c| c.is_ascii_hexdigit()), "{fp}");
    // The same model given as an argument describes the same file.
    let again = ok_json([OsStr::new("info"), OsStr::new("--json"), common::model_path().as_os_str()]);
    assert_eq!(again["fingerprint"], v["fingerprint"]);
    // A Hugging Face directory (no tokenizer).
    let tiny = common::fixture("hf_tiny/qwen2");
    let h = ok_json([OsStr::new("info"), OsStr::new("--json"), tiny.as_os_str()]);
    assert_eq!(h["format"], "safetensors");
    assert_eq!(h["config"]["arch"], "qwen2");
    assert_eq!(h["tokenizer_vocab"], Value::Null);
}

#[test]
fn tokenize_matches_llama_cpp() {
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("tokenizer_smollm2.json")).unwrap()).unwrap();
    let case = &cases[0];
    assert_eq!(case["parse_special"], false);
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("case.txt");
    std::fs::write(&f, case["text"].as_str().unwrap()).unwrap();
    let v = ok_json([OsStr::new("tokenize"), OsStr::new("--json"), f.as_os_str()]);
    assert_eq!(v["ids"], case["ids"], "token ids differ from llama.cpp's");
    assert_eq!(v["count"].as_u64().unwrap() as usize, case["ids"].as_array().unwrap().len());
    // The plain output lists the same ids.
    let plain = ok([OsStr::new("tokenize"), f.as_os_str()]);
    let ids: Vec<u64> = plain.split_whitespace().map(|s| s.parse().unwrap()).collect();
    let want: Vec<u64> = case["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(ids, want);
}

#[test]
fn ppl_dense_json() {
    let tmp = tempfile::tempdir().unwrap();
    let f = persuasion(tmp.path(), "p.txt", 8200);
    let v = ok_json([OsStr::new("ppl"), OsStr::new("--json"), OsStr::new("--ctx"), OsStr::new("128"), f.as_os_str()]);
    for key in ["ppl", "tokens", "mode", "k", "ctx", "seconds"] {
        assert!(v.get(key).is_some(), "key {key} missing from {v}");
    }
    let tokens = v["tokens"].as_u64().unwrap() as usize;
    assert!((1800..=2300).contains(&tokens), "tokens {tokens}");
    assert_eq!(v["mode"], "dense");
    assert_eq!(v["k"], Value::Null);
    assert_eq!(v["ctx"], 128);
    assert_eq!(v["chunks"].as_u64().unwrap() as usize, tokens / 128);
    assert_eq!(v["scored_tokens"].as_u64().unwrap() as usize, tokens / 128 * 63);
    let ppl = num(&v, "ppl");
    // llama.cpp measures 30.7 at ctx 512 on this book; a 128-token context sees less of it.
    assert!((20.0..80.0).contains(&ppl), "ppl {ppl}");
    assert!((num(&v, "mean_nll").exp() - ppl).abs() < 1e-6 * ppl);
    let secs = num(&v, "seconds");
    assert!(secs > 0.0 && secs < 600.0, "seconds {secs}");
    let chunks = v["per_chunk_nll"].as_array().unwrap();
    assert_eq!(chunks.len(), tokens / 128);
    assert!(chunks.iter().all(|c| c.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)));
    // `tokens` counts the whole file as `tokenize` does (the file has no trailing newline).
    assert_eq!(tokens, token_count(&f));
}

#[test]
fn adapter_init_and_focus_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = tmp.path().join("adapter");
    init_adapter(&ad, None);
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(ad.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["groups"], 4);
    assert_eq!(cfg["base_model"]["n_layers"], 30);
    assert!(cfg["init"].as_str().unwrap().contains("seed 3"));
    let info = ok_json(["info", "--json"]);
    assert_eq!(cfg["base_model"]["fingerprint"], info["fingerprint"]);
    // The same seed gives the same adapter.
    let ad2 = tmp.path().join("again");
    init_adapter(&ad2, None);
    assert_eq!(std::fs::read(ad.join("adapter_model.safetensors")).unwrap(), std::fs::read(ad2.join("adapter_model.safetensors")).unwrap());

    // ~600 tokens at ctx 256: with the default window of 128, distant pairs exist.
    let f = persuasion(tmp.path(), "p.txt", 2600);
    let ppl = |extra: &[&str]| -> Value {
        let mut args: Vec<&OsStr> = ["ppl", "--json", "--ctx", "256", "--adapter"].into_iter().map(OsStr::new).collect();
        args.push(ad.as_os_str());
        args.extend(extra.iter().map(OsStr::new));
        args.push(f.as_os_str());
        ok_json(&args)
    };
    let dense = ppl(&[]);
    let topk = ppl(&["--mode", "topk", "--k", "2"]);
    let soft = ppl(&["--mode", "soft"]);
    let all = ppl(&["--mode", "topk", "--k", "4"]);
    assert_eq!(dense["mode"], "dense");
    assert_eq!(topk["mode"], "topk");
    assert_eq!(topk["k"], 2);
    assert_eq!(soft["mode"], "soft");
    assert_eq!(soft["k"], Value::Null);
    assert_eq!(all["k"], 4);
    for v in [&dense, &topk, &soft, &all] {
        let p = num(v, "ppl");
        assert!(p.is_finite() && (5.0..500.0).contains(&p), "ppl {p} in {v}");
        assert_eq!(v["chunks"], dense["chunks"]);
    }
    let (d, t, s, a) = (num(&dense, "ppl"), num(&topk, "ppl"), num(&soft, "ppl"), num(&all, "ppl"));
    // Top-4 of 4 groups keeps every pair: the dense model, to float tolerance.
    assert!((a - d).abs() < 1e-3 * d, "topk(K) ppl {a} vs dense {d}");
    // Top-2 and soft gates do change the attention of distant pairs.
    assert!((t - d).abs() > 1e-6 * d, "topk(2) ppl {t} equals dense {d}");
    assert!((s - d).abs() > 1e-6 * d, "soft ppl {s} equals dense {d}");
    // k beyond K is refused.
    let mut args: Vec<&OsStr> = ["ppl", "--ctx", "256", "--mode", "topk", "--k", "5", "--adapter"].into_iter().map(OsStr::new).collect();
    args.push(ad.as_os_str());
    args.push(f.as_os_str());
    has(&fails(&args), &["k = 5", "1..=4"]);
}

/// `ppl --ctx A,B,C --modes ...` (issue 52): the table of quality and speed against length. Its
/// dense and top-2 figures are `ppl`'s own at the same length and chunks; a length above the
/// model's context is skipped and said (all of them: an error); a run that would not fit in the
/// memory available is skipped and said with both figures; the JSON's shape.
#[test]
fn ppl_table_of_quality_and_speed_against_length() {
    let tmp = tempfile::tempdir().unwrap();
    // ~1,300 tokens: two chunks of 256 and one of 512 (and ctx 16384 above SmolLM2's 8192).
    let f = persuasion(tmp.path(), "p.txt", 5200);
    let adapter = narrow_default(tmp.path());
    let table = |extra: &[&str]| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["ppl".into(), "--adapter".into(), adapter.clone().into()];
        args.extend(extra.iter().map(|s| s.into()));
        args.push(f.clone().into());
        args
    };
    let v = ok_json(table(&["--ctx", "256,512,16384", "--modes", "dense,top2,soft,top1", "--chunks", "2", "--json"]));
    assert_eq!(v["table"], "ppl_lengths");
    assert_eq!(v["context"], 8192);
    assert_eq!(v["max_chunks"], 2);
    assert_eq!(v["tokens"].as_u64().unwrap() as usize, token_count(&f));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["ctx"].as_u64().unwrap()).collect::<Vec<_>>(), vec![256, 512, 16384]);
    // Dense first, then the modes in the order asked.
    let labels = |r: &Value| r["modes"].as_array().unwrap().iter().map(|m| m["mode"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(labels(&rows[0]), ["dense", "top-2", "soft", "top-1"]);
    assert_eq!((rows[0]["chunks"].as_u64(), rows[1]["chunks"].as_u64()), (Some(2), Some(2)), "at most 2 chunks per length");
    for r in &rows[..2] {
        assert!(r["skipped"].is_null(), "{r}");
        let ctx = r["ctx"].as_u64().unwrap() as usize;
        assert_eq!(r["scored_tokens"].as_u64().unwrap() as usize, 2 * (ctx - 1 - ctx / 2));
        let dense = &r["modes"][0];
        assert_eq!(num(dense, "vs_dense_pct"), 0.0);
        assert_eq!(num(dense, "speed_vs_dense"), 1.0);
        for m in r["modes"].as_array().unwrap() {
            assert!(m["skipped"].is_null(), "{m}");
            let (p, t) = (num(m, "ppl"), num(m, "tokens_per_s"));
            assert!((5.0..500.0).contains(&p) && t > 0.0 && t.is_finite(), "{m}");
            assert!((num(m, "vs_dense_pct") - 100.0 * (p / num(dense, "ppl") - 1.0)).abs() < 1e-9, "{m}");
            assert!((num(m, "speed_vs_dense") - t / num(dense, "tokens_per_s")).abs() < 1e-9, "{m}");
            assert!((num(m, "tokens_per_s") * num(m, "prefill_s") - (2 * ctx) as f64).abs() < 1e-6 * (2 * ctx) as f64, "{m}");
            assert_eq!(m["per_chunk_nll"].as_array().unwrap().len(), 2);
        }
        // Routing changes distant pairs: top-2 and soft are not dense.
        assert!((num(&r["modes"][1], "ppl") - num(dense, "ppl")).abs() > 1e-9 * num(dense, "ppl"), "{r}");
        assert_eq!(r["modes"][1]["k"], 2);
        assert_eq!(r["modes"][2]["k"], Value::Null);
    }
    // The table's dense and top-2 perplexities are `ppl`'s at that length and those chunks.
    for (row, ctx) in [(&rows[0], "256"), (&rows[1], "512")] {
        let single = ok_json(table(&["--ctx", ctx, "--chunks", "2", "--json"]));
        assert_eq!(single["chunks"], 2);
        assert_eq!(num(&row["modes"][0], "ppl"), num(&single, "ppl"), "dense at ctx {ctx}");
        let top2 = ok_json(table(&["--ctx", ctx, "--chunks", "2", "--mode", "topk", "--k", "2", "--json"]));
        assert_eq!(num(&row["modes"][1], "ppl"), num(&top2, "ppl"), "top-2 at ctx {ctx}");
    }
    // Above the model's context: skipped and said, every mode with it.
    let long = &rows[2];
    assert!(long["skipped"].as_str().unwrap().contains("above the model's context (8192 tokens)"), "{long}");
    assert_eq!(long["chunks"], 0);
    assert!(long["modes"].as_array().unwrap().iter().all(|m| m["ppl"].is_null() && m["skipped"].is_string()));
    // The text table says the same.
    let text = ok(table(&["--ctx", "256,16384", "--modes", "dense,top2", "--chunks", "1"]));
    has(&text, &["quality and speed against length", "prefill tok/s", "top-2", "16384 skipped: above the model's context (8192 tokens)"]);
    assert!(text.lines().any(|l| l.trim_start().starts_with("256") && l.contains("dense")), "{text}");
    // Every length refused: an error naming why; a k beyond K: an error.
    has(&fails(table(&["--ctx", "9000,16384", "--modes", "dense,top2"])), &["no length could run", "ctx 9000: above the model's context (8192 tokens)"]);
    has(&fails(table(&["--ctx", "256,512", "--modes", "dense,top9"])), &["top9", "k = 9"]);
    let none = fails([OsStr::new("ppl"), OsStr::new("--ctx"), OsStr::new("256,512"), OsStr::new("--modes"), OsStr::new("dense,soft"), f.as_os_str()]);
    has(&none, &["--modes soft needs --adapter"]);

    // A memory cap between dense's and soft's estimate at ctx 1024: soft is skipped with both
    // figures, dense runs.
    use focus_core::model::memory::{ModelHeader, Workload};
    let h = ModelHeader::open(&common::model_path()).unwrap();
    let need = |soft| h.estimate(&Workload::perplexity(1024, soft)).total();
    let (d, s) = (need(false), need(true));
    assert!(d < s, "soft holds T x T scores: {d} < {s}");
    let f2 = persuasion(tmp.path(), "p2.txt", 5200);
    let mut args: Vec<&OsStr> = vec![OsStr::new("ppl"), OsStr::new("--adapter"), adapter.as_os_str()];
    args.extend(["--ctx", "1024", "--modes", "soft,top2", "--chunks", "1", "--json"].map(OsStr::new));
    args.push(f2.as_os_str());
    let o = Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(&args).env("FOCUS_LENS_MODEL", common::model_path()).env("FOCUS_LENS_MEMORY", ((d + s) / 2).to_string()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = &v["rows"][0];
    assert_eq!(labels(r), ["dense", "soft", "top-2"]);
    let soft = r["modes"][1]["skipped"].as_str().unwrap_or_else(|| panic!("soft runs under the cap: {r}"));
    has(soft, &["soft at ctx 1024 needs about", "is available (FOCUS_LENS_MEMORY)"]);
    assert!(r["modes"][0]["ppl"].is_number() && r["modes"][2]["ppl"].is_number(), "{r}");
}

#[test]
fn analyze_writes_json_and_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = tmp.path().join("adapter");
    init_adapter(&ad, None);
    let f = persuasion(tmp.path(), "p.txt", 2600);
    let t = token_count(&f);
    let analyze = |out: &Path| {
        ok([OsStr::new("analyze"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), out.as_os_str()]);
    };
    let json_path = tmp.path().join("stats.json");
    let csv_path = tmp.path().join("stats.csv");
    analyze(&json_path);
    analyze(&csv_path);

    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(v["groups"], 4);
    assert_eq!(v["k"], 2);
    assert_eq!(v["window"], 128);
    assert_eq!(v["tokens"].as_array().unwrap().len(), t);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 30);
    let causal = (t * (t + 1) / 2) as u64;
    let mut retained_sum = 0.0;
    for (l, layer) in layers.iter().enumerate() {
        assert_eq!(layer["layer"], l);
        let dom = num(layer, "dominance");
        assert!((0.25 - 1e-9..=1.0).contains(&dom), "layer {l} dominance {dom}");
        let sizes: Vec<u64> = layer["group_size"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(sizes.len(), 4);
        assert_eq!(sizes.iter().sum::<u64>() as usize, t);
        assert!((dom - *sizes.iter().max().unwrap() as f64 / t as f64).abs() < 1e-9);
        let p = &layer["pairs"];
        assert_eq!(p["causal"].as_u64().unwrap(), causal);
        let (local, distant) = (p["local"].as_u64().unwrap(), p["same_group_distant"].as_u64().unwrap());
        let retained = num(p, "retained");
        assert!((retained - (local + distant) as f64 / causal as f64).abs() < 1e-9);
        assert!(retained > 0.0 && retained <= 1.0, "layer {l} retained {retained}");
        retained_sum += retained;
        let toks = layer["tokens"].as_array().unwrap();
        assert_eq!(toks.len(), t);
        let m: f64 = toks[t / 2]["memberships"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).sum();
        assert!((m - 1.0).abs() < 1e-4);
    }
    // Two of four groups per token, window 128 over ~600 tokens: some distant pairs are pruned.
    assert!(retained_sum / 30.0 < 0.999, "mean retained {}", retained_sum / 30.0);

    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    // Group numbers as the GUI shows them (matched across layers), the raw index beside them.
    assert_eq!(
        header,
        "layer,group,group_raw,size,size_share,mass_before,mass_after,dominance,mean_confidence,mean_entropy,pairs_retained,pairs_local,pairs_same_group_distant,pairs_causal"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 30 * 4);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.len(), 14, "row {i}: {r:?}");
        let (l, g) = (i / 4, i % 4);
        assert_eq!((r[0].parse::<usize>().unwrap(), r[1].parse::<usize>().unwrap()), (l, g));
        // The CSV holds the same numbers as the JSON.
        let layer = &layers[l];
        assert_eq!(r[2].parse::<u64>().unwrap(), layer["group_raw_of_shown"][g].as_u64().unwrap());
        assert_eq!(r[3].parse::<u64>().unwrap(), layer["group_size"][g].as_u64().unwrap());
        assert!((r[7].parse::<f64>().unwrap() - num(layer, "dominance")).abs() < 1e-5);
        assert!((r[10].parse::<f64>().unwrap() - num(&layer["pairs"], "retained")).abs() < 1e-5);
        assert_eq!(r[13].parse::<u64>().unwrap(), causal);
    }
    // Any other extension is refused.
    has(
        &fails([OsStr::new("analyze"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), OsStr::new("stats.txt")]),
        &["--out must end in .json or .csv"],
    );
}

/// The token-weighted purity of each layer in an analysis JSON, from its centroid profiles.
fn layer_purities(v: &Value) -> Vec<f64> {
    v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let cs = p["centroids"].as_array().unwrap();
            let n: f64 = cs.iter().map(|c| c["tokens"].as_f64().unwrap()).sum();
            cs.iter().map(|c| c["tokens"].as_f64().unwrap() * c["purity"].as_f64().unwrap_or(0.0)).sum::<f64>() / n
        })
        .collect()
}

/// Checks one printed labels table (`analyze --labels`) against layer `l` of the JSON: one row
/// per group with its top category, purity, share and top tokens with counts.
fn check_labels_table(stdout: &str, v: &Value, l: usize, heading: &str) {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines.iter().position(|x| x.starts_with(&format!("layer {l} ("))).unwrap_or_else(|| panic!("no table heading for layer {l}:\n{stdout}"));
    assert!(lines[at].contains(heading), "{}", lines[at]);
    let purity = layer_purities(v)[l];
    assert!(lines[at].contains(&format!("token-weighted purity {:.1}%", 100.0 * purity)), "{} vs {purity}", lines[at]);
    assert!(lines[at + 1].starts_with("group  category") && lines[at + 1].contains("purity") && lines[at + 1].contains("top tokens"), "{}", lines[at + 1]);
    let cs = v["profiles"][l]["centroids"].as_array().unwrap();
    let total: f64 = cs.iter().map(|c| c["tokens"].as_f64().unwrap()).sum();
    for (g, c) in cs.iter().enumerate() {
        let row = lines[at + 2 + g];
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], format!("G{g}"), "{row}");
        assert_eq!(cols[1], c["top_category"].as_str().unwrap_or("empty"), "{row}");
        // The purity figure is the JSON's, rounded to a whole percent.
        let want = c["purity"].as_f64().map(|p| format!("{:.0}%", 100.0 * p)).unwrap_or("-".into());
        assert_eq!(cols[2], want, "{row}");
        assert_eq!(cols[3], format!("{:.1}%", 100.0 * c["tokens"].as_f64().unwrap() / total), "{row}");
        // Top tokens with their counts, most frequent first, as the JSON lists them.
        let tops: Vec<(String, u64)> = row.splitn(2, "%  ").nth(1).and_then(|r| r.splitn(2, "%  ").nth(1)).unwrap_or("").split("  ").filter(|t| !t.is_empty()).map(|t| {
            let (text, n) = t.rsplit_once(" x").unwrap_or_else(|| panic!("token {t:?} in {row}"));
            (text.to_string(), n.parse().unwrap())
        }).collect();
        let json_tops = c["top_tokens"].as_array().unwrap();
        assert_eq!(tops.len(), json_tops.len().min(5), "{row}");
        for ((text, n), j) in tops.iter().zip(json_tops) {
            assert_eq!(*n, j["count"].as_u64().unwrap(), "{row}");
            assert_eq!(*text, j["text"].as_str().unwrap().replace(' ', "·").replace('\n', "¶").replace('\t', "»"), "{row}");
        }
    }
    assert!(lines.get(at + 2 + cs.len()).is_none_or(|x| !x.starts_with('G')), "one row per group");
}

/// `analyze --labels` prints the best layer's table in the paper's form (group, category,
/// purity, top tokens with counts), on the real model with the shipped K = 8 adapter; the best
/// layer is the one of highest token-weighted purity, and every figure is the JSON's.
/// `--layer N` prints layer N's table instead; a layer beyond the model is refused.
#[test]
fn analyze_labels_prints_the_best_layer_table() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = common::root().join("sample_adapters/smollm2-135m-k8");
    let f = persuasion(tmp.path(), "p.txt", 1500);
    let out = tmp.path().join("stats.json");
    let run = |extra: &[&str]| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("analyze"), OsStr::new("--labels"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), out.as_os_str()];
        args.extend(extra.iter().map(OsStr::new));
        let stdout = ok(&args);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        (stdout, v)
    };
    let (stdout, v) = run(&[]);
    let pur = layer_purities(&v);
    assert_eq!(pur.len(), 30);
    let best = (0..pur.len()).fold(0, |b, l| if pur[l] > pur[b] { l } else { b });
    check_labels_table(&stdout, &v, best, "best: highest token-weighted purity");
    // The per-layer table carries the purity column too.
    let row = stdout.lines().find(|x| x.split_whitespace().next() == Some(&best.to_string()) && x.split_whitespace().count() == 5).expect("the layer's stats row");
    assert_eq!(row.split_whitespace().last().unwrap(), format!("{:.3}", pur[best]));

    let other = if best == 3 { 4 } else { 3 };
    let (stdout, v) = run(&["--layer", &other.to_string()]);
    check_labels_table(&stdout, &v, other, &format!("asked for; the best routed layer is {best}"));

    let line = fails([OsStr::new("analyze"), OsStr::new("--labels"), OsStr::new("--layer"), OsStr::new("30"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), out.as_os_str()]);
    has(&line, &["--layer 30 is out of range", "30 layers"]);
}

#[test]
fn errors_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A missing file.
    let missing = d.join("missing.txt");
    has(&fails([OsStr::new("ppl"), missing.as_os_str()]), &["cannot read", "missing.txt"]);
    has(&fails([OsStr::new("tokenize"), missing.as_os_str()]), &["cannot read", "missing.txt"]);
    // An empty text file.
    let empty = d.join("empty.txt");
    std::fs::write(&empty, b"").unwrap();
    has(&fails([OsStr::new("ppl"), empty.as_os_str()]), &["empty.txt", "is empty"]);
    // A text shorter than one chunk.
    let short = d.join("short.txt");
    std::fs::write(&short, "Just a few words.").unwrap();
    has(&fails([OsStr::new("ppl"), OsStr::new("--ctx"), OsStr::new("128"), short.as_os_str()]), &["needs at least 128"]);
    // --mode topk without --adapter.
    has(&fails([OsStr::new("ppl"), OsStr::new("--mode"), OsStr::new("topk"), short.as_os_str()]), &["--mode topk needs --adapter"]);
    // A model that does not exist, and a file that is not a model.
    has(&fails([OsStr::new("info"), missing.as_os_str()]), &["cannot read", "missing.txt"]);
    has(&fails([OsStr::new("info"), short.as_os_str()]), &["not a GGUF file"]);
    // A model without a tokenizer cannot tokenize.
    let tiny = common::fixture("hf_tiny/llama");
    has(&fails([OsStr::new("tokenize"), OsStr::new("--model"), tiny.as_os_str(), short.as_os_str()]), &["ships no tokenizer"]);
    // Benchmark lengths the model cannot run (0 is a usage error, tests/hostile_input.rs).
    has(&fails(["bench", "forward", "--lengths", "9000", "--repeats", "1"]), &["--lengths 9000 must be in 1..=8192"]);
}

#[test]
fn adapter_for_another_model_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = tmp.path().join("tiny-adapter");
    init_adapter(&ad, Some(&common::fixture("hf_tiny/llama")));
    let f = persuasion(tmp.path(), "p.txt", 2000);
    let line = fails([OsStr::new("ppl"), OsStr::new("--adapter"), ad.as_os_str(), OsStr::new("--mode"), OsStr::new("topk"), f.as_os_str()]);
    has(&line, &["tiny-adapter", "adapter does not fit the model", "base_model.n_layers", "adapter has 2, model has 30"]);
    let out = tmp.path().join("s.json");
    let line = fails([OsStr::new("analyze"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), out.as_os_str()]);
    has(&line, &["adapter does not fit the model", "base_model.n_layers"]);
    assert!(!out.exists(), "a failed analyze wrote {}", out.display());
}

/// The config of an adapter folder.
fn adapter_config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap()).unwrap()
}

/// Every file of a folder (name, bytes), sorted by name.
fn folder_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect();
    v.sort();
    v
}

/// A copy of the tiny Llama fixture with a byte-level tokenizer, in `dir/name`.
fn tiny_llama(dir: &Path, name: &str) -> std::path::PathBuf {
    let m = dir.join(name);
    std::fs::create_dir(&m).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(common::fixture("hf_tiny/llama").join(f), m.join(f)).unwrap();
    }
    std::fs::write(m.join("tokenizer.json"), fuzz_common::byte_tokenizer_json()).unwrap();
    m
}

/// `adapter derive`: a copy of an adapter with its local window changed runs exactly as the
/// same adapter with the window edited in its config by hand (top-k ppl equal, and unequal to
/// the source's), has lost its results, keeps its training record and weights, and says what
/// changed in one line; a call that changes nothing writes nothing and says so.
#[test]
fn adapter_derive_changes_the_window_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tiny_llama(tmp.path(), "model");
    let os = |v: &[&str]| -> Vec<std::ffi::OsString> { v.iter().map(|s| s.into()).collect() };
    let (m, ad, out) = (m.to_str().unwrap(), tmp.path().join("ad"), tmp.path().join("w12"));
    let (ad, out) = (ad.to_str().unwrap(), out.to_str().unwrap());
    ok(os(&["adapter", "init", "--groups", "4", "--window", "4", "--seed", "3", "--model", m, "--out", ad]));
    let mut cfg = adapter_config(Path::new(ad));
    cfg["training"] = serde_json::json!({ "steps": 100 });
    cfg["results"] = serde_json::json!({ "heldout_ppl": 12.5 });
    std::fs::write(Path::new(ad).join("adapter_config.json"), serde_json::to_string_pretty(&cfg).unwrap()).unwrap();

    let (shown, o) = run_shown(os(&["adapter", "derive", ad, "--model", m, "--out", out, "--window", "12"]));
    assert!(o.status.success(), "{shown:?}: {}", stderr(&o));
    let line = stderr(&o);
    assert_eq!(line.lines().count(), 1, "{line:?}");
    has(&line, &["derived", "window 4 -> 12", "no measured results carried over"]);
    let derived = adapter_config(Path::new(out));
    assert_eq!(derived["window"], 12);
    assert!(derived.get("results").is_none());
    assert_eq!(derived["training"], cfg["training"]);
    assert_eq!(derived["derived_from"]["changed"], serde_json::json!(["window 4 -> 12"]));
    assert_eq!(std::fs::read(Path::new(out).join("adapter_model.safetensors")).unwrap(), std::fs::read(Path::new(ad).join("adapter_model.safetensors")).unwrap());

    // The same window edited by hand into a copy.
    let hand = tmp.path().join("hand");
    std::fs::create_dir(&hand).unwrap();
    std::fs::copy(Path::new(ad).join("adapter_model.safetensors"), hand.join("adapter_model.safetensors")).unwrap();
    cfg["window"] = serde_json::json!(12);
    std::fs::write(hand.join("adapter_config.json"), serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let text = tmp.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat, and the dog lay by the door. ".repeat(8)).unwrap();
    let ppl = |adapter: &str| ok_json(os(&["ppl", "--json", "--ctx", "64", "--mode", "topk", "--k", "1", "--model", m, "--adapter", adapter, text.to_str().unwrap()]))["ppl"].as_f64().unwrap();
    let (src, der, by_hand) = (ppl(ad), ppl(out), ppl(hand.to_str().unwrap()));
    assert_eq!(der, by_hand);
    assert!((der - src).abs() > 1e-6 * src, "window 12 ran as window 4: {der} vs {src}");

    for (extra, phrase) in [(vec![], "nothing to change"), (vec!["--window", "4"], "nothing to change"), (vec!["--top-k", "9"], "top_k = 9")] {
        let again = tmp.path().join("again");
        let mut a = os(&["adapter", "derive", ad, "--model", m, "--out", again.to_str().unwrap()]);
        a.extend(os(&extra));
        has(&fails(a), &[phrase]);
        assert!(!again.exists(), "{extra:?} wrote {}", again.display());
    }
}

/// `adapter rebase`: an adapter of the tiny Llama A is refused on B (A with one byte of one
/// weight changed: the same shape, other weights' bytes, as a quantization of the same model
/// is) by the fingerprint; rebased onto B it runs there (top-k ppl, which differs from dense),
/// records where it came from, has lost its results, keeps its training record, every other
/// setting and its weights file byte for byte, and no longer fits A. A model of another shape
/// (another architecture, another layer count) is still refused with the field named; an
/// existing non-empty --out, or the adapter's own folder, is refused and left as it was.
#[test]
fn adapter_rebase_moves_an_adapter_to_other_weights_of_the_same_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tiny_llama(tmp.path(), "model-a");
    let b = tmp.path().join("model-b");
    std::fs::create_dir(&b).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(a.join(f), b.join(f)).unwrap();
    }
    // The lowest byte of the first float of the data (the start of a tensor: fingerprinted).
    let mut weights = std::fs::read(a.join("model.safetensors")).unwrap();
    let header = u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
    weights[8 + header] ^= 1;
    std::fs::write(b.join("model.safetensors"), &weights).unwrap();
    let (info_a, info_b) = (ok_json([OsStr::new("info"), a.as_os_str(), OsStr::new("--json")]), ok_json([OsStr::new("info"), b.as_os_str(), OsStr::new("--json")]));
    let (fp_a, fp_b) = (info_a["fingerprint"].as_str().unwrap(), info_b["fingerprint"].as_str().unwrap());
    assert_ne!(fp_a, fp_b, "the changed byte must change the fingerprint");

    let ad = tmp.path().join("adapter-a");
    fn args(v: &[&OsStr]) -> Vec<std::ffi::OsString> {
        v.iter().map(|s| s.to_os_string()).collect()
    }
    ok(args(&["adapter".as_ref(), "init".as_ref(), "--groups".as_ref(), "4".as_ref(), "--window".as_ref(), "4".as_ref(), "--seed".as_ref(), "3".as_ref(), "--model".as_ref(), a.as_os_str(), "--out".as_ref(), ad.as_os_str()]));
    // As a trained and evaluated adapter carries them.
    let mut cfg = adapter_config(&ad);
    cfg["training"] = serde_json::json!({ "steps": 100, "data": ["train.txt"] });
    cfg["results"] = serde_json::json!({ "heldout_ppl": 12.5 });
    std::fs::write(ad.join("adapter_config.json"), serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let adapter_before = folder_files(&ad);

    let text = tmp.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(12)).unwrap();
    let ppl = |model: &Path, adapter: &Path, mode: &str| -> Vec<std::ffi::OsString> {
        ["ppl", "--json", "--ctx", "32", "--mode", mode, "--model"].iter().map(|s| s.into()).chain([model.into(), "--adapter".into(), adapter.into(), text.as_os_str().into()]).collect()
    };
    let on_a = ok_json(ppl(&a, &ad, "topk"));
    assert_eq!(on_a["mode"], "topk");
    has(&fails(ppl(&b, &ad, "topk")), &["adapter-a", "base_model.fingerprint (the base weights differ)", fp_a, fp_b]);

    let out = tmp.path().join("adapter-b");
    let (shown, o) = run_shown(args(&["adapter".as_ref(), "rebase".as_ref(), ad.as_os_str(), "--model".as_ref(), b.as_os_str(), "--out".as_ref(), out.as_os_str()]));
    assert!(o.status.success(), "{shown:?}: {}", stderr(&o));
    let line = stderr(&o);
    assert_eq!(line.lines().count(), 1, "{line:?}");
    has(&line, &["rebased", "adapter-a", &fp_a[..12], "->", &fp_b[..12], "adapter-b", info_a["config"]["name"].as_str().unwrap(), info_b["config"]["name"].as_str().unwrap()]);
    assert_eq!(folder_files(&ad), adapter_before, "the adapter's folder was changed");

    // It runs on B, routing (top-k differs from dense), and no longer fits A.
    let topk = ok_json(ppl(&b, &out, "topk"));
    let dense = ok_json(ppl(&b, &out, "dense"));
    assert_eq!(topk["mode"], "topk");
    let (t, d) = (num(&topk, "ppl"), num(&dense, "ppl"));
    assert!(t.is_finite() && (t - d).abs() > 1e-6 * d, "top-k {t} vs dense {d}");
    has(&fails(ppl(&a, &out, "topk")), &["adapter-b", "base_model.fingerprint (the base weights differ)"]);

    let new = adapter_config(&out);
    assert_eq!(new["base_model"]["fingerprint"], fp_b);
    assert_eq!(new["base_model"]["name"], info_b["config"]["name"]);
    let from = &new["rebased_from"];
    assert_eq!(from["base_model"], cfg["base_model"]);
    assert_eq!(from["adapter"], std::fs::canonicalize(&ad).unwrap().to_str().unwrap());
    let date = from["date"].as_str().unwrap();
    assert!(date.len() == 10 && date.starts_with("20") && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-', "{date}");
    assert!(new.get("results").is_none(), "results kept: {new}");
    assert_eq!(new["training"], cfg["training"]);
    // Every other field is the old adapter's.
    let strip = |v: &Value| {
        let mut m = v.as_object().unwrap().clone();
        for k in ["base_model", "rebased_from", "results"] {
            m.remove(k);
        }
        m
    };
    assert_eq!(strip(&new), strip(&cfg));
    assert_eq!(std::fs::read(out.join("adapter_model.safetensors")).unwrap(), std::fs::read(ad.join("adapter_model.safetensors")).unwrap());
    assert_eq!(folder_files(&out).len(), 2);

    // Another shape is refused by rebase as by loading, naming the field; nothing is written.
    let refused = tmp.path().join("refused");
    let rebase_onto = |model: &Path, out: &Path| fails(args(&["adapter".as_ref(), "rebase".as_ref(), ad.as_os_str(), "--model".as_ref(), model.as_os_str(), "--out".as_ref(), out.as_os_str()]));
    has(&rebase_onto(&common::fixture("hf_tiny/qwen2"), &refused), &["adapter-a", "adapter does not fit the model", "base_model.arch", "adapter has llama, model has qwen2"]);
    has(&rebase_onto(&common::model_path(), &refused), &["base_model.n_layers", "adapter has 2, model has 30"]);
    assert!(!refused.exists());
    // An existing folder that holds anything is refused and left as it was, the adapter's own
    // folder included; so is a folder inside the adapter's.
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes.txt"), "keep me").unwrap();
    let out_before = folder_files(&out);
    for o in [&full, &out] {
        has(&rebase_onto(&b, o), &["not empty"]);
    }
    has(&rebase_onto(&b, &ad), &["inside it"]);
    has(&rebase_onto(&b, &ad.join("sub")), &["inside it"]);
    assert_eq!(folder_files(&full), vec![("notes.txt".to_string(), b"keep me".to_vec())]);
    assert_eq!(folder_files(&out), out_before);
    assert_eq!(folder_files(&ad), adapter_before);
    // Onto the weights it already fits: nothing to rebase.
    has(&rebase_onto(&a, &refused), &["nothing to rebase"]);
    assert!(!refused.exists());
}

/// `bench forward --stages`: one more pass of each mode split by stage, every stage in the JSON.
/// Dense runs as the base model does, without the router: until 8643ab3 it routed every layer
/// to no use (on a GPU the host's Sinkhorn was 40% of a dense 32K pass of Qwen2.5), so its
/// routing stage must be empty beside top-k's, which routes each of the 30 layers.
#[test]
fn bench_forward_stages_and_dense_without_the_router() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = narrow_default(tmp.path());
    let v = ok_json([std::ffi::OsStr::new("bench"), "forward".as_ref(), "--json".as_ref(), "--lengths".as_ref(), "256".as_ref(), "--repeats".as_ref(), "1".as_ref(), "--stages".as_ref(), "--adapter".as_ref(), ad.as_os_str()]);
    let r = &v["rows"][0];
    let stage = |m: &str, s: &str| r[m][s].as_f64().unwrap_or_else(|| panic!("{m}.{s} missing: {r}"));
    for m in ["dense_stages", "topk_stages"] {
        for s in ["embed_s", "qkv_s", "route_s", "plan_s", "attend_s", "finish_s"] {
            assert!(stage(m, s) >= 0.0, "{m}.{s}");
        }
        assert!(stage(m, "attend_s") > 0.0 && stage(m, "finish_s") > 0.0, "{r}");
    }
    assert!(stage("dense_stages", "route_s") < stage("topk_stages", "route_s"), "dense routed: {r}");
    // Without --stages the rows carry none.
    let plain = ok_json(["bench", "forward", "--json", "--lengths", "64", "--repeats", "1"]);
    assert!(plain["rows"][0].get("dense_stages").is_none(), "{plain}");
}

/// `bench attention --json`: one JSON object per (length, K, k) row with the documented keys;
/// bad settings are one-line errors.
#[test]
fn bench_attention_rows_and_errors() {
    let out = ok(["bench", "attention", "--json", "--lengths", "300,500", "--groups", "4,8", "--k", "1,2", "--heads", "2", "--head-dim", "16", "--window", "32", "--repeats", "1"]);
    let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(rows.len(), 8, "{out}");
    for r in &rows {
        for key in ["n", "groups", "k", "dense_ms", "focus_ms", "speedup", "pairs_fraction", "device", "candle_ms"] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
        assert_eq!(r["device"], "cpu");
        assert_eq!(r["dtype"], "f32");
        let pf = r["pairs_fraction"].as_f64().unwrap();
        assert!(pf > 0.0 && pf <= 1.0);
    }
    // Outside the flags' ranges: usage errors (exit 2) that name the range.
    for (args, want) in [(["bench", "attention", "--lengths", "0"], "0 is outside the accepted range 1..="), (["bench", "attention", "--groups", "65"], "65 is outside the accepted range 1..=64")] {
        let (shown, o) = run_shown(args);
        assert_eq!(o.status.code(), Some(2), "focus-lens {shown:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "focus-lens {shown:?}: {}", stderr(&o));
    }
    has(&fails(["bench", "attention", "--groups", "2", "--k", "3"]), &["no (K, k) pair with k <= K"]);
    has(&fails(["bench", "attention", "--heads", "6", "--kv-heads", "4"]), &["multiple of kv-heads"]);
    has(&fails(["bench", "attention", "--device", "tpu"]), &["unknown device"]);
    has(&fails(["bench", "attention", "--dtype", "bf16"]), &["--dtype bf16 needs --device cuda"]);
    has(&fails(["bench", "attention", "--dtype", "f16"]), &["--dtype must be f32 or bf16"]);
    has(&fails(["bench", "attention", "--tile-rows", "96"]), &["tile rows must be 64 or 128"]);
}

/// `focus-lens demo` prints the sample analysis; without a display, plain `focus-lens` says
/// why there is no window and prints the same demo instead of failing.
#[test]
fn demo_and_no_display_fallback() {
    let out = ok(["demo"]);
    has(&out, &["Focus Lens:", "sample text:", "layer  dominance"]);
    let o = Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .env("FOCUS_LENS_MODEL", common::model_path())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("run focus-lens");
    assert!(o.status.success(), "{}", stderr(&o));
    has(&stderr(&o), &["no display", "focus-lens demo"]);
    has(&stdout(&o), &["Focus Lens:", "layer  dominance"]);
}

/// `analyze` reports structure (FOCUS-METHOD section 6) beside the untrained twin: with the
/// shipped untrained adapter (a random init, seed 0) the twin is the adapter itself, so every
/// figure equals the twin's and the ratio is 1; NMIs lie in [0, 1]; at layer 0 the category NMI
/// stands above its permutation null; the CSV set has the structure beside the others, and
/// `--no-twin` leaves the twin out.
#[test]
fn analyze_reports_structure_beside_the_untrained_twin() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = common::root().join("sample_adapters/smollm2-135m-k8-init");
    // 3,000 characters past the fixture's front matter.
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let f = tmp.path().join("p.txt");
    std::fs::write(&f, text.chars().skip(10_000).take(3_000).collect::<String>()).unwrap();
    let json_path = tmp.path().join("stats.json");
    let o = focus_lens([OsStr::new("analyze"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), json_path.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    has(&err, &["median NMI(top group, category) over layers >= 1", "untrained twin (seed 0)", "ratio 1.00x", "paper-form table of the best layer", "% of tokens"]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(v["layers"].as_array().unwrap().len(), 30, "the analysis is still there");
    let s = &v["structure"];
    let (mine, twin) = (s["adapter"]["layers"].as_array().unwrap(), s["twin"]["layers"].as_array().unwrap());
    assert_eq!((mine.len(), twin.len(), s["twin_seed"].as_u64()), (30, 30, Some(0)));
    for (l, (a, b)) in mine.iter().zip(twin).enumerate() {
        for key in ["category", "token", "position", "repeat"] {
            for f in ["value", "null_mean", "null_max"] {
                let x = num(&a[key], f);
                assert!((0.0..=1.0).contains(&x), "layer {l} {key}.{f} = {x}");
            }
        }
        for f in ["purity", "dominance"] {
            assert!((0.0..=1.0).contains(&num(a, f)), "layer {l} {f}");
        }
        assert!(a["pure60"].as_u64().unwrap() <= 8);
        // The twin of a seed-0 random init is that init.
        assert_eq!(a, b, "layer {l}: the twin differs from the untrained adapter");
    }
    let l0 = &mine[0]["category"];
    assert!(num(l0, "null_max") < num(l0, "value") && num(l0, "value") > 0.1, "layer 0: a random router already groups by category: {l0}");
    assert!((num(&s["vs_twin"], "median") - 1.0).abs() < 1e-12);
    assert!((num(s, "median_category_nmi") - num(s, "twin_median_category_nmi")).abs() < 1e-12);
    let t = &s["table"];
    let best = t["layer"].as_u64().unwrap() as usize;
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    assert_eq!(rows.iter().map(|r| r["tokens"].as_u64().unwrap()).sum::<u64>() as usize, v["tokens"].as_array().unwrap().len());
    assert_eq!(t["pure60"], mine[best]["pure60"]);
    for r in rows.iter().filter(|r| r["tokens"].as_u64().unwrap() > 0) {
        let tops = r["top_tokens"].as_array().unwrap();
        assert!(!tops.is_empty() && tops.len() <= 5);
        let counts: Vec<u64> = tops.iter().map(|x| x["count"].as_u64().unwrap()).collect();
        assert!(counts.windows(2).all(|w| w[0] >= w[1]) && counts[0] <= r["tokens"].as_u64().unwrap(), "{counts:?}");
        assert!(focus_core::analysis::categories::Category::from_name(r["top_category"].as_str().unwrap()).is_some());
    }

    // The CSV set, without the twin.
    let csv_path = tmp.path().join("stats.csv");
    let o = focus_lens([OsStr::new("analyze"), OsStr::new("--no-twin"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), csv_path.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    has(&stderr(&o), &["no untrained twin (--no-twin)", "stats.structure.csv"]);
    let csv = std::fs::read_to_string(tmp.path().join("stats.structure.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().starts_with("layer,nmi_category,nmi_category_null_mean,nmi_category_null_max,nmi_token"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 30);
    // Layer 0's category NMI is the JSON's; the twin's columns are empty.
    let f0: Vec<&str> = rows[0].split(',').collect();
    assert!((f0[1].parse::<f64>().unwrap() - num(l0, "value")).abs() < 1e-5);
    assert!(f0[13..19].iter().all(|x| x.is_empty()) && f0[19] == "true", "{}", rows[0]);
    let table = std::fs::read_to_string(tmp.path().join("stats.structure_table.csv")).unwrap();
    assert_eq!(table.lines().count(), 9);
    assert!(table.starts_with("layer,group,tokens,share,top_category,purity,pure,top_tokens\n"));
}

/// A run that would not fit in memory is refused before any weight is read, in one error line
/// that names the estimate, the memory available and where that figure comes from (here the
/// user's own cap, FOCUS_LENS_MEMORY); nothing is written. `info` reports the same cap.
#[test]
fn analyze_refuses_what_will_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let ad = tmp.path().join("adapter");
    init_adapter(&ad, None);
    let f = persuasion(tmp.path(), "p.txt", 2600);
    let out = tmp.path().join("stats.json");
    let capped = |args: &[&OsStr]| Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(args).env("FOCUS_LENS_MODEL", common::model_path()).env("FOCUS_LENS_MEMORY", "100M").output().unwrap();
    let o = capped(&[OsStr::new("analyze"), OsStr::new("--adapter"), ad.as_os_str(), f.as_os_str(), OsStr::new("--out"), out.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    has(lines[0], &["error: not enough memory", "analyze", &focus_core::model::memory::human(100_000_000), "FOCUS_LENS_MEMORY", "focus-lens info"]);
    assert!(!out.exists(), "a refused run wrote {}", out.display());
    let o = capped(&[OsStr::new("info"), OsStr::new("--tokens"), OsStr::new("2048")]);
    assert!(o.status.success(), "{}", stderr(&o));
    has(&stdout(&o), &["available", "FOCUS_LENS_MEMORY"]);
}

/// `info --device cuda` adds the device memory an analysis on a GPU will need (every matrix in
/// bf16: 2 bytes a parameter; the header alone, so a build without CUDA states it too), in text
/// and JSON; the CPU's estimate stays as it is, and an unknown device is refused.
#[test]
fn info_states_the_gpu_estimate() {
    let cpu = ok_json(["info", "--json", "--tokens", "100"]);
    let gpu = ok_json(["info", "--json", "--tokens", "100", "--device", "cuda"]);
    assert_eq!(cpu["memory"]["estimate"], gpu["memory"]["estimate"]);
    assert_eq!(cpu["device_memory"], Value::Null);
    let d = &gpu["device_memory"];
    assert_eq!(d["device"], "cuda");
    assert_eq!(d["tokens"], 100);
    // SmolLM2-135M (tied): 134,479,872 parameters of matrices, 61 norms of 576.
    let e = &d["estimate"];
    assert_eq!(e["weights"], 2 * 134_479_872 + 4 * 61 * 576);
    let terms: u64 = ["weights", "kv_cache", "activations", "context"].iter().map(|k| e[*k].as_u64().unwrap()).sum();
    assert_eq!(d["total"].as_u64(), Some(terms));
    let text = ok(["info", "--tokens", "100", "--device", "cuda"]);
    has(&text, &["device      cuda, analyze over 100 tokens", "bf16", "MiB, as nvidia-smi counts"]);
    assert!(!ok(["info", "--tokens", "100"]).contains("device "));
    has(&fails(["info", "--device", "tpu"]), &["unknown device", "tpu"]);
}

/// `info --json` of a Llama 3.x GGUF (its RoPE scaling as the file's per-frequency divisors)
/// states the scaling; it used to panic serializing it.
#[test]
fn info_json_states_llama3_rope_divisors() {
    let gguf = common::fixture("gguf_tiny/llama3.gguf");
    let v = ok_json([OsStr::new("info"), OsStr::new("--json"), gguf.as_os_str()]);
    let s = &v["config"]["rope_scaling"];
    assert_eq!(s["type"], "divisors", "{s}");
    assert!(s["divisors"].as_array().is_some_and(|d| !d.is_empty()), "{s}");
}

/// `eval --suite long-cloze` builds its items from the texts given, at the context length given:
/// on a small text with two names repeated 350 and 300 words apart (and stopword filler, never a
/// target) at --long-ctx 512, two items of at most 512 tokens, scored dense and top-k with
/// standard errors; a context beyond the model's is refused.
#[test]
fn eval_long_cloze_from_a_text() {
    let tmp = tempfile::tempdir().unwrap();
    let filler = ["the", "and", "of", "was", "in", "it", "to", "he"];
    let words: Vec<&str> = (0..1400).map(|i| match i { 300 | 650 => "Zebulon", 1000 | 1300 => "Ashdown", _ => filler[i % filler.len()] }).collect();
    let text = tmp.path().join("small.txt");
    std::fs::write(&text, words.join(" ")).unwrap();
    let adapter = narrow_default(tmp.path());
    let v = ok_json(["eval", "--suite", "long-cloze", "--long-cloze-text", text.to_str().unwrap(), "--long-ctx", "512", "--adapter", adapter.to_str().unwrap(), "--mode", "topk", "--k", "2", "--json"]);
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.iter().map(|r| (r["suite"].as_str().unwrap(), r["mode"].as_str().unwrap(), r["items"].as_u64().unwrap())).collect::<Vec<_>>(), [("long-cloze", "dense", 2), ("long-cloze", "topk(2)", 2)]);
    for r in r {
        assert!(r["max_tokens"].as_u64().unwrap() <= 512 && r["items_within_window"] == 0, "{r}");
        assert!(r["accuracy_se"].as_f64().is_some() && r["score_se"].as_f64().unwrap() >= 0.0, "{r}");
    }
    let e = fails(["eval", "--suite", "long-cloze", "--long-ctx", "100000"]);
    assert!(e.contains("--long-ctx 100000 exceeds the model's context"), "{e}");
}
