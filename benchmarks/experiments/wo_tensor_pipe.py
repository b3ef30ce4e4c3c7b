"""Session 11: where the decode path's time goes at 1 vs 16 tokens (ncu target), and an FP8 M = 1 re-timing.

``python benchmarks/experiments/wo_tensor_pipe.py profile KIND M``: builds N = K = 8192 operands (KIND int4 | int2 |
awq), checks one call against float64, then calls the op 5 times (ncu profiles the last: --launch-skip 4).
``python benchmarks/experiments/wo_tensor_pipe.py fp8m1``: FP8 blockwise M = 1 on the five DeepSeek-V3 layers, CUDA
graph medians with rotated weights (the benchmark's eager row at N = 2112 looked off on an H100).
"""
import sys

import torch

N = K = 8192


def profile(kind, m):
    from cute_kernels import reference
    from cute_kernels.weight_only import quantized_mm, awq_gemm
    torch.manual_seed(0)
    if kind == "awq":
        sys.path.insert(0, "benchmarks")
        from bench_awq import _awq_set
        x = torch.randn(m, K, dtype=torch.float16, device="cuda")
        qweight, scales, qzeros = _awq_set(K, N, torch.float16)
        fn = lambda: awq_gemm(x, qweight, scales, qzeros)
    else:
        bits = int(kind[3:])
        x = torch.randn(m, K, dtype=torch.bfloat16, device="cuda")
        w = torch.randint(0, 256, (N, K * bits // 8), dtype=torch.uint8, device="cuda")
        fn = lambda: quantized_mm(x, w, 0.01, bits)
        ref = reference.quantized_mm_ref(x[:, :].cpu(), w[:64].cpu(), 0.01, bits)
        got = fn()[:, :64].double().cpu()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        print(f"{kind} M={m} err {err:.2e}")
        assert err < 1e-2
    for _ in range(5):
        fn()
    torch.cuda.synchronize()


def fp8m1():
    sys.path.insert(0, "benchmarks")
    from bench_fp8_blockwise import DSV3_NK, operands, ours
    from cute_kernels.bench import graph_time_us
    for n, k in DSV3_NK:
        sets = max(2, -(-200 * 2**20 // (n * k)))
        calls = [ours(*operands(1, n, k, seed=s)) for s in range(sets)]
        t, mode = graph_time_us(calls)  # µs per call
        print(f"fp8 M=1 N={n} K={k}: {t:.2f} us ({mode}), {n * k / t / 1e3:.0f} GB/s")


if __name__ == "__main__":
    if sys.argv[1] == "profile":
        profile(sys.argv[2], int(sys.argv[3]))
    else:
        fp8m1()
