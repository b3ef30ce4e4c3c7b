"""Decode tiles at 8 and 16 tokens with the CTA's rows split across 1, 2 or 4 warps side by side (each warp fewer
rows, the CTA's warps on fewer K steps each) against the shipped tile, session 12.

Why: at 16 tokens the 8 warps of a decode CTA each take every 8th K step of the same 64 rows, so no two warps of a
CTA read the same activations, and every CTA reads all of x ([16, K] bf16/fp16: 256 KB at K = 8192) from L2 - as
many bytes as its weights. Warps side by side along N read the same x run at the same K step (one L2 fetch, then
L1 hits) at the cost of more activation load instructions per row.

AWQ (fp16 x, G = 128), 4-bit with group-128 scales (bf16 x) and 4-bit (bf16 x); four layers; M in {8, 16}. Each
variant checked against the float64 reference (a slice) before timing; CUDA-graph medians with the weight sets
rotated through more than L2; variants in ABBA order over two rounds, the better run kept. Appends JSON lines to
$OUT/wo_warps_n16.jsonl and prints a table. ``python benchmarks/experiments/wo_warps_n16.py`` (WN16_SHAPES,
WN16_FORMATS, WN16_MS override the lists; WN16_RING=3 adds ring variants of register tiles).
"""
import dataclasses
import json
import os
import sys

sys.path[:0] = ["benchmarks", "benchmarks/experiments"]
import torch

import decode_cases
from bench_weight_only import graph_time_us

SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (4096, 4096)]  # (N, K)
MS = [8, 16]
FORMATS = ["awq", "4g", "4"]
# Overrides for a follow-up sweep, e.g. WN16_SHAPES="6144x4096,11008x4096" WN16_FORMATS=4g WN16_MS=12,16
if os.environ.get("WN16_SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["WN16_SHAPES"].split(",")]
if os.environ.get("WN16_FORMATS"):
    FORMATS = os.environ["WN16_FORMATS"].split(",")
if os.environ.get("WN16_MS"):
    MS = [int(v) for v in os.environ["WN16_MS"].split(",")]


def variants(tile):
    """The shipped tile and the same rows per CTA split over 1, 2 or 4 warps side by side."""
    out = {"shipped": tile}
    tiles = tile.nt * tile.warps_n
    for wn in (1, 2, 4):
        if tiles % wn == 0 and wn != tile.warps_n and tiles // wn <= 4:  # (8 tiles per warp: no registers)
            out[f"nt{tiles // wn} wn{wn}"] = dataclasses.replace(tile, nt=tiles // wn, warps_n=wn, warps_k=8 // wn)
    ring = int(os.environ.get("WN16_RING", "0"))  # also every split from a cp.async ring of this many stages
    if ring and tile.stages == 0:
        for wn in (1, 2, 4):
            if tiles % wn == 0 and tiles // wn <= 4:
                out[f"nt{tiles // wn} wn{wn} ring{ring}"] = dataclasses.replace(
                    tile, nt=tiles // wn, warps_n=wn, warps_k=8 // wn, stages=ring, x_ahead=False,
                    swap_registers=False).validate()
    return out


def main():
    from cute_kernels import arch
    from cute_kernels.weight_only import config

    out_path = os.path.join(os.environ.get("OUT", "."), "wo_warps_n16.jsonl")
    sms = arch.sm_count(0)
    table = []
    for n, k in SHAPES:
        for fmt in FORMATS:
            scaled = fmt in ("4g", "awq")
            sets = decode_cases.weight_sets(fmt, n, k)
            for m in MS:
                _, tile = config.select_tile(4, m, n, sms, scaled=scaled, awq=fmt == "awq", k=k)
                call, check = decode_cases.call_and_check(fmt, sets, m, k)
                vs = variants(tile)
                if len(vs) == 1:
                    continue
                errs = {name: check(tl) for name, tl in vs.items()}
                times = {name: [] for name in vs}
                order = list(vs) + list(vs)[::-1]
                for name in order:
                    times[name].append(graph_time_us([lambda s=s, tl=vs[name]: call(s, tl) for s in sets])[0])
                best = {name: min(v) for name, v in times.items()}
                row = dict(fmt=fmt, n=n, k=k, m=m, tiles={nm: list(t.key) for nm, t in vs.items()}, us=best,
                           runs=times, errs=errs, device=torch.cuda.get_device_name())
                table.append(row)
                print(f"{fmt:>3} N={n:5d} K={k:5d} M={m:2d} " + "  ".join(f"{nm} {t:6.2f}" for nm, t in best.items())
                      + f"  errs {errs}", flush=True)
                with open(out_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
            del sets
            torch.cuda.empty_cache()
    print("\nfmt     N     K  M  shipped (tile)  variants")
    for r in table:
        u = r["us"]
        t = r["tiles"]["shipped"]
        print(f"{r['fmt']:>3} {r['n']:5d} {r['k']:5d} {r['m']:2d} {u['shipped']:7.2f} (nt{t[0]} wn{t[2]})  "
              + "  ".join(f"{nm} {v:6.2f} ({u['shipped'] / v:.3f})" for nm, v in u.items() if nm != "shipped"))


if __name__ == "__main__":
    main()
