"""Session 23: AWQ at 1-8 tokens on the multi-wave layers - two 16-row tiles per warp (the int4 plan's x reuse and
bytes in flight) with the same rows per CTA, against the shipped one-tile warps.

On an H200 (session 23, wo_l2_ahead.py) AWQ at M = 1 took 14.7 µs at 8192^2 against 11.7 for unscaled int4, 25%
more time for 4% more bytes; 14336 x 4096: 14.2 vs 11.3. Those two layers run AWQ on one 16-row tile per warp with
2 / 4 warps side by side along N (session 7), int4 on two tiles per warp: each warp keeps 2 KB of weights in flight
instead of 1 KB and each x fragment feeds two tiles. Session 19's AWQ "nt2" variant doubled the rows per CTA (half
the CTAs: < 1 per SM) and lost; AWQ's x-ahead register plan with two tiles needs ~156 registers (one CTA per SM).
So here the rows per CTA stay the shipped ones (warps side by side halved) and the weight stream comes from a
cp.async ring (112-118 registers: two CTAs per SM) or registers without x ahead.

Variants (group scales promoted onto the fp32 partial sums or folded into the decoded weights): shipped; nt2 ring3 /
ring4 / reg, each "p" (promoted) and "f" (folded). Layers: 8192^2 and 14336 x 4096 (the N = 4096 layers have one
warp column: two tiles per warp would halve their CTAs). Harness: awq_decode_promote.run (float64 check first, three
interleaved rounds of CUDA-graph medians, weights rotated beyond L2). Tokens: argv[1] (default 1,4,8).
"""
import sys
from dataclasses import replace

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/experiments")
import torch  # noqa: E402

import awq_decode_promote  # noqa: E402
import bench_awq  # noqa: E402
from cute_kernels.weight_only import awq_gemm, config  # noqa: E402
from cute_kernels.weight_only.compile import compile_weight_only  # noqa: E402

MS = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,4,8").split(",")]
bench_awq.SHAPES = [(8192, 8192), (14336, 4096)]


def variants(m, oc, ic, sms, kws, sets, x):
    tile = config.decode_tile("awq", m, oc, sms, scaled=True, k=ic)
    out = {"shipped": ([lambda s=s: awq_gemm(x, *s) for s in sets], None)}

    def kernel(t, promote):
        fn = compile_weight_only("awq", torch.float16, torch.float16, torch.float16, t, promote_scales=promote)
        res = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
        return [lambda k=k: fn(x, k.w, res, 1.0, k.scales, k.zeros, 128) for k in kws], res

    if tile.warps_n >= 2 and tile.nt == 1:
        wn = tile.warps_n // 2
        nt2 = replace(tile, nt=2, warps_n=wn, warps_k=8 // wn, swap_registers=False)
        for name, t in (("ring3", replace(nt2, stages=3, x_ahead=False)),
                        ("ring4", replace(nt2, stages=4, x_ahead=False)),
                        ("reg", replace(nt2, stages=0, x_ahead=False))):
            for promote in (True, False):
                out[f"nt2 {name} {'p' if promote else 'f'}"] = kernel(t, promote)
    return tile, out


if __name__ == "__main__":
    awq_decode_promote.run(variants, "awq_nt2.json", MS)
