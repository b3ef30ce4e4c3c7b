"""Session 7: CTA shapes of the decode path. The shipped decode tiles put all 8 warps of a CTA on the same rows, each
taking every 8th K step (warps_k = 8); no two warps of a CTA read the same activations, so at M = 16 every warp
streams its own 4 KB of x per 2 KB weight step from L2. Warps side by side along N (warps_n > 1) read the same x
runs at the same time (L1 hits for all but one) and split K fewer ways.

For every problem: the shipped tile and CTA shapes with warps_n in {2, 4} (same per-warp tile and pipelines), and
64-row warps; ABBA order over two rounds (CUDA-graph medians, weights rotated beyond L2), every variant checked
against float64 first (all tokens). Writes wo_cta_shape.json to $OUT; one line per problem.
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
    if m > 8:
        v["wn2 wk4"] = r(base, warps_n=2, warps_k=4)
        v["wn2 wk4 nt1"] = r(base, warps_n=2, warps_k=4, nt=1)
        v["wn4 wk2 nt1"] = r(base, warps_n=4, warps_k=2, nt=1)
        v["wn2 wk4 regs"] = r(base, warps_n=2, warps_k=4, stages=0, swap_registers=False)
        v["nt4 ring3"] = r(base, nt=4, stages=3)
    else:
        v["wn2 wk4"] = r(base, warps_n=2, warps_k=4)
        v["wn4 wk2"] = r(base, warps_n=4, warps_k=2)
        v["wn2 wk4 ring3"] = r(base, warps_n=2, warps_k=4, stages=3, swap_registers=False)
        if base.nt == 1:
            v["wn2 wk4 nt2"] = r(base, warps_n=2, warps_k=4, nt=2)
    return v


sweep("wo_cta_shape", variants, [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)], (1, 8, 16),
      [(8192, 8192), (4096, 14336)], (1, 16), OUT)
