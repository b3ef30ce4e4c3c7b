"""Session 7: activations staged in the cp.async ring with the weights (``TileShape.x_ring``) against the shipped
decode plans.

Why: in the M = 16 plans each step loads its x runs (16 tokens x 128 K values = 4 KB per warp, twice the step's
weight bytes) from L2 at the top of the step that uses them (SASS: 8 LDG.128 right before the MMAs), with only
16 warps per SM to hide the latency; ``x_ahead`` (registers) was measured slower at M = 16 (register pressure).
``x_ring`` puts them in a second thread-private ring, ``stages - 1`` steps ahead, and loads the group parameters one
step ahead in registers.

For every problem: the shipped tile and x_ring with 2, 3 and 4 stages (those that fit a CTA's shared memory), ABBA
order over two rounds (CUDA-graph medians, weights rotated beyond L2), every variant checked against float64 first.
AWQ (fp16 x, group 128) on the four layers of issue #5 and the signed formats (bf16 x) on two layers.
Writes wo_x_ring.json to $OUT; prints one line per problem.

Dropped (slower nearly everywhere, docs/weight_only.md session 7): the kernel variant is not in the tree. It was
written against commit 1350df0; to rerun: ``git checkout 1350df0 -- cute_kernels tests && git apply
benchmarks/experiments/patches/wo_x_ring.patch``, run this script, ``git checkout HEAD -- cute_kernels tests``.
The recorded run covered the AWQ rows and int4 at 8192^2; the other signed rows stopped at a bug in the script
(a bf16 reference scale), fixed after the run, when the script also moved onto wo_probe.py.
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
    v = {"shipped": config.decode_tile(fmt, m, n, SMS, scaled=scaled)}
    for st in (2, 3, 4):
        v[f"xr{st}"] = config.decode_tile(fmt, m, n, SMS, scaled=scaled, ring=True, x_ring=True, stages=st,
                                          x_ahead=False)
    return v


sweep("wo_x_ring", variants, [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)], (1, 8, 16),
      [(8192, 8192), (4096, 14336)], (1, 8, 16), OUT)
