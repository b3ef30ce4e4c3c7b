"""Session 34: signed int4 with group scales (g128) on the WGMMA path with one packed fma per pair
(``formats.SignedInt4OneFma``: the same values bit for bit) against the magic-number decode, both forced through
``quantized_mm(path="wgmma")`` with ``wgmma.INT4_ONE_FMA_MAX_M`` switched. Checked first: both formats' outputs equal
bit for bit, and within the tolerance of the float64 reference (NaN-poisoned outputs). CUDA-graph medians of
interleaved rounds, weight copies rotated past L2 (``wo_crossover``). ``WO_LAYERS``, ``WO_MS``, ``WO_ROUNDS``,
``WO_DTYPE`` (bf16 / fp16). ``python benchmarks/experiments/int4_one_fma.py``; writes $OUT/int4_one_fma.json.
"""
import importlib
import json
import os

import torch

from wo_crossover import interleaved_medians, weight_copies

from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import quantized_mm, wgmma

qmm_ops = importlib.import_module("cute_kernels.weight_only.quantized_mm")  # the module (the package exports the op)

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "4096x4096,14336x4096,4096x14336,8192x8192,12288x4096").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,4,16,64,256").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("WO_DTYPE", "bf16")]
FORMATS = {"exact": None, "one_fma": 512}


def use(name):
    wgmma.INT4_ONE_FMA_MAX_M = FORMATS[name]
    qmm_ops._plans.clear()  # the dispatch's plans hold the format they were made with


def run(x, wt, out):
    return quantized_mm(x, wt[0], wt[1], 4, wt[2], out=out, path="wgmma")


def check():
    bad = 0
    for n, k, m in ((520, 2176, 1), (4104, 1024, 16), (264, 4096, 40), (520, 2176, 300)):
        w, s, gs = quantize_weights(torch.randn(n, k, device="cuda"), 4, 128)
        gs = gs.to(DTYPE)
        x = torch.randn(m, k, dtype=DTYPE, device="cuda")
        ref = quantized_mm_ref(x.cpu(), w.cpu(), s, 4, gs.float().cpu())
        outs = {}
        for name in FORMATS:
            use(name)
            outs[name] = torch.full((m, n), float("nan"), dtype=DTYPE, device="cuda")
            run(x, (w, s, gs), outs[name])
            err = ((outs[name].double().cpu() - ref).abs().max() / ref.abs().max()).item()
            if outs[name].isnan().any() or not err < (8e-3 if DTYPE == torch.bfloat16 else 1.5e-3):
                bad += 1
                print("CHECK FAILED", name, n, k, m, err, flush=True)
        if not torch.equal(outs["exact"], outs["one_fma"]):
            bad += 1
            print("NOT BIT-EQUAL", n, k, m, (outs["exact"].float() - outs["one_fma"].float()).abs().max().item())
    print(f"checks: {bad} failed", flush=True)


def main():
    check()
    rows = []
    for n, k in LAYERS:
        wts = []
        for wt in weight_copies("int4g", n, k):
            wts.append((wt[0], wt[1], wt[2].to(DTYPE)))
        for m in MS:
            x = torch.randn(m, k, dtype=DTYPE, device="cuda")
            out = torch.empty(m, n, dtype=DTYPE, device="cuda")
            fns = {name: (lambda w, name=name: (use(name), run(x, w, out))) for name in FORMATS}
            medians, times = interleaved_medians(fns, wts, ROUNDS)
            row = {"M": m, "N": n, "K": k, **medians, "all": times}
            rows.append(row)
            print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
        del wts
        torch.cuda.empty_cache()
    use("one_fma")
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "int4_one_fma.json"), "w") as f:
        json.dump({"device": dev, "dtype": str(DTYPE), "rows": rows}, f)
    print(f"\n{dev}: int4 g128 {DTYPE}, WGMMA, µs exact / one fma (ratio)")
    for n, k in LAYERS:
        rs = [r for r in rows if r["N"] == n and r["K"] == k]
        print(f"{n:6d}x{k:<6d} " + "  ".join(
            f"{r['M']}: {r['exact']:.2f}/{r['one_fma']:.2f} ({r['one_fma'] / r['exact']:.3f})" for r in rs))


if __name__ == "__main__":
    main()
