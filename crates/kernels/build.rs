//! Under the `cuda` feature, compiles cuda/*.cu to PTX with nvcc: focus_attention.cu (the
//! inference kernels), focus_train.cu (the training step's), focus_train_cap.cu and
//! focus_train_hard.cu (its soft-capped and straight-through attention, modules of their own),
//! focus_decode.cu (a generation
//! step's attention over a cache on the GPU), focus_route.cu (that step's routing and a prefill's) and
//! focus_rows.cu (the fused row ops of model::fused), all including cuda/focus_common.cuh
//! (focus_train.cu and focus_route.cu cuda/focus_sinkhorn.cuh too).
//! Without the feature it does nothing, so CPU builds need no CUDA toolchain.
//!
//! nvcc is found as candle's build finds it: in `CUDA_ROOT`, `CUDA_PATH` or
//! `CUDA_TOOLKIT_ROOT_DIR` (its `bin/`), else on `PATH`. The GPU architecture is
//! `CUDA_COMPUTE_CAP` (e.g. 90), else the first GPU's (`nvidia-smi`), else 90 (Hopper).
//! `scripts/cuda/cuda-env.sh` sets these up, installing nvcc on a machine without a toolkit.

use std::path::{Path, PathBuf};
use std::process::Command;

const KERNELS: [&str; 7] = ["focus_attention", "focus_train", "focus_train_cap", "focus_train_hard", "focus_decode", "focus_route", "focus_rows"];
const TOOLKIT_VARS: [&str; 3] = ["CUDA_ROOT", "CUDA_PATH", "CUDA_TOOLKIT_ROOT_DIR"];

fn main() {
    for k in KERNELS {
        println!("cargo:rerun-if-changed=cuda/{k}.cu");
    }
    println!("cargo:rerun-if-changed=cuda/focus_common.cuh");
    println!("cargo:rerun-if-changed=cuda/focus_sinkhorn.cuh");
    for v in TOOLKIT_VARS.iter().chain(&["CUDA_COMPUTE_CAP"]) {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = find_nvcc().unwrap_or_else(|| {
        fail(&format!(
            "the `cuda` feature needs nvcc, found neither in {} (their bin/) nor on PATH: install a CUDA \
             toolkit, or run `source scripts/cuda/cuda-env.sh` (it installs nvcc when there is none)",
            TOOLKIT_VARS.join(", ")
        ))
    });
    let cap = compute_cap();
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("cuda");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for k in KERNELS {
        let src = dir.join(format!("{k}.cu"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17", &format!("-arch=sm_{cap}")])
            .arg("-I")
            .arg(&dir)
            .arg("-o")
            .arg(out_dir.join(format!("{k}.ptx")))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", nvcc.display())));
        if !status.success() {
            fail(&format!("{} failed on {} (sm_{cap}; its messages are above)", nvcc.display(), src.display()));
        }
    }
}

/// `bin/nvcc` of the first toolkit variable that names one, else the first nvcc on PATH.
fn find_nvcc() -> Option<PathBuf> {
    let from_vars = TOOLKIT_VARS.iter().filter_map(std::env::var_os).filter(|v| !v.is_empty()).map(|v| Path::new(&v).join("bin"));
    let on_path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    from_vars.chain(on_path).map(|d| d.join("nvcc")).find(|n| n.is_file())
}

/// The target's compute capability as nvcc's `sm_` suffix: "90" for 9.0.
fn compute_cap() -> String {
    let (given, from) = match std::env::var("CUDA_COMPUTE_CAP") {
        Ok(v) => (v, "CUDA_COMPUTE_CAP"),
        Err(_) => match Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output() {
            Ok(o) if o.status.success() => (String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string(), "nvidia-smi"),
            _ => return "90".into(),
        },
    };
    let cap: String = given.trim().chars().filter(|&c| c != '.').collect();
    if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_digit()) {
        fail(&format!("{from} gave the compute capability {given:?}: expected a number such as 90 or 9.0"));
    }
    cap
}

/// One clear message and a failed build, rather than a panic's backtrace.
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
