"""Session 21: 8-bit weights on the WGMMA path - every quantized_mm path forced side by side, per layer and M.

For the issue's three layers (and 4096^2) and M from 8 to 4096: quantized_mm with 8-bit weights forced onto the
decode tiles (M <= 16), the mma.sync tensor-core tiles, the WGMMA path (new for 8-bit) and the dense path
(dequantize + cuBLAS), beside torch.matmul on a pre-dequantized weight in x's dtype. Each variant is first checked
against the float64 reference (a corner of the output), then timed as CUDA-graph medians with the weights rotated
past L2 (``bench_weight_only``'s sets), in ``ROUNDS`` interleaved rounds; the table shows the median of the rounds.
Writes wo_int8_wgmma.json / .md to $OUT.

    python benchmarks/experiments/wo_int8_wgmma.py      (env: WO8_MS, WO8_LAYERS, WO8_DTYPES, WO8_ROUNDS)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench_weight_only import _check, n_sets  # noqa: E402

from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.weight_only import quantized_mm  # noqa: E402

BITS = 8
MS = [int(v) for v in os.environ.get("WO8_MS", "8,12,16,17,24,32,64,128,256,1024,4096").split(",")]
LAYERS = [tuple(int(v) for v in s.split("x"))
          for s in os.environ.get("WO8_LAYERS", "8192x8192,14336x4096,4096x14336,4096x4096").split(",")]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_KEYS = os.environ.get("WO8_DTYPES", "bf16,fp16").split(",")
ROUNDS = int(os.environ.get("WO8_ROUNDS", "3"))


def main():
    out_dir = os.environ.get("OUT", ".")
    rows = []
    for n, k in LAYERS:
        w_sets = [torch.randint(0, 256, (n, k), dtype=torch.uint8, device="cuda") for _ in range(n_sets(n * k))]
        for dkey in DTYPE_KEYS:
            dtype = DTYPES[dkey]
            dense_sets = [torch.randn(n, k, device="cuda").to(dtype) * 0.02 for _ in range(n_sets(n * k * 2, 4))]
            for m in MS:
                x = torch.randn(m, k, device="cuda").to(dtype)
                ws = w_sets if m <= 256 else w_sets[:2]
                ds = dense_sets if m < 64 else dense_sets[:1]
                paths = (["decode"] if m <= 16 else []) + ["tensor_core", "wgmma"] + (["dense"] if m >= 17 else [])
                calls, errs = {}, {}
                for p in paths:
                    errs[p] = _check(quantized_mm(x, w_sets[0], 0.01, BITS, path=p), x, w_sets[0], 0.01, BITS)
                    calls[p] = [lambda w=w, p=p: quantized_mm(x, w, 0.01, BITS, path=p) for w in ws]
                errs["default"] = _check(quantized_mm(x, w_sets[0], 0.01, BITS), x, w_sets[0], 0.01, BITS)
                calls["default"] = [lambda w=w: quantized_mm(x, w, 0.01, BITS) for w in ws]
                calls["matmul"] = [lambda w=w: torch.matmul(x, w.t()) for w in ds]
                times = {p: [] for p in calls}
                for _ in range(ROUNDS):
                    for p, c in calls.items():
                        times[p].append(graph_time_us(c)[0])
                med = {p: statistics.median(v) for p, v in times.items()}
                row = dict(n=n, k=k, m=m, dtype=dkey, us=med, rounds=times, err=errs)
                rows.append(row)
                print(f"{n}x{k} {dkey} M={m:5d} " + "  ".join(f"{p} {t:8.2f}" for p, t in med.items())
                      + f"  wgmma/best-other {med['wgmma'] / min(t for p, t in med.items() if p not in ('wgmma', 'default', 'matmul')):.2f}"
                      + f"  x{dkey} {med['matmul'] / med['default']:.2f}", flush=True)
                with open(os.path.join(out_dir, "wo_int8_wgmma.json"), "w") as f:
                    json.dump(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), rows=rows),
                              f, indent=1)
            del dense_sets
        del w_sets
    cols = ["decode", "tensor_core", "wgmma", "dense", "default", "matmul"]
    lines = [f"{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}: 8-bit quantized_mm, µs (median of "
             f"{ROUNDS} rounds)", "", "| layer | x | M | " + " | ".join(cols) + " | matmul / default |",
             "|---" * (len(cols) + 4) + "|"]
    for r in rows:
        cells = [f"{r['us'][c]:.2f}" if c in r["us"] else "" for c in cols]
        lines.append(f"| {r['n']}x{r['k']} | {r['dtype']} | {r['m']} | " + " | ".join(cells)
                     + f" | {r['us']['matmul'] / r['us']['default']:.2f} |")
    md = "\n".join(lines)
    with open(os.path.join(out_dir, "wo_int8_wgmma.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
