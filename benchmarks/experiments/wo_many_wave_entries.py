"""Session 33: where the WGMMA path, with session 32's tail-split plans (``wgmma.SPLIT_MAX_WAVES``), overtakes the decode
path on many-wave layers (``wgmma.many_waves``: 12288-24576 rows), which since session 32 take the small layers'
entries (``config.WGMMA_MANY_WAVES_SMALL_ENTRIES``). Both paths forced through the ops (``quantized_mm`` /
``awq_gemm`` with ``path=``), every format at WO_MS tokens on WO_LAYERS; the dispatch's own pick is recorded beside.
Checked against float64 first (a ragged many-wave layer, both paths, NaN-poisoned outputs); CUDA-graph medians of
interleaved rounds, weight copies rotated past L2. Writes $OUT/wo_many_wave_entries.json.
WO_CONFIRM=1: instead, the dispatch (no path) under session 32's rule (the small layers' entries) and the new one
(``config.WGMMA_MIN_M_MANY_WAVES`` and friends), interleaved, on layers the rule was not fitted to (WO_LAYERS to
change them); writes $OUT/wo_many_wave_confirm.json. Session 33's first confirm run measured a first draft of the rule
(4-bit weights with group scales and AWQ from one token, unscaled 4-bit from 8), which the held-out layers refuted.
"""
import importlib
import json
import os

import torch

from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import config
from wo_crossover import call, family, interleaved_medians, make, rule_rows, shipped_path, weight_copies

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "12288x4096,24576x1536,22016x4096,20480x4096,18432x7168").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,6,8,12").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "int1,int2,int4,int1g,int2g,int4g,awq").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
PATHS = ("decode", "wgmma")
CONFIRM = os.environ.get("WO_CONFIRM") == "1"
NEW = (config.WGMMA_MIN_M_MANY_WAVES, config.WGMMA_MIN_M_GROUPED_MANY_WAVES, config.WGMMA_MIN_M_AWQ_MANY_WAVES,
       config.WGMMA_MIN_M_AWQ_FULL_WAVE)
RULES = {"old": (None, None, None, None), "new": NEW}
if os.environ.get("WO_AWQ_FULL_WAVE"):  # the AWQ full-wave candidate (config.WGMMA_MIN_M_AWQ_FULL_WAVE) against NEW
    RULES = {"old": NEW[:3] + (None,), "new": NEW[:3] + (int(os.environ["WO_AWQ_FULL_WAVE"]),)}
HELD_OUT = "18944x3584,12288x5120,24576x2048,17920x5120,21504x3072,12288x8192"
if CONFIRM:
    LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get("WO_LAYERS", HELD_OUT).split(","))
    MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,6,8").split(","))


def use(rule):
    (config.WGMMA_MIN_M_MANY_WAVES, config.WGMMA_MIN_M_GROUPED_MANY_WAVES, config.WGMMA_MIN_M_AWQ_MANY_WAVES,
     config.WGMMA_MIN_M_AWQ_FULL_WAVE) = RULES[rule]
    for mod in ("awq", "quantized_mm"):
        importlib.import_module(f"cute_kernels.weight_only.{mod}")._plans.clear()


def check():
    bad = 0
    n, k = 12288 + 72, 4096  # many-wave, with a ragged last row tile
    for fam in FAMILIES:
        dtype, _, bits = family(fam)
        wt = make(fam, n, k)
        for m in (1, 7):
            x = torch.randn(m, k, dtype=dtype, device="cuda")
            ref = (awq_gemm_ref(x.cpu(), *(t.cpu() for t in wt)) if fam == "awq" else
                   quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits, None if wt[2] is None else wt[2].float().cpu()))
            for path in PATHS:
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                call(fam, x, wt, out, path)
                err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                ok = not out.isnan().any() and err <= (1.5e-3 if dtype == torch.float16 else 8e-3)
                bad += not ok
                if not ok:
                    print(f"CHECK FAILED {fam} M={m} {path}: {err:.2e}", flush=True)
    print(f"checks: {bad} failed", flush=True)
    return bad


def confirm(bad):
    rows = rule_rows(FAMILIES, LAYERS, MS, RULES, use, shipped_path, ROUNDS)
    use("new")
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_many_wave_confirm.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: the dispatch, new / old rule time, * = the rules pick different paths; checks failed: {bad}")
    print(f"{'fam':5s} {'layer':>12s} " + " ".join(f"M={m:<4d}" for m in MS))
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d}x{k:<5d} " + " ".join(
                f"{r['new'] / r['old']:.2f}{'*' if r['paths']['old'] != r['paths']['new'] else ' '} " for r in rs))


def main():
    bad = check()
    if CONFIRM:
        return confirm(bad)
    rows = []
    for fam in FAMILIES:
        dtype = family(fam)[0]
        for n, k in LAYERS:
            wts = weight_copies(fam, n, k)
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                med, allt = interleaved_medians(
                    {p: (lambda w, p=p: call(fam, x, w, out, p)) for p in PATHS}, wts, ROUNDS)
                row = {"fam": fam, "M": m, "N": n, "K": k, "shipped": shipped_path(fam, m, n, k), **med, "all": allt}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_many_wave_entries.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: WGMMA / decode time (< 1: WGMMA faster), * = the shipped dispatch's path is WGMMA; "
          f"checks failed: {bad}")
    print(f"{'fam':5s} {'layer':>12s} " + " ".join(f"M={m:<4d}" for m in MS))
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d}x{k:<5d} " + " ".join(
                f"{r['wgmma'] / r['decode']:.2f}{'*' if r['shipped'] == 'wgmma' else ' '} " for r in rs))


if __name__ == "__main__":
    main()
