"""The device's memory bandwidth: the denominator of every "% of copy bandwidth" figure in docs/.

Measured several ways on 2 GiB fp32 buffers (far beyond L2), CUDA-graph medians:
  copy  torch ``dst.copy_(src)`` (cudaMemcpy-like), and a Triton copy kernel (16-byte vectors, several block sizes):
        bytes read + bytes written per second
  read  torch ``src.sum()``, and a Triton kernel that loads every element and writes one partial sum per program:
        bytes read per second (the floor of a weight-streaming GEMM, which reads its weights and writes little)
The best of each kind is the figure docs use; all are printed. Triton is optional (the device machine has it).
``python benchmarks/copy_bandwidth.py`` prints a table and writes $OUT/copy_bandwidth.json.

``--sizes-mb 16.8,58.7`` (session 13) also times the Triton read kernel on buffers of exactly those sizes - the
weight bytes of the decode-size GEMM rows - rotated through more than L2 like the benchmarks' weights: the time a
bare read of a layer's weights takes, launch and ramp included, i.e. what a weight-streaming kernel of that size
can at best approach (the big-buffer figures leave the fixed cost of a short kernel out). ``--min-calls 16``
(session 56) builds each timed graph of at least that many calls, as bench_awq.py does for the kernels it compares
(the default 1 keeps sessions 13-50's graphs of one call per rotating buffer), and also times a persistent read:
a few programs per SM, each looping over one contiguous slice.
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from cute_kernels.bench import graph_time_us  # noqa: E402

N_FLOATS = 2**29  # 2 GiB
TRITON_BLOCKS = (2048, 4096, 8192, 16384)


def _triton_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask, eviction_policy="evict_first"), mask=mask,
                 eviction_policy="evict_first")

    @triton.jit
    def read_kernel(src, partial, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(src + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        tl.store(partial + pid, tl.sum(x, axis=0))

    @triton.jit
    def read_loop_kernel(src, partial, n, per_program, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        start = pid.to(tl.int64) * per_program
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, per_program, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            acc += tl.load(src + offs, mask=offs < n, other=0.0,
                           eviction_policy="evict_first")
        tl.store(partial + pid, tl.sum(acc, axis=0))

    return triton, copy_kernel, read_kernel, read_loop_kernel


def measure() -> dict:
    """{method: GB/s} for every method that runs here, plus "copy_gbs" / "read_gbs": the best of each kind."""
    src = torch.randn(N_FLOATS, device="cuda")
    dst = torch.empty_like(src)
    nbytes = src.numel() * 4
    res = {}
    t, _ = graph_time_us([lambda: dst.copy_(src)], replays=10)
    res["copy torch copy_"] = 2 * nbytes / t / 1e3
    t, _ = graph_time_us([lambda: src.sum()], replays=10)
    res["read torch sum"] = nbytes / t / 1e3
    try:
        triton, copy_kernel, read_kernel, _ = _triton_kernels()
    except ImportError:
        triton = None
    if triton is not None:
        for block in TRITON_BLOCKS:
            for warps in (4, 8):
                grid = (triton.cdiv(src.numel(), block),)
                partial = torch.empty(grid[0], device="cuda")

                def copy(block=block, warps=warps, grid=grid):
                    copy_kernel[grid](src, dst, src.numel(), BLOCK=block, num_warps=warps)

                def read(block=block, warps=warps, grid=grid, partial=partial):
                    read_kernel[grid](src, partial, src.numel(), BLOCK=block, num_warps=warps)

                copy()
                read()
                if not torch.equal(dst[:: 1 << 20], src[:: 1 << 20]):
                    raise RuntimeError("the Triton copy kernel copied wrong data")
                t, _ = graph_time_us([copy], replays=10)
                res[f"copy triton block {block} warps {warps}"] = 2 * nbytes / t / 1e3
                t, _ = graph_time_us([read], replays=10)
                res[f"read triton block {block} warps {warps}"] = nbytes / t / 1e3
    res["copy_gbs"] = max(v for k, v in res.items() if k.startswith("copy "))
    res["read_gbs"] = max(v for k, v in res.items() if k.startswith("read "))
    return res


def read_sized(size_mb: float, min_calls: int = 1) -> dict:
    """Best Triton read of ``size_mb`` MB (over block sizes / warps, and with ``min_calls`` > 1 the persistent read at
    1-4 programs per SM): µs and GB/s, buffers rotated past L2, graphs of at least ``min_calls`` calls."""
    triton, _, read_kernel, read_loop_kernel = _triton_kernels()
    n = int(size_mb * 1e6) // 4
    sets = [torch.randn(n, device="cuda") for _ in range(max(2, -(-200 // int(size_mb + 1))))]
    ref = sets[0].double().sum().item()
    timed = {}
    for block in TRITON_BLOCKS:
        for warps in (4, 8):
            grid = (triton.cdiv(n, block),)
            partial = torch.empty(grid[0], device="cuda")
            calls = [lambda s=s, block=block, warps=warps, grid=grid, partial=partial:
                     read_kernel[grid](s, partial, n, BLOCK=block, num_warps=warps) for s in sets]
            timed[f"block {block} warps {warps}"] = graph_time_us(calls, min_calls=min_calls)[0]
    if min_calls > 1:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for per_sm in (1, 2, 4):
            for block, warps in ((2048, 8), (4096, 8), (8192, 8), (16384, 16)):
                programs = per_sm * sms
                per_program = -(-n // (programs * block)) * block
                partial = torch.empty(programs, device="cuda")
                read_loop_kernel[(programs,)](sets[0], partial, n, per_program, BLOCK=block, num_warps=warps)
                if abs(partial.double().sum().item() - ref) > 1e-3 * max(1.0, abs(ref)) + 1e-2 * n ** 0.5:
                    raise RuntimeError("the persistent read kernel summed wrong data")
                calls = [lambda s=s, block=block, warps=warps, programs=programs, per_program=per_program,
                         partial=partial: read_loop_kernel[(programs,)](s, partial, n, per_program, BLOCK=block,
                                                                        num_warps=warps) for s in sets]
                timed[f"persistent {per_sm}/SM block {block} warps {warps}"] = graph_time_us(
                    calls, min_calls=min_calls)[0]
    best = min(timed, key=timed.get)
    return {"MB": size_mb, "us": timed[best], "GB/s": n * 4 / timed[best] / 1e3, "best": best,
            "min_calls": min_calls, "all_us": {k: round(v, 3) for k, v in timed.items()}}


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="", help="comma-separated buffer sizes (MB) for the size-matched read")
    ap.add_argument("--min-calls", type=int, default=1, help="calls per timed graph of the size-matched read")
    ap.add_argument("--sized-only", action="store_true", help="skip the 2 GiB measurements")
    args = ap.parse_args()
    res = {} if args.sized_only else measure()
    if args.sizes_mb:
        res["sized_reads"] = [read_sized(float(v), args.min_calls) for v in args.sizes_mb.split(",")]
    res["device"] = torch.cuda.get_device_name()
    for k, v in res.items():
        print(f"{k:40s} {v:8.0f}" if isinstance(v, float) else f"{k:40s} {v}")
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "copy_bandwidth.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
