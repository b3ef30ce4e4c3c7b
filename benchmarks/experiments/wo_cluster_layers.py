"""Session 32: decode path or WGMMA path for grouped 4-bit weights (AWQ, int4 g128) and unscaled int4 at 1-6 tokens,
on the layers whose WGMMA plan reduces its two K slices inside a 2-CTA cluster (N of 56-66 128-row tiles:
7168 / 8192 rows) against layers whose plan does not (4096 x 14336: four slices through the workspace; 14336 x 4096:
unsplit). Sessions 28 and 31 saw the WGMMA path 2-5% ahead of the decode path on 8192^2 at 2-4 tokens and 5-7% behind
on 4096 x 14336. Both paths forced through the ops (``path=``; no module switches, so the ops' plan caches are safe),
checked against float64 first (``wo_crossover.check``), CUDA-graph medians of interleaved rounds, weight copies
rotated past L2. ``python benchmarks/experiments/wo_cluster_layers.py``; writes $OUT/wo_cluster_layers.json.
"""
import json
import os

import torch

import wo_crossover
from wo_crossover import call, family, interleaved_medians, weight_copies

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "8192x8192,8192x28672,8192x4096,7168x8192,8192x14336,4096x14336,14336x4096").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,6").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "awq,int4g,int4").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
PATHS = ("decode", "wgmma")


def main():
    wo_crossover.FAMILIES = FAMILIES
    wo_crossover.check()
    rows = []
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        for n, k in LAYERS:
            wts = weight_copies(fam, n, k)
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                fns = {p: (lambda w, p=p: call(fam, x, w, out, p)) for p in PATHS}
                medians, times = interleaved_medians(fns, wts, ROUNDS)
                row = {"fam": fam, "M": m, "N": n, "K": k, **medians, "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_cluster_layers.json"), "w") as f:
        json.dump({"device": dev, "rows": rows}, f)
    print(f"\n{dev}: µs decode / wgmma (wgmma / decode)")
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d}x{k:<6d} " + "  ".join(
                f"M={r['M']}: {r['decode']:5.1f}/{r['wgmma']:5.1f} ({r['wgmma'] / r['decode']:.2f})" for r in rs))


if __name__ == "__main__":
    main()
