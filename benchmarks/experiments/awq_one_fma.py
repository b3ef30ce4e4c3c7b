"""Session 34: AWQ with one packed fma per pair (``formats.AwqInt4OneFma``: the nibble masked into an fp16 subnormal
u 2^-18, fma(h, s 2^(18 - e), -z s 2^-e)) against the exact format (lop3, then (MAGIC + u) - (MAGIC + z) and a
multiply by s: two packed ops), fp16 x. The session's first run timed a draft (h = 1 + u/16, C = -(16 + z) s: the
same speed, twice the error), replaced before shipping.

Both formats forced on the WGMMA path (``awq_gemm(path="wgmma")`` with ``wgmma.AWQ_ONE_FMA_DTYPES`` switched), and
on the decode path at <= 16 tokens (``awq.DECODE_ONE_FMA_DTYPES``), on the four layers of #5 and two more; every
variant checked against float64 first (ragged problems, NaN-poisoned outputs; the max error of each format is
printed), CUDA-graph medians of interleaved rounds, weight copies rotated past L2 (``wo_crossover``). ``WO_LAYERS``,
``WO_MS``, ``WO_ROUNDS``. ``python benchmarks/experiments/awq_one_fma.py``; writes $OUT/awq_one_fma.json.
"""
import json
import os

import torch

from wo_crossover import call, interleaved_medians, weight_copies

from cute_kernels.formats.awq import awq_quantize
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq as awq_ops, wgmma

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "4096x4096,14336x4096,4096x14336,8192x8192,12288x4096,7168x8192").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,4,8,16,32,64,256,1024").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
FORMATS = {"exact": (), "one_fma": (torch.float16,)}


def use(name):
    """The format both paths run: ``wgmma.AWQ_ONE_FMA_DTYPES`` and ``awq.DECODE_ONE_FMA_DTYPES``."""
    wgmma.AWQ_ONE_FMA_DTYPES = FORMATS[name]
    awq_ops.DECODE_ONE_FMA_DTYPES = FORMATS[name] and (torch.float16,)
    awq_ops._plans.clear()  # the dispatch's plans hold the format they were made with


def check():
    """Both formats against float64 on ragged problems (NaN-poisoned outputs), with scales below 0.25 (e = 0) and
    above (``awq_quantize`` of N(0, 1) weights: e = 2); one_fma also with bf16 x (not shipped: the subnormal fma's
    bf16 behaviour is checked here)."""
    bad, worst = 0, {}
    cases = [(name, torch.float16) for name in FORMATS] + [("one_fma", torch.bfloat16)]
    for name, dtype in cases:
        FORMATS["one_fma"] = (torch.float16, torch.bfloat16) if dtype == torch.bfloat16 else (torch.float16,)
        use(name)
        tol = 1.5e-3 if dtype == torch.float16 else 8e-3
        problems = ((520, 2176, 1, 0.05), (520, 2176, 5, 1.0), (4104, 1024, 16, 0.05), (264, 4096, 40, 1.0),
                    (520, 2176, 300, 0.05))
        for n, k, m, amp in problems:
            for path in ("wgmma", "decode") if m <= 16 and dtype == torch.float16 else ("wgmma",):
                q, z, s = awq_quantize(torch.randn(k, n, device="cuda") * amp, 128, dtype)
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                ref = awq_gemm_ref(x.cpu(), q.cpu(), s.cpu(), z.cpu())
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                call("awq", x, (q, s, z), out, path)
                err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                tag = f"{path}/{name}/{str(dtype)[6:]}"
                worst[tag] = max(worst.get(tag, 0.0), err)
                if out.isnan().any() or not err < tol:
                    bad += 1
                    print("CHECK FAILED", tag, n, k, m, amp, err, flush=True)
    FORMATS["one_fma"] = (torch.float16,)
    print(f"checks: {bad} failed; max error relative to max|ref|: {worst}", flush=True)
    return worst


def main():
    worst = check()
    rows = []
    for n, k in LAYERS:
        wts = weight_copies("awq", n, k)
        for m in MS:
            x = torch.randn(m, k, dtype=torch.float16, device="cuda")
            out = torch.empty(m, n, dtype=torch.float16, device="cuda")
            fns = {}
            for name in FORMATS:
                if m <= 16:
                    fns["decode_" + name] = lambda w, name=name: (use(name), call("awq", x, w, out, "decode"))
                fns[name] = lambda w, name=name: (use(name), call("awq", x, w, out, "wgmma"))
            medians, times = interleaved_medians(fns, wts, ROUNDS)
            row = {"M": m, "N": n, "K": k, **medians, "all": times}
            rows.append(row)
            print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
        del wts
        torch.cuda.empty_cache()
    use("one_fma")
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "awq_one_fma.json"), "w") as f:
        json.dump({"device": dev, "check_max_error": worst, "rows": rows}, f)
    print(f"\n{dev}: AWQ fp16 µs, WGMMA exact / one fma (ratio); decode at <= 16 tokens")
    for n, k in LAYERS:
        rs = [r for r in rows if r["N"] == n and r["K"] == k]
        print(f"{n:6d}x{k:<6d} " + "  ".join(
            f"{r['M']}: {r['exact']:.2f}/{r['one_fma']:.2f} ({r['one_fma'] / r['exact']:.3f})"
            + (f" d {r['decode_exact']:.2f}/{r['decode_one_fma']:.2f}" if "decode_exact" in r else "") for r in rs))


if __name__ == "__main__":
    main()
