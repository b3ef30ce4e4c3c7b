"""Session 21: the WGMMA weight-only ops with x padded to whole token tiles (``wgmma.x_rows``, a zero-padded copy so
that no TMA load of x runs past its last row) and without, through the public ops with their default dispatch
(8-bit ``quantized_mm`` bf16 x; ``awq_gemm`` AWQ g128 fp16 x) at token counts that are not whole tiles; torch.matmul
on the dense weight beside them. Checked against float64 (a corner of the output) before timing; CUDA-graph medians
of three interleaved rounds, weights rotated over three copies. Writes wo_x_rows.json to $OUT.

    python benchmarks/experiments/wo_x_rows.py        (env: WP_LAYERS, WP_MS)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from wo_large_m_rule import error, weights  # noqa: E402

from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.weight_only import awq_gemm, quantized_mm, wgmma  # noqa: E402

LAYERS = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WP_LAYERS", "8192x8192,14336x4096,4096x4096").split(",")]
MS = [int(v) for v in os.environ.get("WP_MS", "17,24,40,50,65,80,100,129,160,200,257,300,400,600,1100").split(",")]


def op_call(fam, x, w, out):
    if fam == "awq":
        return lambda: awq_gemm(x, w[0], w[1], w[2], out=out)
    return lambda: quantized_mm(x, w, 0.01, 8, out=out)


def main():
    rows = []
    for fam in ("int8", "awq"):
        dtype = torch.float16 if fam == "awq" else torch.bfloat16
        for n, k in LAYERS:
            sets, dense = weights(fam, n, k)
            for m in MS:
                cfg = wgmma.select_config(m, n, k, 132)
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                errs, times = {}, {"unpadded": [], "padded": [], "matmul": []}
                for _ in range(3):
                    for name in ("unpadded", "padded"):  # x of M rows / of whole token tiles
                        wgmma.PAD_X_ROWS = name == "padded"
                        if name not in errs:
                            out.fill_(float("nan"))
                            op_call(fam, x, sets[0], out)()
                            errs[name] = error(fam, out, x, sets[0])
                        times[name].append(graph_time_us([op_call(fam, x, w, out) for w in sets])[0])
                    times["matmul"].append(graph_time_us([lambda: torch.matmul(x, dense.t(), out=out)])[0])
                wgmma.PAD_X_ROWS = True
                med = {name: statistics.median(v) for name, v in times.items()}
                rows.append(dict(fam=fam, n=n, k=k, m=m, tile_n=cfg.tile_n, split=cfg.split_k,
                                 x_rows=wgmma.x_rows(m, cfg.tile_n), us=med, rounds=times, err=errs))
                print(f"{fam} {n}x{k} M={m:5d} tile {cfg.tile_n}/s{cfg.split_k} -> {rows[-1]['x_rows']:5d}: "
                      f"unpadded {med['unpadded']:8.2f} padded {med['padded']:8.2f} "
                      f"({med['padded'] / med['unpadded']:.3f})  matmul {med['matmul']:8.2f}", flush=True)
                with open(os.path.join(os.environ.get("OUT", "."), "wo_x_rows.json"), "w") as f:
                    json.dump(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), rows=rows),
                              f, indent=1)
            del sets, dense
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
