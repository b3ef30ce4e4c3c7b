"""Session 5: FP8 mainloop with two temporaries per warpgroup (K-tile k promoted while k + 1's WGMMAs run,
``Fp8BlockwiseGemmSm90.k_pair``) against one temporary (``k_tile``: WGMMA, wait, promote), on the 128-wide version
of each shape's config (and the chosen wider one, one temporary). Switch: ``fp8_blockwise.PAIR_TILE_MS``.
Checked against float64 (odd and even K-tile counts), timed by ``fp8_sweep.sweep``. Writes fp8_pair.json to $OUT.
"""

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import SMS, run  # noqa: E402

from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config  # noqa: E402

ONE, TWO = {"PAIR_TILE_MS": ()}, {"PAIR_TILE_MS": (64, 128)}


def variants(m, n, k):
    sel = select_config(m, n, k, 1, SMS)
    c128 = replace(sel, tile_n=128)
    out = {f"{c128.describe()} 1tmp": (c128, ONE), f"{c128.describe()} 2tmp": (c128, TWO)}
    if sel.tile_n != 128:
        out[f"{sel.describe()} 1tmp"] = (sel, ONE)
    return out


if __name__ == "__main__":
    run("fp8_pair", [(1, 584, 1152), (77, 2112, 1024), (333, 712, 1152), (1000, 1000, 2048)],
        (64, 128, 1024, 4096), variants)
