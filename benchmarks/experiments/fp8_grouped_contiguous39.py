"""Session 39: fp8_blockwise_grouped_mm_contiguous (MoE experts in DeepGEMM's contiguous layout, the prefill one)
beside what one would run without it: a loop of our fp8_blockwise_scaled_mm over each expert's padded run, a loop of
per-expert torch._scaled_mm blockwise calls (cuBLAS) on the same runs, and - the bound a grouped kernel can at best
approach - one fp8_blockwise_scaled_mm over all M rows with a single expert's weight (the same FLOPs and tiles, no
grouping). The loops are given the runs on the host (a sync a real prefill step would pay, left out of the timing).
DeepSeek-V3 expert shapes (gate+up N = 4096, K = 7168; down N = 7168, K = 2048), token counts drawn 0.5-1.5x the
mean (DeepGEMM's benchmark recipe), some experts empty. CUDA-graph medians of 3 interleaved rounds (the experts'
weights exceed L2 by themselves); the relative error of the contiguous op's rows against float64 (every expert's
rows). TFLOPS count the padded rows (what every variant computes)."""
import json
import os
import statistics

import torch

from cute_kernels import fp8_blockwise_grouped_mm_contiguous, fp8_blockwise_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

ALIGN = 128
rows = []


def case(g, mean, n, k, empty=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    counts = [max(1, int(mean * (0.5 + torch.rand(1, generator=gen).item()))) for _ in range(g)]
    for e in range(empty):
        counts[e * 2 + 1] = 0
    runs = [-(-c // ALIGN) * ALIGN for c in counts]
    ids = torch.cat([torch.tensor([e] * c + [-1] * (r - c), dtype=torch.int32) for e, (c, r) in
                     enumerate(zip(counts, runs))]).cuda()
    m = ids.numel()
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(g, n, k, device="cuda") * 0.05
    a, a_s = quantize_fp8_per_token_group(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    a_s = to_tma_aligned_mn_major(a_s)
    starts = [sum(runs[:e]) for e in range(g)]
    spans = [(e, s, r) for e, (s, r) in enumerate(zip(starts, runs)) if r > 0]
    ours = [(a[s:s + r], b[e], a_s[s:s + r], b_s[e]) for e, s, r in spans]
    cublas = [(a[s:s + r], b[e].t(), to_mn_major(a_s[s:s + r].contiguous()), b_s[e].t()) for e, s, r in spans]

    variants = {
        "contiguous": lambda: fp8_blockwise_grouped_mm_contiguous(a, b, a_s, b_s, ids),
        "our_loop": lambda: [fp8_blockwise_scaled_mm(*t) for t in ours],
        "cublas_loop": lambda: [torch._scaled_mm(ae, be, sa, sb, out_dtype=torch.bfloat16)
                                for ae, be, sa, sb in cublas],
        "one_weight": lambda: fp8_blockwise_scaled_mm(a, b[0], a_s, b_s[0]),
    }
    out = variants["contiguous"]()
    err = 0.0
    for e, s, r in spans:
        c = counts[e]
        want = fp8_blockwise_scaled_mm_ref(a[s:s + c], b[e], a_s[s:s + c], b_s[e], (1, 128, 128))
        err = max(err, ((out[s:s + c].double() - want).norm() / want.norm()).item())
    failed = {}
    for name, fn in variants.items():
        try:
            fn()
        except RuntimeError as exc:
            failed[name] = str(exc)[:200]
    times = {name: [] for name in variants if name not in failed}
    for _ in range(3):
        for name in times:
            times[name].append(graph_time_us([variants[name]])[0])
    med = {name: statistics.median(ts) for name, ts in times.items()}
    flops = 2 * m * n * k
    row = dict(g=g, mean=mean, n=n, k=k, counts=counts, m=m, err=err, us=med, rounds=times, failed=failed,
               tflops={name: flops / t / 1e6 for name, t in med.items()})
    rows.append(row)
    c = med["contiguous"]
    print(f"G={g:3d} mean={mean:5d} M={m:6d} N={n} K={k}: contiguous {c:8.1f} us ({flops / c / 1e6:5.0f} TFLOPS), "
          + ", ".join(f"{name} {t:8.1f} ({t / c:.2f}x)" for name, t in med.items() if name != "contiguous")
          + f"; err {err:.2e}" + (f"; failed {list(failed)}" if failed else ""), flush=True)


def main():
    for g, mean, empty in ((4, 512, 0), (8, 1024, 1), (8, 4096, 0), (32, 512, 4), (32, 128, 4)):
        for n, k in ((4096, 7168), (7168, 2048)):
            case(g, mean, n, k, empty, seed=g * mean + n)
    with open(os.path.join(os.environ.get("OUT", "."), "fp8_grouped_contiguous39.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
