"""Host cost of one warm call of every op (Python checks/plan lookup + TVM-FFI + launch), session 12.

Each call is timed while the GPU is held busy by ``torch.cuda._sleep`` queued first, so the loop measures only the
host side (submission never waits on the GPU: 400 calls stay below the launch queue's depth); median of 5 loops.
The figures move by up to ~1.7x between machines of the same kind (seen in session 12), so compare only within a run;
the split-K rows are timed with and without split_k's workspace memo in ABBA order for that reason. Shapes are
decode-size so that the kernels are the ones the host cost matters for; ``out=`` is given where the op takes it
(allocation is timed separately for int8). torch's own tiny ``copy_`` is the reference point.
``python benchmarks/host_overhead.py`` prints µs per call and writes $OUT/host_overhead.json.
"""

from __future__ import annotations

import json
import os
import time

import torch

N_CALLS = 400
SLEEP_CYCLES = 200_000_000  # ~0.1 s of GPU time at ~2 GHz: longer than the timed loop


def host_us(call) -> float:
    """Median over 5 loops of N_CALLS calls, each loop queued behind a GPU sleep."""
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        torch.cuda._sleep(SLEEP_CYCLES)
        t = time.perf_counter()
        for _ in range(N_CALLS):
            call()
        times.append((time.perf_counter() - t) / N_CALLS * 1e6)
        torch.cuda.synchronize()
    return sorted(times)[2]


class _NoMemo(dict):
    """Stands in for split_k's workspace memo to time the path without it (session 12's A/B)."""

    def get(self, key, default=None):
        return default


def main():
    from cute_kernels import awq_gemm, fp8_blockwise_scaled_mm, int8_scaled_mm, quantized_mm
    from cute_kernels.formats.bitpack import pack_weights
    from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group

    dev = "cuda"
    res = {}
    x = torch.empty(16, 256, device=dev)
    y = torch.empty_like(x)
    res["torch copy_ (16 x 256 fp32)"] = host_us(lambda: y.copy_(x))

    for m, n, k in ((1, 4096, 4096), (64, 4096, 4096)):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev).t()
        sa, sb = torch.rand(m, device=dev), torch.rand(n, device=dev)
        bias = torch.randn(n, device=dev).bfloat16()
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        res[f"int8_scaled_mm M={m} N=K={n}, out="] = host_us(lambda: int8_scaled_mm(a, w, sa, sb, bias, out=out))
        res[f"int8_scaled_mm M={m} N=K={n}, allocating"] = host_us(lambda: int8_scaled_mm(a, w, sa, sb, bias))

    from cute_kernels.ops import split_k

    memo = split_k._last_workspace
    for m, n, k in ((1, 4096, 4096), (16, 4096, 4096)):  # split-K rows: with and without the workspace memo, ABBA
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev).t()
        sa, sb = torch.rand(m, device=dev), torch.rand(n, device=dev)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        for label in ("memo", "no memo", "no memo", "memo"):
            split_k._last_workspace = memo if label == "memo" else _NoMemo()
            t = host_us(lambda: int8_scaled_mm(a, w, sa, sb, out=out))
            res.setdefault(f"int8_scaled_mm M={m} N=K={n}, out=, {label}", []).append(round(t, 2))
    split_k._last_workspace = memo

    for m, n, k in ((1, 4096, 7168), (64, 4096, 7168), (1024, 4096, 7168)):
        aq, sa = quantize_fp8_per_token_group(torch.randn(m, k, device=dev))
        bq, sb = quantize_fp8_blockwise(torch.randn(n, k, device=dev))
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        fp8_blockwise_scaled_mm(aq, bq, sa, sb, out=out)
        res[f"fp8_blockwise_scaled_mm M={m} N={n} K={k}, out="] = host_us(
            lambda: fp8_blockwise_scaled_mm(aq, bq, sa, sb, out=out))
        res[f"fp8_blockwise_scaled_mm M={m} N={n} K={k}, allocating"] = host_us(
            lambda: fp8_blockwise_scaled_mm(aq, bq, sa, sb))

    wq = pack_weights(torch.randint(-8, 8, (4096, 4096), device=dev), 4)
    xq = torch.randn(1, 4096, device=dev).bfloat16()
    res["quantized_mm 4-bit M=1 N=K=4096"] = host_us(lambda: quantized_mm(xq, wq, 0.01, 4))

    qweight = torch.randint(-2**31, 2**31 - 1, (4096, 512), dtype=torch.int32, device=dev)
    qzeros = torch.randint(-2**31, 2**31 - 1, (32, 512), dtype=torch.int32, device=dev)
    scales = (torch.rand(32, 4096, device=dev) * 0.01).half()
    xa = torch.randn(1, 4096, device=dev).half()
    res["awq_gemm M=1 OC=IC=4096"] = host_us(lambda: awq_gemm(xa, qweight, scales, qzeros))

    # the WGMMA path (session 14): 64 tokens, warm plan, with out=
    xq64 = torch.randn(64, 4096, device=dev).bfloat16()
    oq64 = torch.empty(64, 4096, device=dev, dtype=torch.bfloat16)
    res["quantized_mm 4-bit M=64 N=K=4096 (wgmma), out="] = host_us(lambda: quantized_mm(xq64, wq, 0.01, 4, out=oq64))
    xa64 = torch.randn(64, 4096, device=dev).half()
    oa64 = torch.empty(64, 4096, device=dev, dtype=torch.float16)
    res["awq_gemm M=64 OC=IC=4096 (wgmma), out="] = host_us(lambda: awq_gemm(xa64, qweight, scales, qzeros, out=oa64))

    # the torch.library custom ops (torch_ops.py) called eagerly: the plain function plus the dispatcher's path
    ops = torch.ops.cute_kernels
    a1 = torch.randint(-128, 128, (1, 4096), dtype=torch.int8, device=dev)
    w1 = torch.randint(-128, 128, (4096, 4096), dtype=torch.int8, device=dev).t()
    sa1, sb1 = torch.rand(1, device=dev), torch.rand(4096, device=dev)
    for label in ("plain", "torch.ops", "torch.ops", "plain"):  # ABBA: this host drifts between loops
        f8 = int8_scaled_mm if label == "plain" else ops.int8_scaled_mm
        fa = awq_gemm if label == "plain" else ops.awq_gemm
        res.setdefault(f"int8_scaled_mm M=1 N=K=4096, allocating, {label}", []).append(
            round(host_us(lambda: f8(a1, w1, sa1, sb1)), 2))
        res.setdefault(f"awq_gemm M=1 OC=IC=4096, {label}", []).append(
            round(host_us(lambda: fa(xa, qweight, scales, qzeros)), 2))

    res["device"] = torch.cuda.get_device_name()
    for k, v in res.items():
        print(f"{k:62s} {v:6.1f} us" if isinstance(v, float) else f"{k:62s} {v}")
    with open(os.path.join(os.environ.get("OUT", "."), "host_overhead.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
