"""Session 32: the dispatch of grouped 4-bit weights (AWQ, int4 g128) at 1-7 tokens before and after session 32's
rule (``config.WGMMA_CLUSTER_LONG_K``: the WGMMA path from one token on long-K layers whose plan reduces in clusters;
``WGMMA_MIN_M_GROUPED_LARGE[4]``: 8 -> 6), through the ops (``awq_gemm`` / ``quantized_mm`` with no path), on the
layers ``wo_cluster_layers.py`` fitted it to and on four it did not see (7168 x 16384, 7168 x 18432, 8192 x 11008,
28672 x 8192). The ops' plan caches are cleared at every switch (they key on the call, not on the rule). Checked
against float64 first under both rules; CUDA-graph medians of interleaved rounds, weight copies rotated past L2.
``python benchmarks/experiments/wo_rule32.py``; writes $OUT/wo_rule32.json.
"""
import importlib
import json
import os

import torch

from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import config
from wo_crossover import call, family, make, rule_rows

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "8192x8192,8192x28672,7168x8192,8192x14336,4096x14336,14336x4096,8192x4096,"
                 "7168x16384,7168x18432,8192x11008,28672x8192").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,4,6,7").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "awq,int4g").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
RULES = {"old": (None, 8), "new": (config.WGMMA_CLUSTER_LONG_K, config.WGMMA_MIN_M_GROUPED_LARGE[4])}


def use(rule):
    config.WGMMA_CLUSTER_LONG_K, config.WGMMA_MIN_M_GROUPED_LARGE[4] = RULES[rule]
    for mod in ("awq", "quantized_mm"):
        importlib.import_module(f"cute_kernels.weight_only.{mod}")._plans.clear()


def path_of(fam, m, n, k):
    bits = family(fam)[2]
    return config.select_tile(bits, m, n, 132, scaled=True, awq=fam == "awq", dense=fam != "awq", k=k,
                              wgmma=True)[0]


def check():
    bad = 0
    for fam in FAMILIES:
        dtype, _, bits = family(fam)
        n, k = 8192, 8192  # a layer the new rule moves at one token
        wt = make(fam, n, k)
        for m in (1, 6):
            x = torch.randn(m, k, dtype=dtype, device="cuda")
            ref = (awq_gemm_ref(x.cpu(), *(t.cpu() for t in wt)) if fam == "awq" else
                   quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits, wt[2].float().cpu()))
            for rule in RULES:
                use(rule)
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                call(fam, x, wt, out, None)
                err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                ok = not out.isnan().any() and err <= (1.5e-3 if dtype == torch.float16 else 8e-3)
                bad += not ok
                print(f"check {fam} M={m} {rule} ({path_of(fam, m, n, k)}): {err:.2e} {'ok' if ok else 'FAILED'}",
                      flush=True)
    print(f"checks: {bad} failed", flush=True)
    return bad


def main():
    bad = check()
    rows = rule_rows(FAMILIES, LAYERS, MS, RULES, use, path_of, ROUNDS)
    use("new")
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_rule32.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: µs old -> new rule (new / old), * = the rules pick different paths; checks failed: {bad}")
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d}x{k:<6d} " + "  ".join(
                f"M={r['M']}: {r['old']:5.1f}->{r['new']:5.1f} ({r['new'] / r['old']:.2f}"
                f"{'*' if r['paths']['old'] != r['paths']['new'] else ''})" for r in rs))


if __name__ == "__main__":
    main()
