"""Session 38: fp8_scaled_mm(use_fast_accum=False) - promoted sums, fp8_blockwise_scaled_mm's kernel with unit block
scales and the per-token / per-channel scales in its epilogue - beside our fast path and torch._scaled_mm rowwise
(cuBLAS) promoted and fast-accum. bf16 out, no bias; operands rotated past L2; CUDA-graph medians of 3 interleaved
rounds (8192^3 included); relative error against float64 on a corner. One line per shape."""
import json, os, statistics

import torch

from cute_kernels import fp8_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.reference import int8_scaled_mm_ref

E4M3 = torch.float8_e4m3fn
rows = []


def rel_err(out, a, b, sa, sb):
    r, c = min(64, out.shape[0]), min(512, out.shape[1])
    ref = int8_scaled_mm_ref(a[:r].cpu(), b[:, :c].cpu(), sa[:r].cpu(), sb[:c].cpu())
    return ((out[:r, :c].double().cpu() - ref).norm() / ref.norm()).item()


def case(m, n, k):
    copies = max(2, min(16, -(-200 * 2**20 // (n * k + m * k))))
    sets = [((torch.randn(m, k, device="cuda") * 2).to(E4M3), (torch.randn(n, k, device="cuda") * 2).to(E4M3).t(),
             torch.rand(m, device="cuda") * 0.02 + 1e-3, torch.rand(n, device="cuda") * 0.02 + 1e-3)
            for _ in range(copies)]
    variants = {
        "promoted": [lambda s=s: fp8_scaled_mm(*s, use_fast_accum=False) for s in sets],
        "fast": [lambda s=s: fp8_scaled_mm(*s) for s in sets],
        "cublas_promoted": [lambda s=s: torch._scaled_mm(s[0], s[1], s[2].view(-1, 1), s[3].view(1, -1),
                                                         out_dtype=torch.bfloat16) for s in sets],
        "cublas_fast": [lambda s=s: torch._scaled_mm(s[0], s[1], s[2].view(-1, 1), s[3].view(1, -1),
                                                     out_dtype=torch.bfloat16, use_fast_accum=True) for s in sets],
    }
    errs = {}
    for name in list(variants):
        try:
            errs[name] = rel_err(variants[name][0](), *sets[0])
        except RuntimeError as exc:
            print(f"  {name} failed at {m}x{n}x{k}: {str(exc)[:100]}")
            del variants[name]
    t = {kk: [] for kk in variants}
    for _ in range(3):
        for kk, calls in variants.items():
            t[kk].append(graph_time_us(calls)[0])
    med = {kk: statistics.median(v) for kk, v in t.items()}
    row = {"M": m, "N": n, "K": k, **{f"{kk}_us": v for kk, v in med.items()},
           **{f"{kk}_err": v for kk, v in errs.items()}, "tflops_promoted": 2 * m * n * k / med["promoted"] / 1e6}
    rows.append(row)
    vs = "  ".join(f"{kk} {med[kk]:8.2f} ({med[kk] / med['promoted']:.2f}x)" for kk in med if kk != "promoted")
    print(f"M={m:5d} N={n:5d} K={k:5d} promoted {med['promoted']:8.2f} us {row['tflops_promoted']:6.0f} TFLOPS  "
          f"{vs}  err {' / '.join(f'{kk} {v:.1e}' for kk, v in errs.items())}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    case(8192, 8192, 8192)
    for n, k in ((4096, 4096), (4096, 14336), (14336, 4096)):
        for m in (1, 16, 128, 1024, 4096):
            case(m, n, k)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fp8_promoted38.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
