"""Session 31: session 31's dispatch (mma.sync consumers for 1/2-bit weights at <= 8 tokens, unscaled 1/2-bit weights
on large layers on the WGMMA path from 4 tokens, grouped 2-bit from 4 on small layers) against the one before it
(WGMMA consumers; WGMMA_MIN_M / WGMMA_MIN_M_GROUPED as in session 30), through ``quantized_mm`` with the path left
to the dispatch. int1 / int2 per-tensor and with bf16 g128 group scales (bf16 x), M in WO_MS on the four layers of the
issues. Float64-checked, CUDA-graph medians of WO_ROUNDS interleaved rounds, weight copies rotated past L2.
``python benchmarks/experiments/wo_sync_dispatch.py``; writes $OUT/wo_sync_dispatch.json.
"""
import importlib
import json
import os
import statistics

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import config, quantized_mm, wgmma

qmm_module = importlib.import_module("cute_kernels.weight_only.quantized_mm")  # the module (its name is the op's too)

OUT = os.environ.get("OUT", ".")
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,8").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "int1,int2,int1g,int2g").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
L2_MARGIN = 150 << 20
NEW = (dict(config.WGMMA_MIN_M_LARGE), dict(config.WGMMA_MIN_M_GROUPED))


def use(variant):
    """Switch the dispatch between "old" (session 30) and "new"; the op's plan cache is cleared."""
    if variant == "old":
        config.WGMMA_MIN_M_LARGE.clear()
        config.WGMMA_MIN_M_GROUPED[2] = 8
        wgmma.SYNC_MMA = False
    else:
        config.WGMMA_MIN_M_LARGE.update(NEW[0])
        config.WGMMA_MIN_M_GROUPED.update(NEW[1])
        wgmma.SYNC_MMA = None
    qmm_module._plans.clear()


def main():
    rows, bad = [], 0
    for fam in FAMILIES:
        bits, group = int(fam[3]), (128 if fam.endswith("g") else None)
        for n, k in LAYERS:
            copies = max(2, min(8, -(-L2_MARGIN // (n * k * bits // 8))))
            wts = []
            for _ in range(copies):
                w, s, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
                wts.append((w, s, None if gs is None else gs.to(torch.bfloat16)))
            for m in MS:
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                w0 = wts[0]
                gs0 = None if w0[2] is None else w0[2].float().cpu()
                ref = quantized_mm_ref(x.cpu(), w0[0].cpu(), w0[1], bits, gs0)
                times = {"old": [], "new": []}
                for _ in range(ROUNDS):
                    for v in ("old", "new"):
                        use(v)
                        chk = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                        quantized_mm(x, w0[0], w0[1], bits, w0[2], out=chk)
                        err = ((chk.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                        if chk.isnan().any() or err > 8e-3:
                            bad += 1
                            print("CHECK FAILED", fam, n, k, m, v, err, flush=True)
                        times[v].append(graph_time_us(
                            [lambda w=w: quantized_mm(x, w[0], w[1], bits, w[2], out=out) for w in wts])[0])
                use("new")
                row = {"fam": fam, "M": m, "N": n, "K": k, "old": statistics.median(times["old"]),
                       "new": statistics.median(times["new"]), "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_sync_dispatch.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: µs old -> new (ratio); checks failed: {bad}")
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d} {k:6d} " + " ".join(
                f"M={r['M']}: {r['old']:.1f}->{r['new']:.1f} ({r['new'] / r['old']:.2f})" for r in rs))


if __name__ == "__main__":
    main()
