"""Session 11: how much of the decode-size CUDA-graph timings is our kernels overlapping *each other*.

The benchmarks time graphs of back-to-back calls of one GEMM. Our SM90 kernels launch with programmatic dependent
launch (PDL) and trigger their dependents at once, so call j + 1's CTAs are resident, and prefetch their first
K-tiles into L2, while call j still runs; cuBLAS's kernels get no such overlap from each other. In a model the
previous kernel is something else (a norm, an activation) that never triggers early. Here each GEMM call is
preceded by a tiny torch kernel (``z.add_(1)`` on one element) in the same graph; its own time (a graph of only
those) is subtracted. Columns, µs per GEMM: back to back / isolated, ours and cuBLAS (int8: torch._int_mm, no
epilogue, M >= 17 only; FP8: torch._scaled_mm blockwise).

    python benchmarks/experiments/pdl_isolation.py         (writes $OUT/pdl_isolation.json when OUT is set)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench_fp8_blockwise import DSV3_NK, operands, ours, torch_blockwise_layouts  # noqa: E402

from cute_kernels import int8_scaled_mm  # noqa: E402
from cute_kernels.bench import graph_time_us, int8_operand_sets  # noqa: E402

L2_MARGIN = 200 * 2**20


def times(calls):
    """(back-to-back µs per call, isolated µs per call) of a list of rotating calls."""
    z = torch.zeros(1, device="cuda")
    tiny = lambda: z.add_(1)  # noqa: E731
    b2b, _ = graph_time_us(calls)
    tiny_only, _ = graph_time_us([tiny] * len(calls))
    mixed, _ = graph_time_us([c for call in calls for c in (tiny, call)])  # per element of 2 * len(calls)
    return b2b, 2 * mixed - tiny_only


def main():
    rows = []
    for m, n, k in [(1, 4096, 4096), (32, 4096, 4096), (1, 14336, 4096), (32, 14336, 4096), (4096, 4096, 4096)]:
        copies = max(2, min(16, -(-L2_MARGIN // (n * k))))
        sets = int8_operand_sets(m, n, k, copies)
        row = {"op": "int8", "M": m, "N": n, "K": k}
        row["ours"] = times([lambda s=s: int8_scaled_mm(*s) for s in sets])
        if m > 16:
            row["torch"] = times([lambda s=s: torch._int_mm(s[0], s[1]) for s in sets])
        rows.append(row)
        print(json.dumps(row), flush=True)
    tb = "a mn-major, b_s.t()"
    for n, k in DSV3_NK[:1] + DSV3_NK[3:]:
        for m in (1, 64, 128):
            copies = max(2, min(16, -(-L2_MARGIN // (n * k))))
            ops = [operands(m, n, k, seed=s) for s in range(copies)]
            row = {"op": "fp8", "M": m, "N": n, "K": k}
            row["ours"] = times([ours(*o) for o in ops])
            if m > 1:
                calls = []
                for a, b, a_s, b_s in ops:
                    sa, sb = next((s1, s2) for nm, s1, s2 in torch_blockwise_layouts(a_s, b_s) if nm == tb)
                    calls.append(lambda a=a, b=b, sa=sa, sb=sb: torch._scaled_mm(a, b.t(), sa, sb,
                                                                                out_dtype=torch.bfloat16))
                row["torch"] = times(calls)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{torch.cuda.get_device_name()}: µs per GEMM, back to back / isolated (after a tiny torch kernel)")
    print("| op | M | N | K | ours | cuBLAS | ours gain from b2b | cuBLAS / ours isolated |")
    print("|---|---:|---:|---:|---|---|---:|---:|")
    for r in rows:
        o, t = r["ours"], r.get("torch")
        tt = f"{t[0]:.1f} / {t[1]:.1f}" if t else "-"
        ratio = f"{t[1] / o[1]:.2f}x" if t else "-"
        print(f"| {r['op']} | {r['M']} | {r['N']} | {r['K']} | {o[0]:.1f} / {o[1]:.1f} | {tt} | "
              f"{o[1] - o[0]:.1f} µs | {ratio} |")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "pdl_isolation.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
