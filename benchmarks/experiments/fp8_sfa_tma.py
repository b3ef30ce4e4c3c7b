"""Session 5: per-token a_scale staged by the producer with TMA (one tile_m-float copy per stage on the stage's full
barrier, ``Fp8BlockwiseGemmSm90(sfa_tma=True)``) against the consumers loading it from global memory two K-tiles
ahead, on each shape's config. Checked against float64, timed by ``fp8_sweep.sweep``. Writes fp8_sfa_tma.json."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import SMS, run  # noqa: E402

from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config  # noqa: E402


def variants(m, n, k):
    cfg = select_config(m, n, k, 1, SMS)
    return {f"{cfg.describe()} {'tma' if on else 'ldg'}": (cfg, {"sfa_tma": on}) for on in (False, True)}


if __name__ == "__main__":
    run("fp8_sfa_tma", [(4, 584, 1152), (64, 2112, 1024), (336, 712, 1152), (1000, 1000, 2048)],
        (64, 128, 1024, 4096), variants)
