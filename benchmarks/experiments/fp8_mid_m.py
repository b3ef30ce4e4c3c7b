"""Session 6: 65-256 tokens - the shipped 128-row tile (split up to 4) against 64-row tiles (two token tiles of one
warpgroup each, ``k_pair``, split up to 8) at the same tile width. fp8_sweep's harness: every variant checked
against float64 first, CUDA-graph medians, weights rotated beyond L2.

    python benchmarks/experiments/fp8_mid_m.py     # -> $OUT/fp8_mid_m.json
"""

from dataclasses import replace

from fp8_sweep import DSV3_NK, SMS, Kernels, check, sweep

import torch

import cute_kernels.ops.fp8_blockwise_scaled_mm as op


def variants(m, n, k):
    shipped = op.select_config(m, n, k, 1, SMS)
    return {"shipped": (shipped, {"sfa_tma": m % 4 == 0}),
            "64-row": (replace(shipped, tile_m=64, split_k=8, tile_n=min(shipped.tile_n, 128)),
                       {"sfa_tma": m % 4 == 0})}


if __name__ == "__main__":
    log = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    kernels = Kernels()
    check(kernels, [(100, 712, 1024), (192, 2112, 1536)], variants, log)
    print("\n".join(log), flush=True)
    sweep("fp8_mid_m", kernels, [(m, n, k) for n, k in DSV3_NK for m in (96, 128, 192, 256)], variants, log)
