"""Session 7: the two consumer warpgroups of 128-row FP8 tiles handing the tensor cores over at *issue* time
(``fp8_blockwise.ALTERNATE_WARPGROUPS = "issue"``) against both issuing freely (shipped).

Why: per K-tile each warpgroup issues its WGMMAs, waits for them, then promotes (acc += tmp * scales) with its
tensor-core work done; if both issue together, both promote together and the tensor pipe idles (ncu, session 5:
tensor pipe 69% busy at 8192^3). Session 5's turn-taking passed the turn only after the WGMMAs *completed* (slower:
the pipe drained at every hand-over). Here warpgroup 1 issues right after warpgroup 0 has issued, so its WGMMAs queue
behind warpgroup 0's and run while warpgroup 0 promotes; the pipe never drains. Checked against float64 (odd and even
K-tile counts, split-K, both granularities), timed by ``fp8_sweep.sweep``. Writes fp8_handover.json to $OUT.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fp8_sweep import SMS, run  # noqa: E402

from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config  # noqa: E402


def variants(m, n, k):
    cfg = select_config(m, n, k, 1, SMS)
    return {f"{cfg.describe()} {mode or 'free'}": (cfg, {"ALTERNATE_WARPGROUPS": mode, "sfa_tma": True})
            for mode in (False, "issue")}


if __name__ == "__main__":
    run("fp8_handover", [(336, 712, 1152), (1000, 1000, 2048), (256, 2112, 1024)], (1024, 4096), variants)
