"""Session 21: the WGMMA weight-only ops with and without ``wgmma.padded_tokens`` (a nearly empty last token tile run
on padded copies of x and out), at token counts that leave the last tile partly empty, through the public ops with
their default dispatch (8-bit ``quantized_mm`` bf16 x; ``awq_gemm`` AWQ g128 fp16 x); torch.matmul on the dense
weight beside them. Checked against float64 (a corner of the output) before timing; CUDA-graph medians of three
interleaved rounds, weights rotated over three copies. Writes wo_padded_tokens.json to $OUT.

    git checkout b4b03f0 -- cute_kernels && python benchmarks/experiments/wo_padded_tokens.py   (env: WP_LAYERS, WP_MS)
(the padding of x and out it toggles was replaced in session 21 by padding x alone: ``wgmma.x_rows``)
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
    "WP_LAYERS", "8192x8192,14336x4096,4096x14336,4096x4096").split(",")]
MS = [int(v) for v in os.environ.get("WP_MS", "129,160,192,257,300,384,600,1100").split(",")]


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
                    for name in ("unpadded", "padded"):
                        wgmma.PAD_PARTIAL_TOKEN_TILES = name == "padded"
                        if name not in errs:
                            out.fill_(float("nan"))
                            op_call(fam, x, sets[0], out)()
                            errs[name] = error(fam, out, x, sets[0])
                        times[name].append(graph_time_us([op_call(fam, x, w, out) for w in sets])[0])
                    times["matmul"].append(graph_time_us([lambda: torch.matmul(x, dense.t(), out=out)])[0])
                wgmma.PAD_PARTIAL_TOKEN_TILES = True
                med = {name: statistics.median(v) for name, v in times.items()}
                rows.append(dict(fam=fam, n=n, k=k, m=m, tile_n=cfg.tile_n, split=cfg.split_k,
                                 padded_m=wgmma.padded_tokens(m, cfg.tile_n), us=med, rounds=times, err=errs))
                print(f"{fam} {n}x{k} M={m:5d} tile {cfg.tile_n}/s{cfg.split_k} -> {rows[-1]['padded_m']:5d}: "
                      f"unpadded {med['unpadded']:8.2f} padded {med['padded']:8.2f} "
                      f"({med['padded'] / med['unpadded']:.3f})  matmul {med['matmul']:8.2f}", flush=True)
                with open(os.path.join(os.environ.get("OUT", "."), "wo_padded_tokens.json"), "w") as f:
                    json.dump(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), rows=rows),
                              f, indent=1)
            del sets, dense
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
