"""Session 7, second sweep (after wo_cta_shape.py): how many waves the decode grid should have.

wo_cta_shape.py found (H200): (a) on grids of several waves (AWQ at OC = 14336, IC = 4096: 896 CTAs of 16 rows,
~3.4 waves at 2 CTAs per SM) putting 2-4 warps side by side along N (same per-warp tile, each warp 2-4x more K
steps, a quarter of the CTAs) is 1.11-1.17x faster at every M, while on one-wave grids it is slower (fewer CTAs than
slots); (b) at 9-16 tokens, fatter warps (more 16-row tiles per warp: each activation fragment feeds more rows) win
on some layers even with half the SMs idle (int4, N = 4096, K = 14336: 64 CTAs of 64 rows 23.4 us vs 29.9 shipped).

This sweep times, for the decode path: warps_n in {1, 2, 4} (warps_k = 8 / warps_n) for the shipped per-warp tiles,
and at M = 16 the row count per warp (nt 1, 2, 4; ring and registers). ABBA order over two rounds (CUDA-graph medians,
weights rotated beyond L2), every variant checked against float64 first (all tokens). Writes wo_waves.json to $OUT.
"""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from wo_probe import SMS, sweep  # noqa: E402
from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
r = dataclasses.replace


def variants(fmt, m, n, k, scaled=False):
    base = config.decode_tile(fmt, m, n, SMS, scaled=scaled)
    v = {"shipped": base}
    for wn in (1, 2, 4):
        if wn != base.warps_n:
            v[f"wn{wn}"] = r(base, warps_n=wn, warps_k=8 // wn)
    if m > 8:
        for nt in (1, 2, 4):
            for st in (0, 3):
                t = r(base, nt=nt, stages=st, swap_registers=False)
                if t != base:
                    v[f"nt{nt} {'ring3' if st else 'regs'}"] = t
    return v


sweep("wo_waves", variants,
      [(14336, 4096), (28672, 4096), (11008, 4096), (8192, 8192), (28672, 8192), (4096, 4096)], (1, 4, 16),
      [(4096, 14336), (14336, 4096), (8192, 8192), (4096, 4096)], (1, 16), OUT)
