"""Session 6: swapped A/B for decode-size FP8 blockwise (M <= 64) against the session-5 dispatch.

Variants per shape (every variant checked against float64 first, both granularities, fp8_sweep's checker):
"session 5" (the unswapped 64-row tile at the width the wave model picks, 128/160/192, a_scale TMA-staged where
eligible: ``select_config`` with ``USE_SWAP_AB = False``), "swap 64" / "swap 128" (weight tile height 64 / 128,
tokens 16 / 32 / 64 wide, split up to 8), and what ``select_config`` ships now. DeepSeek-V3 shapes at M in
{1, 16, 32, 64}, plus torch._scaled_mm blockwise where cuBLAS runs it.

Two timings, because they disagree for these ~10 us kernels: CUDA-graph medians of back-to-back calls with the
weight rotated among copies beyond L2 (activations and scales stay in L2, as in a decode step whose previous layer
just wrote them; PDL overlaps each call's prologue with the previous one's tail), and triton's do_bench (L2 flushed
before every call, one call per measurement: everything cold, no overlap). Both medians go to $OUT/fp8_swap.json.

    python benchmarks/experiments/fp8_swap.py
"""

import json
import math
import os
import statistics
from dataclasses import replace

from fp8_sweep import DSV3_NK, SMS, GW, Kernels, check, operands

import torch

import cute_kernels.ops.fp8_blockwise_scaled_mm as op
from cute_kernels.bench import graph_time_us


def session5_config(m, n, k):
    saved, op.USE_SWAP_AB = op.USE_SWAP_AB, False
    try:
        return op.select_config(m, n, k, 1, SMS)
    finally:
        op.USE_SWAP_AB = saved


def variants(m, n, k):
    row = next(cfg for max_m, cfg in op.SM90_FP8_BLOCKWISE_TABLE if m <= max_m)
    return {"session 5": (session5_config(m, n, k), {"sfa_tma": m % 4 == 0}),
            "swap 64": (replace(row, tile_m=64), {}),
            "swap 128": (replace(row, tile_m=128), {}),
            "shipped": (op.select_config(m, n, k, 1, SMS), {})}


def main():
    from triton.testing import do_bench

    log = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    kernels = Kernels()
    check(kernels, [(1, 576, 1024), (13, 200, 768), (33, 712, 512), (64, 2112, 1536)], variants, log)
    print("\n".join(log), flush=True)
    rows = []
    for n, k in DSV3_NK:
        for m in (1, 16, 32, 64):
            a, b, sa, sb, b_s = operands(m, n, k)
            copies = max(1, min(8, math.ceil(200e6 / b.numel())))
            bs = [b] + [b.clone() for _ in range(copies - 1)]
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            fns = {label: (lambda j, f=kernels.runner(cfg, sw, GW, m, n, k): f(a, bs[j], out, sa, sb))
                   for label, (cfg, sw) in variants(m, n, k).items()}
            try:
                torch._scaled_mm(a, b.t(), sa, b_s.t(), out_dtype=torch.bfloat16)
                fns["torch blockwise"] = lambda j: torch._scaled_mm(a, bs[j].t(), sa, b_s.t(), out_dtype=torch.bfloat16)
            except RuntimeError:
                pass  # cuBLAS refuses M = 1
            row = {"M": m, "N": n, "K": k, "configs": {lb: c.describe() for lb, (c, _) in variants(m, n, k).items()}}
            for label, f in fns.items():
                i = [0]

                def rotated(f=f, i=i):
                    i[0] = (i[0] + 1) % copies
                    f(i[0])

                graph = statistics.median(graph_time_us([lambda j=j, f=f: f(j) for j in range(copies)]
                                                        * max(1, 4 // copies))[0] for _ in range(3))
                cold = do_bench(rotated, warmup=25, rep=100, return_mode="median") * 1e3
                row[label] = {"graph_us": graph, "do_bench_us": cold}
            rows.append(row)
            print(json.dumps({kk: v for kk, v in row.items() if kk != "configs"}), flush=True)
    with open(os.path.join(os.environ.get("OUT", "bench_out"), "fp8_swap.json"), "w") as fh:
        json.dump({"log": log, "rows": rows}, fh, indent=1)
    labels = [lb for lb in rows[0] if isinstance(rows[0][lb], dict) and "graph_us" in rows[0][lb]] + ["torch blockwise"]
    print("\n| M | N | K | " + " | ".join(f"{lb} graph / do_bench" for lb in labels) + " |")
    for r in rows:
        cells = [f"{r[lb]['graph_us']:.1f} / {r[lb]['do_bench_us']:.1f}" if lb in r else "-" for lb in labels]
        print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
