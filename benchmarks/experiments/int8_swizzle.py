"""Tile rasterization of the persistent schedule at 8192^3 (int8), session 13 (one variant per process).

The schedule walks clusters M-fastest: a wave of 66 clusters (128 x 256 tiles, 1x2 clusters) covers all 64 M tiles of
two N columns, i.e. all of A (64 MB, more than L2) once per wave - ~1 GB of DRAM reads per 8192^3 call, ~1.4 TB/s
while the kernel is compute-bound and power-capped (docs/int8_scaled_mm.md: the 700 W cap sets the sustained clock).
cutlass.utils' scheduler can swizzle: with ``swizzle_size = S`` (raster along M) it walks S N-clusters before moving
to the next M cluster, so a wave touches ~66/S M tiles and 2S N tiles (S = 4: ~32 MB, L2-sized). Less DRAM traffic,
possibly less power, possibly a higher sustained clock. The variant is injected by wrapping
``cutlass.utils.PersistentTileSchedulerParams`` (compile with the disk cache off):

Since the rule shipped (``configs.raster_for``) the variants are forced by replacing the ops' ``raster_for``:
``CUTE_KERNELS_DISK_CACHE=0 python benchmarks/experiments/int8_swizzle.py VARIANT`` with VARIANT ``shipped`` (the
rule), ``off`` (the plain M-fastest order everywhere) or ``S m|n`` (swizzle S over N clusters rastering along M, or
over M clusters rastering along N, on every problem; the session-13 sweep ran these before the rule existed, by
wrapping ``cutlass.utils.PersistentTileSchedulerParams``). Prints one JSON line per problem (int8 and FP8 large
shapes): a row slice checked against float64, the benchmark's timing (do_bench_cudagraph, ~100 ms), and a sustained
figure (a graph of 100 calls replayed 5 times, median per call).
"""
import json
import statistics
import sys

import torch

VARIANT = sys.argv[1:] or ["shipped"]
if VARIANT != ["shipped"]:
    import cute_kernels.ops.fp8_blockwise_scaled_mm as fp8_op
    import cute_kernels.ops.int8_scaled_mm as int8_op

    forced = (1, True) if VARIANT == ["off"] else (int(VARIANT[0]), (VARIANT[1:] or ["m"])[0] == "m")
    int8_op.raster_for = fp8_op.raster_for = lambda cfg, m, n, batch=1, sm_count=132: forced
PROBLEMS = [("int8", 8192, 8192, 8192), ("int8", 4096, 14336, 4096), ("int8", 8192, 4096, 14336),
            ("fp8", 8192, 8192, 8192), ("fp8", 4096, 7168, 16384)]


def timings(call, flops):
    from triton.testing import do_bench_cudagraph

    bench_us = do_bench_cudagraph(call, rep=100, return_mode="median") * 1e3
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.synchronize()
    with torch.cuda.graph(g, stream=s):
        for _ in range(100):
            call()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / 100)
    sustained = statistics.median(times)
    return {"bench_us": bench_us, "bench_tflops": flops / bench_us / 1e6, "sustained_us": sustained,
            "sustained_tflops": flops / sustained / 1e6}


def int8_case(m, n, k):
    from cute_kernels import int8_scaled_mm
    from cute_kernels.reference import int8_scaled_mm_ref

    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()
    sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    int8_scaled_mm(a, b, sa, sb, bias, out=out)
    rows = torch.arange(0, m, m // 64, device="cuda")
    ref = int8_scaled_mm_ref(a[rows], b, sa[rows], sb, bias)
    err = ((out[rows].double() - ref).abs() / (ref.abs() + 1)).max().item()
    assert not out.isnan().any() and err < 1e-2, err
    return err, lambda: int8_scaled_mm(a, b, sa, sb, bias, out=out)


def fp8_case(m, n, k):
    sys.path.insert(0, "benchmarks")
    from bench_fp8_blockwise import GROUPWISE, operands, ours, rel_err
    from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

    a, b, a_s, b_s = operands(m, n, k)
    f = ours(a, b, a_s, b_s)
    out = f()
    rows = torch.arange(0, m, m // 64, device="cuda")
    err = rel_err(out[rows], fp8_blockwise_scaled_mm_ref(a[rows], b, a_s[rows], b_s, GROUPWISE))
    assert not out.isnan().any() and err < 1e-2, err
    return err, f


def main():
    for fam, m, n, k in PROBLEMS:
        err, call = (int8_case if fam == "int8" else fp8_case)(m, n, k)
        row = {"variant": " ".join(VARIANT), "family": fam, "M": m, "N": n, "K": k, "rel_err": err,
               **timings(call, 2 * m * n * k), "device": torch.cuda.get_device_name()}
        print(json.dumps(row), flush=True)
        call = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
