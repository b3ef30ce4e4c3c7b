"""Session 5: 128x128 FP8 tiles with a_scale staged by TMA and 3 epilogue buffers (so the 6 A/B stages stay;
``fp8_blockwise.SFA_TMA_EPI_STAGES = 3``) against the shipped kernel (consumers load a_scale, 4 epilogue buffers),
on the shapes whose config is 128 wide. Variant order alternates per repeat set by listing each twice (A B B A).
Checked against float64, timed by ``fp8_sweep.sweep``. Writes fp8_sfa_epi.json."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import SMS, run  # noqa: E402

from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config  # noqa: E402


def variants(m, n, k):
    cfg = select_config(m, n, k, 1, SMS)
    shipped = (cfg, {"sfa_tma": False})
    staged = (cfg, {"sfa_tma": True, "SFA_TMA_EPI_STAGES": 3})
    return {"shipped A": shipped, "tma+epi3 B": staged, "tma+epi3 B'": staged, "shipped A'": shipped}


if __name__ == "__main__":
    run("fp8_sfa_epi", [(336, 712, 1152), (1000, 1000, 2048)], (1024, 4096), variants)
