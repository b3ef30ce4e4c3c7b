"""Session 46: AWQ at 6-16 tokens - the decode tiles (fragment order since session 45) against the WGMMA path.

The dispatch sends AWQ to the WGMMA path from ``config.wgmma_min_m`` tokens (8 on layers of < 2^25 weights, 6 on
larger ones, 12 at bf16 ...), thresholds measured before the repack was stored in fragment order. Per layer and token
count, timed side by side (CUDA graphs of >= 16 calls over rotating weight sets beyond L2, medians of interleaved
rounds, as bench_awq.py), each checked first against a float64 reference on NaN-poisoned outputs:

  auto      awq_gemm as dispatched
  decode    awq_gemm(path="decode"): the dispatch's decode tile (tile_for_format applied)
  wgmma     awq_gemm(path="wgmma")
  m8mt      (above 8 tokens, with --m8mt) the 8-token decode tile with ceil(M / 8) token tiles per warp (register
            pipeline)

    python benchmarks/experiments/awq_decode_wgmma46.py OUT_JSON [--layers 4096x4096,...] [--ms 6,8,12,16]
        [--dtype fp16|bf16] [--m8mt]
"""

import argparse
import statistics
from dataclasses import replace

import torch

from awq_ablate44 import _reference64, add_layer_args, torch_dtype, weight_sets, write_rows
from cute_kernels import arch
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq_gemm, awq_repack, config

CALLS = 16


def main():
    ap = argparse.ArgumentParser()
    add_layer_args(ap, "4096x4096,4096x14336,14336x4096,8192x8192", "6,8,10,12,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--m8mt", action="store_true", help="also the m8mt variant above 8 tokens")
    args = ap.parse_args()
    dtype = torch_dtype(args.dtype)
    sms = arch.sm_count(0)
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        sets = weight_sets(oc, ic, dtype, args.sets_mb)
        kw0 = awq_repack.kernel_weights(*sets[0], 128)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            fmt = "awq_fma" if dtype == torch.float16 else "awq"
            t8 = config.tile_for_format(fmt, config.awq_repack_tile(config.decode_tile("awq", 8, oc, sms, k=ic)))
            variants = {"auto": {}, "decode": {"path": "decode"}, "wgmma": {"path": "wgmma"}}
            if m > 8 and args.m8mt:
                variants["m8mt"] = {"tile": replace(t8, mt=-(-m // 8))}
            ref64 = _reference64(x, kw0)
            err = {}
            for v, kwargs in variants.items():
                out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                awq_gemm(x, *sets[0], out=out, **kwargs)
                e = ((out.double() - ref64).abs().max() / ref64.abs().max()).item()
                err[v] = e if e < 1e-2 and not out.isnan().any() else f"WRONG {e}"
            t = {v: [] for v in variants}
            for _ in range(args.rounds):
                for v, kwargs in variants.items():
                    o = torch.empty(m, oc, device="cuda", dtype=dtype)
                    t[v].append(graph_time_us([lambda s=s, kw=kwargs: awq_gemm(x, *s, out=o, **kw) for s in sets],
                                              min_calls=CALLS)[0])
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(oc=oc, ic=ic, m=m, dtype=args.dtype, err_vs_float64=err, rounds=t, median=med,
                             decode_tile=str(config.select_tile(4, m, oc, sms, "decode", scaled=True, awq=True,
                                                                k=ic)[1])))
            best = min(med, key=med.get)
            print(f"{oc}x{ic} M={m} {args.dtype} " + "  ".join(f"{k} {v:.2f}" for k, v in med.items())
                  + f"  best {best}  err " + " ".join(f"{k}:{v:.1e}" if isinstance(v, float) else f"{k}:{v}"
                                                       for k, v in err.items()), flush=True)
        del sets, kw0
        awq_repack.clear_cache()
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
