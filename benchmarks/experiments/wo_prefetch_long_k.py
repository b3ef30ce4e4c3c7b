"""Session 32: the decode path's L2 prefetch (``TileShape.l2_prefetch_mb``) on layers deeper than wide (N < K), which
session 10's rule (``config.decode_tile``: N >= K only) leaves without it. Session 10 measured it on one such layer on
an H200 (4096 x 14336: AWQ within 0.5% at <= 8 tokens, int4 / int1 / int8 slower); this session's awq_decode_m4.py
found AWQ 0.964x / 0.987x the time with it at 1 / 4 tokens on 4096 x 14336 (H100). Here: AWQ, int4 g128 and int4
at 1-8 tokens on six N < K layers, the shipped decode tile against the same tile with the prefetch toggled, forced
through the ops' ``tile=``. Checked against float64 first; CUDA-graph medians of interleaved rounds, weight copies
rotated past L2. Writes $OUT/wo_prefetch_long_k.json.
"""
import json
import os
from dataclasses import replace

import torch

from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import awq_gemm, config, quantized_mm
from wo_crossover import family, interleaved_medians, weight_copies

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "4096x14336,4096x11008,5120x13824,3584x18944,2048x8192,1536x8960").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,8").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "awq,int4g,int4").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "5"))


def run(fam, x, wt, out, tile):
    if fam == "awq":
        return awq_gemm(x, *wt, out=out, tile=tile)
    return quantized_mm(x, wt[0], wt[1], family(fam)[2], wt[2], out=out, tile=tile)


def main():
    bad, rows = 0, []
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        for n, k in LAYERS:
            wts = weight_copies(fam, n, k)
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                wt = wts[0]
                ref = (awq_gemm_ref(x.cpu(), *(t.cpu() for t in wt)) if fam == "awq" else
                       quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits,
                                        None if wt[2] is None else wt[2].float().cpu()))
                ship = config.decode_tile("awq" if fam == "awq" else bits, m, n, 132, scaled=group is not None, k=k)
                tiles = {"ship": ship, "toggled": replace(ship, l2_prefetch_mb=0 if ship.l2_prefetch_mb else 4)}
                for name, tile in tiles.items():
                    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                    run(fam, x, wt, out, tile)
                    err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    if out.isnan().any() or err > (1.5e-3 if dtype == torch.float16 else 8e-3):
                        bad += 1
                        print(f"CHECK FAILED {fam} {n}x{k} M={m} {name}: {err:.2e}", flush=True)
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                fns = {v: (lambda w, t=tile: run(fam, x, w, out, t)) for v, tile in tiles.items()}
                medians, times = interleaved_medians(fns, wts, ROUNDS)
                row = {"fam": fam, "M": m, "N": n, "K": k, "ship_prefetch": ship.l2_prefetch_mb, **medians,
                       "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_prefetch_long_k.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: µs without -> with the L2 prefetch (with / without); checks failed: {bad}")
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            cells = []
            for r in rs:
                off, on = (r["toggled"], r["ship"]) if r["ship_prefetch"] else (r["ship"], r["toggled"])
                cells.append(f"M={r['M']}: {off:5.2f}->{on:5.2f} ({on / off:.3f})")
            print(f"{fam:5s} {n:5d}x{k:<6d} " + "  ".join(cells))


if __name__ == "__main__":
    main()
