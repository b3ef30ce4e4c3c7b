"""Session 20: AWQ at 1 and 4 tokens (the decode path) - the shipped tile against the decode tile's pipeline knobs,
on the H100, where #5's M = 1 / 4 cells sit at 2.9-3.0x of fp16 on three layers.

Variants of the shipped tile (``config.decode_tile``; scales promoted or folded as ``use_promoted_scales`` ships):
  * swap: the register pipeline unrolled by two with the buffers swapping roles (two K steps in flight, not one;
    session 5 measured it 5-29% slower for these x-ahead plans on an H200);
  * ring3 / ring4: the cp.async shared-memory ring of 3 / 4 K steps instead of the register double buffer;
  * pf0 / pf8 / pf16: the L2 prefetch of the leading bytes of every row before the PDL wait, off / 8 MB / 16 MB
    (shipped: 4 MB where N >= K, else off);
  * nt2: two 16-row tiles per warp (the int4 plan) with the shipped pipeline.
Every variant is checked against the float64 reference before it is timed; CUDA-graph medians with the weights
rotated through more than L2; three rounds, variants interleaved within each (the harness of awq_decode_promote.py).
Writes awq_decode_sweep.json.
"""
import sys
from dataclasses import replace

sys.path.insert(0, "benchmarks")
import torch

sys.path.insert(0, "benchmarks/experiments")
import awq_decode_promote
from cute_kernels.weight_only import awq_gemm, config
from cute_kernels.weight_only.compile import compile_weight_only
from cute_kernels.weight_only.quantized_mm import use_promoted_scales

MS = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,4").split(",")]


def variants(m, oc, ic, sms, kws, sets, x):
    tile = config.decode_tile("awq", m, oc, sms, scaled=True, k=ic)
    out = {}

    def kernel(t):
        promote = use_promoted_scales("awq", True, 128, torch.float16, t)
        fn = compile_weight_only("awq", torch.float16, torch.float16, torch.float16, t, promote_scales=promote)
        res = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
        return [lambda k=k: fn(x, k.w, res, 1.0, k.scales, k.zeros, 128) for k in kws], res

    out["shipped"] = ([lambda s=s: awq_gemm(x, *s) for s in sets], None)
    if tile.stages == 0:
        out["swap"] = kernel(replace(tile, swap_registers=True))
        out["ring3"] = kernel(replace(tile, stages=3, swap_registers=False))
        out["ring4"] = kernel(replace(tile, stages=4, swap_registers=False))
    for mb in (0, 8, 16):
        if mb != tile.l2_prefetch_mb:
            out[f"pf{mb}"] = kernel(replace(tile, l2_prefetch_mb=mb))
    if tile.nt == 1:
        out["nt2"] = kernel(replace(tile, nt=2))
    return tile, out


def main():
    awq_decode_promote.run(variants, "awq_decode_sweep.json", MS)


if __name__ == "__main__":
    main()
