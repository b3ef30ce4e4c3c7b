"""Decode tiles with at most 2 CTAs per SM (TileShape.max_ctas_per_sm) against the shipped launch, session 12.

Why: the decode grids are sized for 2 CTAs per SM (config.DECODE_CTAS_PER_SM), but a tile of <= 85 registers (and
a small enough ring) lets the block scheduler put 3 or 4 CTAs on an SM; with a grid of ~2 CTAs per SM some SMs then
carry more of the weight stream than others. Found while testing AWQ parameter words (awq_param_words.py): an AWQ
decode tile that went from 96 to 80 registers got 15-25% slower at M <= 8, and capping it at 2 CTAs per SM took
most of that back.

The shipped decode tiles that fit more than 2 CTAs per SM (``CANDIDATES``: found by compiling every decode tile of
quantized_mm (1/2/4/8-bit, bf16 x; 4-bit also with group-128 scales) and awq_gemm (fp16 x, G = 128) on four layers
at M in {1, 4, 8, 16} for sm_90a and reading the registers from the cubin - 38 of 96; no AWQ tile is among them):
shipped vs the same tile capped at 2 CTAs per SM. Each
variant is checked against the float64 reference (a slice) before timing; CUDA-graph medians with the weight sets
rotated through more than L2; the two variants alternate, two rounds (ABBA). Appends JSON lines to
$OUT/wo_cta_cap.jsonl and prints a table. ``python benchmarks/experiments/wo_cta_cap.py [FORMATS]`` (e.g. 4g,2,1).
"""
import dataclasses
import json
import os
import sys

sys.path[:0] = ["benchmarks", "benchmarks/experiments"]
import torch

import decode_cases
from bench_weight_only import graph_time_us

# (format, N, K, M, registers, CTAs that fit on an SM): "4g" = 4-bit with group-128 scales
CANDIDATES = [["8", 4096, 4096, 1, 48, 5], ["8", 14336, 4096, 1, 64, 4], ["8", 4096, 14336, 1, 48, 5],
              ["8", 8192, 8192, 1, 64, 4], ["8", 4096, 4096, 4, 48, 5], ["8", 14336, 4096, 4, 64, 4],
              ["8", 4096, 14336, 4, 48, 5], ["8", 8192, 8192, 4, 64, 4], ["8", 4096, 4096, 8, 48, 5],
              ["8", 14336, 4096, 8, 64, 4], ["8", 4096, 14336, 8, 48, 5], ["8", 8192, 8192, 8, 64, 4],
              ["8", 4096, 4096, 16, 80, 3], ["8", 4096, 14336, 16, 80, 3], ["4", 4096, 4096, 1, 64, 4],
              ["4", 4096, 14336, 1, 63, 4], ["4", 4096, 4096, 4, 64, 4], ["4", 4096, 14336, 4, 63, 4],
              ["4", 4096, 4096, 8, 64, 4], ["4", 4096, 14336, 8, 63, 4], ["4g", 4096, 4096, 1, 64, 4],
              ["4g", 4096, 14336, 1, 62, 4], ["4g", 4096, 4096, 4, 64, 4], ["4g", 4096, 14336, 4, 62, 4],
              ["4g", 4096, 4096, 8, 64, 4], ["4g", 4096, 14336, 8, 62, 4], ["2", 4096, 4096, 1, 64, 4],
              ["2", 4096, 14336, 1, 62, 4], ["2", 4096, 4096, 4, 64, 4], ["2", 4096, 14336, 4, 62, 4],
              ["2", 4096, 4096, 8, 64, 4], ["2", 4096, 14336, 8, 62, 4], ["1", 4096, 4096, 1, 64, 4],
              ["1", 4096, 14336, 1, 64, 4], ["1", 4096, 4096, 4, 64, 4], ["1", 4096, 14336, 4, 64, 4],
              ["1", 4096, 4096, 8, 64, 4], ["1", 4096, 14336, 8, 64, 4]]


def main():
    from cute_kernels import arch
    from cute_kernels.weight_only import config

    out_path = os.path.join(os.environ.get("OUT", "."), "wo_cta_cap.jsonl")
    sms = arch.sm_count(0)
    table = []
    groups = {}
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else None  # e.g. "4g,2,1"
    for fmt, n, k, m, _, _ in CANDIDATES:
        if only and fmt not in only:
            continue
        groups.setdefault((fmt, n, k), []).append(m)
    for (fmt, n, k), ms in groups.items():
        bits, scaled = decode_cases.bits_of(fmt), fmt in ("4g", "awq")
        sets = decode_cases.weight_sets(fmt, n, k)
        for m in ms:
            _, tile = config.select_tile(bits, m, n, sms, scaled=scaled, awq=fmt == "awq", k=k)
            # "shipped" = the session-11 launch (uncapped); since session 12 main caps some of these tiles itself
            tile = dataclasses.replace(tile, max_ctas_per_sm=0)
            capped = dataclasses.replace(tile, max_ctas_per_sm=2)
            call, check = decode_cases.call_and_check(fmt, sets, m, k)
            errs = {"shipped": check(tile), "cap2": check(capped)}
            times = {"shipped": [], "cap2": []}
            for name in ("shipped", "cap2", "cap2", "shipped"):
                tl = tile if name == "shipped" else capped
                times[name].append(graph_time_us([lambda s=s, tl=tl: call(s, tl) for s in sets])[0])
            row = dict(fmt=str(fmt), n=n, k=k, m=m, tile=list(tile.key), shipped_us=min(times["shipped"]),
                       cap2_us=min(times["cap2"]), runs=times, errs=errs, device=torch.cuda.get_device_name())
            row["gain"] = row["shipped_us"] / row["cap2_us"]
            table.append(row)
            print(f"{str(fmt):>4} N={n:5d} K={k:5d} M={m:2d} stages={tile.stages} shipped {row['shipped_us']:7.2f}"
                  f"  cap2 {row['cap2_us']:7.2f}  x{row['gain']:.3f}  err {errs}", flush=True)
            with open(out_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        del sets
        torch.cuda.empty_cache()
    print("\nfmt     N     K  M  shipped    cap2   gain")
    for r in table:
        print(f"{r['fmt']:>4} {r['n']:5d} {r['k']:5d} {r['m']:2d} {r['shipped_us']:8.2f} {r['cap2_us']:7.2f} "
              f"{r['gain']:6.3f}")


if __name__ == "__main__":
    main()
