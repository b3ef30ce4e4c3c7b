"""Session 37: fp8_scaled_mm (FP8 per-token / per-channel, int8's SM90 kernel with an fp32 accumulator) beside
torch._scaled_mm's rowwise FP8 GEMM (cuBLAS) with and without fast accumulation, bf16 out, no bias (torch's rowwise
path with a bias is a separate question). Operands rotated past L2 where they fit; CUDA-graph medians of 3
interleaved rounds (do_bench for 8192^3); the relative error of each against float64 on a corner. One line per shape."""
import json, os, statistics, sys

import torch

from cute_kernels import fp8_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.reference import int8_scaled_mm_ref

E4M3 = torch.float8_e4m3fn
rows = []


def operands(m, n, k, copies):
    sets = []
    for _ in range(copies):
        a = (torch.randn(m, k, device="cuda") * 2).to(E4M3)
        w = (torch.randn(n, k, device="cuda") * 2).to(E4M3)
        sets.append((a, w.t(), torch.rand(m, 1, device="cuda") * 0.02 + 1e-3,
                     torch.rand(1, n, device="cuda") * 0.02 + 1e-3))
    return sets


def rel_err(out, a, b, sa, sb):
    r, c = min(64, out.shape[0]), min(512, out.shape[1])
    ref = int8_scaled_mm_ref(a[:r].cpu(), b[:, :c].cpu(), sa[:r, 0].cpu(), sb[0, :c].cpu())
    return ((out[:r, :c].double().cpu() - ref).norm() / ref.norm()).item()


def case(m, n, k):
    copies = max(2, min(16, -(-200 * 2**20 // (n * k + m * k))))
    sets = operands(m, n, k, copies)
    ours = [lambda s=s: fp8_scaled_mm(s[0], s[1], s[2].view(-1), s[3].view(-1)) for s in sets]
    cublas = [lambda s=s: torch._scaled_mm(s[0], s[1], s[2], s[3], out_dtype=torch.bfloat16) for s in sets]
    fast = [lambda s=s: torch._scaled_mm(s[0], s[1], s[2], s[3], out_dtype=torch.bfloat16, use_fast_accum=True)
            for s in sets]
    a, b, sa, sb = sets[0]
    errs = {"ours": rel_err(ours[0](), a, b, sa, sb)}
    variants = {"ours": ours}
    for name, calls in (("cublas", cublas), ("cublas_fast", fast)):
        try:
            errs[name] = rel_err(calls[0](), a, b, sa, sb)
            variants[name] = calls
        except RuntimeError as exc:
            print(f"  {name} failed at {m}x{n}x{k}: {str(exc)[:120]}")
    t = {kk: [] for kk in variants}
    for _ in range(3):
        for kk, calls in variants.items():
            t[kk].append(graph_time_us(calls)[0])
    med = {kk: statistics.median(v) for kk, v in t.items()}
    row = {"M": m, "N": n, "K": k, **{f"{kk}_us": v for kk, v in med.items()},
           **{f"{kk}_err": v for kk, v in errs.items()}}
    row["tflops_ours"] = 2 * m * n * k / med["ours"] / 1e6
    rows.append(row)
    vs = "  ".join(f"{kk} {med[kk]:8.2f} ({med[kk] / med['ours']:.2f}x)" for kk in med if kk != "ours")
    print(f"M={m:5d} N={n:5d} K={k:5d} ours {med['ours']:8.2f} us {row['tflops_ours']:7.0f} TFLOPS  {vs}  "
          f"err {' / '.join(f'{v:.1e}' for v in errs.values())}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    case(8192, 8192, 8192)
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16, 128, 1024, 4096):
            case(m, n, k)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fp8_rowwise37.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
