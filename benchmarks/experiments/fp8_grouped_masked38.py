"""Session 38: fp8_blockwise_grouped_mm (MoE experts in DeepGEMM's masked layout) beside what one would run
without it (and the masked op with DeepGEMM's ``expected_m`` tile hint): our batched fp8_blockwise_scaled_mm over all M_max rows of every expert, a loop of per-expert
torch._scaled_mm blockwise calls on the valid rows only (counts known on the host: a sync a real decode step cannot
afford, left out of the timing), and bf16 torch.bmm over all rows (a dense reference). DeepSeek-V3 expert shapes
(gate+up N = 4096, K = 7168; down N = 7168, K = 2048), token counts drawn around ``expected`` (0.5-1.5x, capped at
M_max, DeepGEMM's benchmark recipe) plus rows with empty experts. The torch loop runs each expert's rows rounded up to 16 (cuBLAS refuses others). CUDA-graph medians of 3 interleaved rounds (the
expert weights exceed L2 by themselves); the relative error of the masked op's valid rows against float64. The
roofline: the weights of experts with tokens at 3.35 TB/s vs the valid rows' FLOPs at the FP8 dense peak."""
import json, os, statistics

import torch

from cute_kernels import fp8_blockwise_grouped_mm, fp8_blockwise_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

rows = []


def case(g, m_max, n, k, expected, empty=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    counts = [min(m_max, max(1, int(expected * (0.5 + torch.rand(1, generator=gen).item())))) for _ in range(g)]
    for e in range(empty):
        counts[e * 2] = 0
    x = torch.randn(g, m_max, k, device="cuda")
    w = torch.randn(g, n, k, device="cuda") * 0.05
    a, a_s = quantize_fp8_per_token_group(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    a_s = to_tma_aligned_mn_major(a_s)
    masked = torch.tensor(counts, dtype=torch.int32, device="cuda")
    x_bf, w_t = x.bfloat16(), w.bfloat16().transpose(1, 2)
    # cuBLAS's blockwise FP8 refuses token counts that are not a multiple of 16 here (CUBLAS_STATUS_NOT_SUPPORTED,
    # seen in this benchmark's first run): the loop runs each expert's count rounded up to 16
    pad16 = [min(m_max, -(-c // 16) * 16) for c in counts]
    per_expert = [(a[e, :c], b[e].t(), to_mn_major(a_s[e, :c].contiguous()), b_s[e].t()) for e, c in enumerate(pad16)
                  if c > 0]

    def torch_loop():
        return [torch._scaled_mm(ae, be, sa, sb, out_dtype=torch.bfloat16) for ae, be, sa, sb in per_expert]

    variants = {
        "masked": [lambda: fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked)],
        "masked_expected_m": [lambda: fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked, expected_m=expected)],
        "batched_all_rows": [lambda: fp8_blockwise_scaled_mm(a, b, a_s, b_s)],
        "torch_loop": [torch_loop],
        "bf16_bmm": [lambda: torch.bmm(x_bf, w_t)],
    }
    out = variants["masked"][0]()
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, (1, 128, 128))
    err = max(((out[e, :c].double() - ref[e, :c]).norm() / ref[e, :c].norm()).item()
              for e, c in enumerate(counts) if c > 0)
    want = fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked, expected_m=expected)
    err = max(err, max(((want[e, :c].double() - ref[e, :c]).norm() / ref[e, :c].norm()).item()
                       for e, c in enumerate(counts) if c > 0))
    for name in ("torch_loop",):
        try:
            variants[name][0]()
        except RuntimeError as exc:
            print(f"  {name} failed: {str(exc)[:120]}", flush=True)
            del variants[name]
    t = {kk: [] for kk in variants}
    for _ in range(3):
        for kk, calls in variants.items():
            t[kk].append(graph_time_us(calls)[0])
    med = {kk: statistics.median(v) for kk, v in t.items()}
    tokens = sum(counts)
    active = sum(c > 0 for c in counts)
    floor = max(active * n * k / 3.35e6, 2 * tokens * n * k / 1979e6)
    row = {"G": g, "M_max": m_max, "N": n, "K": k, "expected": expected, "counts": counts, "err": err,
           "roofline_us": floor, **{f"{kk}_us": v for kk, v in med.items()},
           "tflops_masked": 2 * tokens * n * k / med["masked"] / 1e6}
    rows.append(row)
    vs = "  ".join(f"{kk} {med[kk]:8.2f} ({med[kk] / med['masked']:.2f}x)" for kk in med if kk != "masked")
    print(f"G={g:3d} M_max={m_max:4d} N={n:5d} K={k:5d} exp={expected:4d} tokens={tokens:5d} active={active:3d}  "
          f"masked {med['masked']:8.2f} us ({row['tflops_masked']:5.0f} TFLOPS, floor {floor:6.1f})  {vs}  "
          f"err {err:.1e}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    for g, m_max, expected, empty in ((8, 64, 32, 0), (8, 256, 128, 0), (32, 128, 64, 0), (32, 128, 16, 8),
                                      (4, 1024, 512, 0)):
        for n, k in ((4096, 7168), (7168, 2048)):
            case(g, m_max, n, k, expected, empty)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fp8_grouped_masked38.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
