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
rotated through more than L2; three rounds, variants interleaved within each. Writes awq_decode_sweep.json.
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, "benchmarks")
import torch

import bench_awq
from bench_weight_only import graph_time_us, n_sets
from cute_kernels import arch as _arch
from cute_kernels.weight_only import awq_dequantize, awq_gemm, awq_repack, config
from cute_kernels.weight_only.compile import compile_weight_only
from cute_kernels.weight_only.quantized_mm import use_promoted_scales

OUT = os.environ.get("OUT", ".")
MS = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,4").split(",")]
ROUNDS = 3


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
    sms = _arch.sm_count(0)
    rows = []
    for oc, ic in bench_awq.SHAPES:
        awq_bytes = ic * oc // 2 + (ic // 128) * oc * 2.5
        sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(n_sets(int(awq_bytes), 16))]
        kws = [awq_repack.kernel_weights(q, s, z, 128) for q, s, z in sets]
        dense = [awq_dequantize(*s) for s in sets[:2]]
        for m in MS:
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            tile, vs = variants(m, oc, ic, sms, kws, sets, x)
            row = dict(n=oc, k=ic, m=m, tile=str(tile), err={}, us={})
            for name, (fns, res) in vs.items():
                r = fns[0]() if res is None else (fns[0](), res)[1]
                row["err"][name] = bench_awq._check(r, x, *sets[0])
            fp16 = [lambda w=w: torch.matmul(x, w) for w in dense]
            for _ in range(ROUNDS):
                row["us"].setdefault("fp16", []).append(graph_time_us(fp16)[0])
                for name, (fns, _res) in vs.items():
                    row["us"].setdefault(name, []).append(graph_time_us(fns)[0])
            rows.append(row)
            best = {k: min(v) for k, v in row["us"].items()}
            print(f"{oc}x{ic} M={m}: " + " ".join(f"{k}={v:.2f}" for k, v in best.items()), flush=True)
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
                      open(os.path.join(OUT, "awq_decode_sweep.json"), "w"))
        del sets, kws, dense
        awq_repack.clear_cache()


if __name__ == "__main__":
    main()
