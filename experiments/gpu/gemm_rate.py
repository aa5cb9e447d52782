# The bf16 matmul rate this GPU reaches on the projections of Llama-3.1-8B's training step (4 x 2,048
# tokens): the rate issue 53's FLOP bound divides by. cuBLAS through torch, 20 timed runs of each
# shape after 5 warm-ups; prints each shape's TFLOP/s and the FLOP-weighted rate over one layer's
# forward projections (Q/K/V, O, gate/up, down) and the head.
#   python3 experiments/gpu/gemm_rate.py
import time, torch

M = 4 * 2048
SHAPES = [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096), ("head", 4096, 128256)]
tot_flop = tot_s = 0.0
print(torch.cuda.get_device_name(), torch.__version__)
for name, k, n in SHAPES:
    a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    s = (time.perf_counter() - t) / 20
    f = 2 * M * k * n
    tot_flop += f
    tot_s += s
    print(f"GEMM {name:8s} {M} x {k} x {n}: {s * 1e3:.3f} ms, {f / s / 1e12:.0f} TFLOP/s")
print(f"GEMM rate over the shapes (FLOP-weighted): {tot_flop / tot_s / 1e12:.0f} TFLOP/s")
