"""Session 5: the two consumer warpgroups of 128-row FP8 tiles taking the tensor cores in turns (named barriers,
``Fp8BlockwiseGemmSm90.mainloop``) against both issuing freely, on each shape's config and its 128-wide sibling.
Switch: ``fp8_blockwise.ALTERNATE_WARPGROUPS``. Checked against float64 (odd and even K-tile counts, split-K),
timed by ``fp8_sweep.sweep``. Writes fp8_alternate.json to $OUT.
"""

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import SMS, run  # noqa: E402

from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config  # noqa: E402


def variants(m, n, k):
    sel = select_config(m, n, k, 1, SMS)
    out = {}
    for cfg in dict.fromkeys([sel, replace(sel, tile_n=128)]):
        for alternate in (False, True):
            out[f"{cfg.describe()} {'alt' if alternate else 'free'}"] = (cfg, {"ALTERNATE_WARPGROUPS": alternate})
    return out


if __name__ == "__main__":
    run("fp8_alternate", [(77, 2112, 1152), (200, 584, 1024), (333, 712, 1152), (1000, 1000, 2048)],
        (128, 1024, 4096), variants)
