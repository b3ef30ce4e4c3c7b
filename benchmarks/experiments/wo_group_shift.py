"""Session 23: the decode kernel's group index by a shift (``WeightOnlyGemm.group_shift``, power-of-two group sizes)
instead of an integer division by the runtime group size - 17-25 fewer SASS instructions per K step (AWQ 8192^2
M = 1: 198 -> 181; int4 g128: 321 -> 302).

AWQ (fp16 x, group 128) at ``argv[1]`` tokens (default 1,4) on the four layers of bench_awq, the shipped decode tile
compiled both ways; harness: awq_decode_promote.run (float64 check first, three interleaved rounds of CUDA-graph
medians, weights rotated beyond L2, fp16 matmul alongside). Writes wo_group_shift.json to $OUT. Not shipped (the shift was 1.2-1.3x slower on the two multi-wave layers, likely because it took
their tiles from 94 to 80 registers and so three CTAs per SM; docs/weight_only.md, session 23): apply
patches/wo_group_shift.patch first.
"""
import sys
from dataclasses import replace

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/experiments")
import torch  # noqa: E402

import awq_decode_promote  # noqa: E402
from cute_kernels.weight_only import config  # noqa: E402
from cute_kernels.weight_only.compile import compile_weight_only  # noqa: E402
from cute_kernels.weight_only.quantized_mm import use_promoted_scales  # noqa: E402

MS = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,4").split(",")]


def variants(m, oc, ic, sms, kws, sets, x):
    tile = config.decode_tile("awq", m, oc, sms, scaled=True, k=ic)
    promote = use_promoted_scales("awq", True, 128, torch.float16, tile)
    out = {}
    # "shift cap2" (not run yet): the shift with the tile held to two CTAs per SM (TileShape.max_ctas_per_sm), the
    # occupancy the grid is sized for - the 80-register build otherwise fits three.
    for name, shift, t in (("division", False, tile), ("shift", True, tile),
                           ("shift cap2", True, replace(tile, max_ctas_per_sm=2))):
        fn = compile_weight_only("awq", torch.float16, torch.float16, torch.float16, t, promote_scales=promote,
                                 group_shift=shift)
        res = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
        out[name] = ([lambda k=k, fn=fn, res=res: fn(x, k.w, res, 1.0, k.scales, k.zeros, 128) for k in kws], res)
    return tile, out


if __name__ == "__main__":
    awq_decode_promote.run(variants, "wo_group_shift.json", MS)
