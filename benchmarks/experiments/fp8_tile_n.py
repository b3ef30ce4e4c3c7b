"""Session 5: wider FP8 tiles (tile_n 160 / 192, several SFB segments per tile) against the 128-wide ones.

Per M bucket, the table's config and 160 / 192-wide siblings (a 1x2 cluster too for large M), checked against
float64 on ragged problems, then timed per shape by ``fp8_sweep.sweep``. Writes fp8_tile_n.json to $OUT.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import run  # noqa: E402

from cute_kernels.configs import TileConfig  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import SM90_FP8_BLOCKWISE_TABLE  # noqa: E402


def T(tm, tn, cm=1, cn=1, sk=1):
    return TileConfig(tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn, split_k=sk)


def variants(m, n, k):
    table = next(cfg for max_m, cfg in SM90_FP8_BLOCKWISE_TABLE if m <= max_m)  # the 128-wide row
    if m <= 64:
        cands = {"64x160": T(64, 160, sk=8), "64x192": T(64, 192, sk=8)}
    elif m <= 256:
        cands = {"128x160": T(128, 160, sk=4), "128x192": T(128, 192, sk=4)}
    else:
        cands = {"128x160c2": T(128, 160, 2), "128x192c2": T(128, 192, 2), "128x192c1x2": T(128, 192, 1, 2)}
    return {label: (cfg, {}) for label, cfg in {"table": table, **cands}.items()}


if __name__ == "__main__":
    run("fp8_tile_n", [(4, 584, 1024), (67, 2112, 1024), (203, 584, 1024), (1003, 2112, 1024)],
        (64, 128, 1024, 4096), variants)
