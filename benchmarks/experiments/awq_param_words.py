"""A/B of AWQ's parameter words (session 12): scale + zero point of a (row, group) in one 32-bit word (scale bits
low, zero point high; [N, groups], row-major like the weights), one load per row and K step, against the shipped
operands (a [N, groups] scale tensor and a [N, groups] u8 zero-point tensor: two loads per row and step).

Dropped (docs/weight_only.md, session 12); the variant is benchmarks/experiments/patches/awq_param_words.patch (on
main at ede6187, with TileShape.max_ctas_per_sm). Data: experiments/data/session12_h100/awq_param_words_*.jsonl (runs
1-2 measured earlier layouts of the words: group-major with a thread's two rows adjacent, then tile-major).
Run once per code version, each in its own process (the two versions are two checkouts on PYTHONPATH), in ABBA order:
    python benchmarks/experiments/awq_param_words.py LABEL [--cap]
``--cap`` also times the new code's register-pipeline decode tiles with at most 2 CTAs per SM
(TileShape.max_ctas_per_sm): the parameter words cut the M <= 8 tile from 96 to 80 registers, which lets a third
CTA onto an SM.
Every variant is checked against the float64 reference (a slice) before timing; CUDA-graph medians with the weight
sets rotated through more than L2 (bench_awq machinery); fp16 torch.matmul on the dequantized weight alongside.
Appends one JSON line per row to $OUT/awq_param_words.jsonl.
"""
import json
import os
import sys

sys.path.insert(0, "benchmarks")
import torch

import bench_awq
from bench_weight_only import graph_time_us, n_sets

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)]  # (OC, IC)
MS = [1, 4, 8, 16, 32, 64]
CAP_MS = [1, 4, 8, 16]


def main():
    label = sys.argv[1]
    cap = "--cap" in sys.argv
    import dataclasses

    from cute_kernels import arch
    from cute_kernels.weight_only import awq_dequantize, awq_gemm, config

    out_path = os.path.join(os.environ.get("OUT", "."), "awq_param_words.jsonl")
    dtype = torch.float16
    for oc, ic in SHAPES:
        awq_bytes = ic * oc // 2 + (ic // 128) * oc * 2.5
        sets = [bench_awq._awq_set(ic, oc, dtype) for _ in range(n_sets(int(awq_bytes), 16))]
        dense = [awq_dequantize(*s) for s in sets[:2]]
        for m in MS:
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            t_fp16, _ = graph_time_us([lambda w=w: torch.matmul(x, w) for w in dense])
            variants = [(label, None)]
            tile = config.select_tile(4, m, oc, arch.sm_count(0), scaled=True, awq=True, k=ic)[1]
            if cap and m in CAP_MS and tile.stages == 0:
                variants.append((label + "+cap2", dataclasses.replace(tile, max_ctas_per_sm=2)))
            for name, tl in variants:
                err = bench_awq._check(awq_gemm(x, *sets[0], tile=tl), x, *sets[0])
                t, how = graph_time_us([lambda s=s: awq_gemm(x, *s, tile=tl) for s in sets])
                row = dict(variant=name, oc=oc, ic=ic, m=m, us=t, fp16_us=t_fp16, speedup=t_fp16 / t, err=err,
                           timing=how, device=torch.cuda.get_device_name())
                print(f"{name:16s} OC={oc:5d} IC={ic:5d} M={m:3d} {t:7.2f} us  fp16 {t_fp16:6.2f}  x{t_fp16 / t:.2f}"
                      f"  err {err:.1e}", flush=True)
                with open(out_path, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
