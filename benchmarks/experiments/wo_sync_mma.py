"""Session 31: the WGMMA path's consumers on ``mma.sync`` instead of register-sourced WGMMA at 1-16 tokens
(``WeightOnlyWgmmaSm90.mainloop_sync``, forced with ``wgmma.SYNC_MMA``), against the same path on WGMMA and the decode
path: the decode path through ``quantized_mm(path="decode")``, the WGMMA path through ``awq_gemm(path="wgmma")`` (a
forced path builds a fresh plan per call) and ``wgmma.quantized_mm_wgmma`` (quantized_mm keeps one plan per signature,
path included, which would pin the first variant compiled), so the module switches pick the compiled variant.

Families: int1 / int2 / int4 (per-tensor scale, bf16 x), int1g / int2g (bf16 g128 group scales) and AWQ g128 (fp16
x); M in WO_MS (default 1, 4, 8, 12, 16) on the four layers of the issues. The diagnostic builds of the same session
(consumers without decode / MMAs / x loads, the blob's TMA in byte boxes: ``session31/diagnostics.patch`` in the data
archive) are not in the tree. Every (family, variant) is checked against float64 first (ragged problems, a split
8192^2 one, NaN-poisoned outputs). CUDA-graph medians, weight copies rotated past L2, 3 interleaved rounds.
``python benchmarks/experiments/wo_sync_mma.py`` prints a table; writes $OUT/wo_sync_mma.json.
"""
import json
import os
import statistics

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import awq_gemm, quantized_mm, wgmma
from wo_crossover import family, make  # the same families and weights as the crossover runs

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in
               os.environ.get("WO_LAYERS", "4096x4096,14336x4096,4096x14336,8192x8192").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,4,8,12,16").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "int1,int2,int4,awq").split(","))
VARIANTS = tuple(os.environ.get("WO_VARIANTS", "decode,wgmma,sync").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
L2_MARGIN = 150 << 20


def call(fam, x, wt, out, variant):
    wgmma.SYNC_MMA = variant == "sync"  # forced on or off (not the rule)
    path = "decode" if variant == "decode" else "wgmma"
    try:
        if fam == "awq":
            return awq_gemm(x, *wt, out=out, path=path)  # a forced path builds a fresh plan on every call
        if path == "wgmma":  # quantized_mm keeps its plan per signature, path included: bypass it
            group = family(fam)[1] or wgmma.NO_GROUP
            return wgmma.quantized_mm_wgmma(x, wt[0], out, wt[1], family(fam)[2], wt[2], group, 132)
        return quantized_mm(x, wt[0], wt[1], family(fam)[2], wt[2], out=out, path=path)
    finally:
        wgmma.SYNC_MMA = None


def check():
    bad = 0
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        for (n, k), ms in (((520, 2176), (1, 5, 8, 13, 16, 40)), ((8192, 8192), (3, 16)), ((4096, 14336), (7,))):
            wt = make(fam, n, k)
            for m in ms:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                if fam == "awq":
                    ref = awq_gemm_ref(x.cpu(), wt[0].cpu(), wt[1].cpu(), wt[2].cpu())
                else:
                    ref = quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits,
                                           None if wt[2] is None else wt[2].float().cpu())
                for variant in [v for v in VARIANTS if m <= 16 or v != "decode"]:
                    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                    call(fam, x, wt, out, variant)
                    err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    ok = not out.isnan().any() and err <= (1.5e-3 if dtype == torch.float16 else 8e-3)
                    bad += not ok
                    if not ok or variant == "sync":
                        print(f"check {fam} {n}x{k} M={m} {variant}: rel err {err:.2e} {'ok' if ok else 'FAILED'}",
                              flush=True)
    print(f"checks: {bad} failed", flush=True)
    return bad


def main():
    bad = check() if os.environ.get("WO_CHECK", "1") == "1" else 0
    rows = []
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        for n, k in LAYERS:
            copies = max(2, min(8, -(-L2_MARGIN // (n * k * bits // 8))))
            wts = [make(fam, n, k) for _ in range(copies)]
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                times = {v: [] for v in VARIANTS}
                for _ in range(ROUNDS):
                    for v in VARIANTS:
                        times[v].append(graph_time_us([lambda w=w, v=v: call(fam, x, w, out, v) for w in wts])[0])
                row = {"fam": fam, "M": m, "N": n, "K": k, **{v: statistics.median(t) for v, t in times.items()},
                       "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_sync_mma.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: µs, " + " / ".join(VARIANTS))
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d} {k:6d} " + " ".join(
                f"M={r['M']}: " + "/".join(f"{r[v]:.1f}" for v in VARIANTS) for r in rs))


if __name__ == "__main__":
    main()
