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
can at best approach (the big-buffer figures leave the fixed cost of a short kernel out).
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

    return triton, copy_kernel, read_kernel


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
        triton, copy_kernel, read_kernel = _triton_kernels()
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


def read_sized(size_mb: float) -> dict:
    """Best Triton read of ``size_mb`` MB (over block sizes / warps): µs and GB/s, buffers rotated past L2."""
    triton, _, read_kernel = _triton_kernels()
    n = int(size_mb * 1e6) // 4
    sets = [torch.randn(n, device="cuda") for _ in range(max(2, -(-200 // int(size_mb + 1))))]
    best = None
    for block in TRITON_BLOCKS:
        for warps in (4, 8):
            grid = (triton.cdiv(n, block),)
            partial = torch.empty(grid[0], device="cuda")
            calls = [lambda s=s, block=block, warps=warps, grid=grid, partial=partial:
                     read_kernel[grid](s, partial, n, BLOCK=block, num_warps=warps) for s in sets]
            t, _ = graph_time_us(calls)
            if best is None or t < best[0]:
                best = (t, block, warps)
    return {"MB": size_mb, "us": best[0], "GB/s": n * 4 / best[0] / 1e3, "block": best[1], "warps": best[2]}


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="", help="comma-separated buffer sizes (MB) for the size-matched read")
    args = ap.parse_args()
    res = measure()
    if args.sizes_mb:
        res["sized_reads"] = [read_sized(float(v)) for v in args.sizes_mb.split(",")]
    res["device"] = torch.cuda.get_device_name()
    for k, v in res.items():
        print(f"{k:40s} {v:8.0f}" if isinstance(v, float) else f"{k:40s} {v}")
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "copy_bandwidth.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
