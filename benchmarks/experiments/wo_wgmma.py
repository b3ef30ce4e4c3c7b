"""Session 14: the weight-only WGMMA path (sm90/weight_only_wgmma.py) - correctness, then speed against the current
dispatch and the fp16/bf16 dense GEMM, for the token counts between the decode path and the dense path.

Correctness: every case against float64 (reference.quantized_mm_ref / awq_gemm_ref), fresh random inputs, outputs
poisoned with NaN; error relative to max|ref|. Timing: CUDA-graph medians (cute_kernels.bench.graph_time_us) of
calls rotated over weight copies that together exceed L2 (the weights come from HBM, as in a model); per problem the
WGMMA path, the current default of the op (``path=None``) and torch.matmul on the dense weight in x's dtype.
``python benchmarks/experiments/wo_wgmma.py [check|time|all]`` prints a table; writes $OUT/wo_wgmma.json.
"""
import json
import os
import sys

import torch

from cute_kernels import arch as _arch
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.awq import awq_dequantize_float, awq_quantize
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import awq_gemm, awq_repack, quantized_mm, wgmma

OUT = os.environ.get("OUT", ".")
TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3}
SMS = None


def rel_err(out, ref):
    return ((out.double().cpu() - ref.cpu()).abs().max() / ref.abs().max()).item()


def signed_case(bits, m, n, k, dtype, group, seed):
    torch.manual_seed(seed)
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    if gs is not None:
        gs = gs.to(dtype)
    return x, w, scale, gs


def awq_case(m, oc, ic, group, dtype, seed):
    torch.manual_seed(seed)
    x = torch.randn(m, ic, dtype=dtype, device="cuda")
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda") * 0.05, group, dtype)
    return x, qweight, scales, qzeros


def check():
    rows = []
    for bits, m, n, k, dtype, group in (
            (4, 40, 200, 1088, torch.bfloat16, None), (4, 40, 200, 1088, torch.float16, None),
            (2, 40, 200, 1088, torch.bfloat16, None), (1, 40, 200, 1088, torch.float16, None),
            (4, 300, 136, 1152, torch.bfloat16, 128), (4, 17, 4096, 4096, torch.float16, 32),
            (2, 256, 264, 512, torch.bfloat16, 64), (1, 129, 520, 2048, torch.bfloat16, 128),
            (4, 1000, 1024, 2048, torch.bfloat16, 128)):
        x, w, scale, gs = signed_case(bits, m, n, k, dtype, group, seed=bits * 7 + m)
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        cfg = wgmma.select_config(m, n, k, SMS)
        wgmma.quantized_mm_wgmma(x, w, out, scale, bits, gs, group or wgmma.NO_GROUP, SMS)
        ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.float().cpu())
        err = rel_err(out, ref)
        ok = not out.isnan().any().item() and err < TOL[dtype]
        rows.append({"case": f"int{bits} M={m} N={n} K={k} {str(dtype)[6:]} g={group}", "cfg": cfg.describe(),
                     "err": err, "ok": ok})
        print(json.dumps(rows[-1]), flush=True)
    for m, oc, ic, group, dtype in ((40, 200, 1024, 128, torch.float16), (257, 1032, 2048, 64, torch.bfloat16),
                                    (64, 4096, 4096, 128, torch.float16), (33, 520, 4096, 4096, torch.float16),
                                    (16 + 1, 8192, 8192, 128, torch.float16)):
        x, qweight, scales, qzeros = awq_case(m, oc, ic, group, dtype, seed=m + oc)
        kw = awq_repack.kernel_weights(qweight, scales, qzeros, group)
        out = torch.full((m, oc), float("nan"), dtype=dtype, device="cuda")
        cfg = wgmma.select_config(m, oc, ic, SMS)
        wgmma.awq_gemm_wgmma(x, kw, out, SMS)
        err = rel_err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu()))
        ok = not out.isnan().any().item() and err < TOL[dtype]
        rows.append({"case": f"awq M={m} OC={oc} IC={ic} G={group} {str(dtype)[6:]}", "cfg": cfg.describe(),
                     "err": err, "ok": ok})
        print(json.dumps(rows[-1]), flush=True)
    return rows


L2_MARGIN = 150 << 20


def time_family(fam, m, n, k):
    dtype = torch.float16 if fam == "awq" else torch.bfloat16
    wbytes = n * k // 2
    copies = max(1, min(8, -(-L2_MARGIN // wbytes)))
    dense_copies = max(1, min(8, -(-L2_MARGIN // (n * k * 2))))
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    outs = [torch.empty(m, n, dtype=dtype, device="cuda") for _ in range(2)]
    ours, current, dense = [], [], []
    if fam == "awq":
        for c in range(copies):
            qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, dtype)
            kw = awq_repack.kernel_weights(qweight, scales, qzeros, 128)
            ours.append(lambda kw=kw, o=outs[c % 2]: wgmma.awq_gemm_wgmma(x, kw, o, SMS))
            current.append(lambda q=qweight, s=scales, z=qzeros, o=outs[c % 2]: awq_gemm(x, q, s, z, out=o))
            if c < dense_copies:
                wd = awq_dequantize_float(qweight, scales, qzeros).to(dtype).t().contiguous()  # [N, K]
                dense.append(lambda wd=wd, o=outs[c % 2]: torch.matmul(x, wd.t(), out=o))
    else:
        for c in range(copies):
            w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), 4, 128)
            gs = gs.to(dtype)
            ours.append(lambda w=w, s=scale, gs=gs, o=outs[c % 2]:
                        wgmma.quantized_mm_wgmma(x, w, o, s, 4, gs, 128, SMS))
            current.append(lambda w=w, s=scale, gs=gs, o=outs[c % 2]: quantized_mm(x, w, s, 4, gs, out=o))
            if c < dense_copies:
                wd = (unpack_weights(w, 4, k).float() * gs.float().repeat_interleave(128, 1)).to(dtype)
                dense.append(lambda wd=wd, o=outs[c % 2]: torch.matmul(x, wd.t(), out=o))
    res = {}
    for name, calls in (("wgmma", ours), ("current", current), ("dense", dense)):
        us, how = graph_time_us(calls)
        res[name] = us
    return res


def time_all():
    rows = []
    for fam in ("awq", "int4g128"):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)):
            for m in (17, 32, 64, 128, 256, 512, 1024):
                r = time_family(fam, m, n, k)
                row = {"family": fam, "M": m, "N": n, "K": k, **r, "cfg": wgmma.select_config(m, n, k, SMS).describe(),
                       "device": torch.cuda.get_device_name()}
                rows.append(row)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
    print(f"\n{'family':9s} {'M':>5s} {'N':>6s} {'K':>6s} {'wgmma':>8s} {'current':>8s} {'dense':>8s} "
          f"{'vs cur':>7s} {'vs dense':>8s}  cfg")
    for r in rows:
        print(f"{r['family']:9s} {r['M']:5d} {r['N']:6d} {r['K']:6d} {r['wgmma']:8.1f} {r['current']:8.1f} "
              f"{r['dense']:8.1f} {r['current'] / r['wgmma']:7.2f} {r['dense'] / r['wgmma']:8.2f}  {r['cfg']}")
    return rows


def main():
    global SMS
    SMS = _arch.sm_count(0)
    what = (sys.argv[1:] or ["all"])[0]
    result = {}
    if what in ("check", "all"):
        result["check"] = check()
        bad = [r for r in result["check"] if not r["ok"]]
        print(f"check: {len(result['check']) - len(bad)} ok, {len(bad)} failed", flush=True)
        if bad:
            what = "check"  # no timings of a wrong kernel
    if what in ("time", "all"):
        result["time"] = time_all()
    with open(os.path.join(OUT, "wo_wgmma.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
