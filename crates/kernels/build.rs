//! Under the `cuda` feature, compiles cuda/*.cu to PTX with nvcc (the toolchain that
//! ../shared/tools/cuda-env.sh sets up: CUDA_ROOT, CUDA_COMPUTE_CAP): focus_attention.cu (the
//! inference kernels), focus_train.cu (the training step's), focus_decode.cu (a generation
//! step's attention over a cache on the GPU), focus_route.cu (that step's routing) and focus_rows.cu (the
//! fused row ops of model::fused). Without it, does nothing, so
//! CPU builds need no CUDA toolchain.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    const KERNELS: [&str; 5] = ["focus_attention", "focus_train", "focus_decode", "focus_route", "focus_rows"];
    for k in KERNELS {
        println!("cargo:rerun-if-changed=cuda/{k}.cu");
    }
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var("CUDA_ROOT").map(|r| format!("{r}/bin/nvcc")).unwrap_or_else(|_| "nvcc".into());
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    for k in KERNELS {
        let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join(format!("{k}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17", &format!("-arch=sm_{cap}"), "-o"])
            .arg(&out)
            .arg(format!("cuda/{k}.cu"))
            .status()
            .unwrap_or_else(|e| panic!("cannot run {nvcc} (source ../shared/tools/cuda-env.sh first): {e}"));
        assert!(status.success(), "nvcc failed on cuda/{k}.cu");
    }
}
