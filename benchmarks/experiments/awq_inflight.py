"""Session 6: AWQ's M <= 8 decode plan (registers, one 16-row tile per warp, x prefetched) against the cp.async ring
with two steps ahead (3 stages) on the narrow layers, where the grid keeps ~16 KB of weights in flight per SM (see
``config.DECODE_MIN_INFLIGHT_KB``). ABBA order, CUDA-graph medians over weight sets rotated beyond L2, each variant
checked against float64 first; fp16 torch.matmul on the dequantized weight in the same run. Writes
awq_inflight.json to $OUT.
"""
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for oc, ic in [(4096, 4096), (4096, 14336), (8192, 8192)]:
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(ic * oc // 2, 16))]
    dense = [awq_dequantize(*z) for z in sets[:2]]
    for m in (1, 4, 8):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        regs = config.decode_tile("awq", m, oc, SMS, ring=False)
        tiles = {"registers": regs, "ring 3": dataclasses.replace(regs, stages=3, swap_registers=False)}
        calls, errs = {}, {}
        for name, tile in tiles.items():
            errs[name] = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0])
            calls[name] = [lambda z=z, tile=tile: awq_gemm(x, *z, tile=tile) for z in sets]
        calls["fp16 matmul"] = [lambda d=d: torch.matmul(x, d) for d in dense]
        reps = {name: [] for name in calls}
        for _ in range(3):
            for name in ("registers", "ring 3", "ring 3", "registers", "fp16 matmul"):
                reps[name].append(bwo.graph_time_us(calls[name])[0])
        us = {name: statistics.median(ts) for name, ts in reps.items()}
        rows.append({"oc": oc, "ic": ic, "m": m, "errs": errs, "us": us})
        print(f"OC={oc} IC={ic} M={m}: registers {us['registers']:.2f} ring {us['ring 3']:.2f} fp16 "
              f"{us['fp16 matmul']:.2f} us -> speedup {us['fp16 matmul'] / us['registers']:.2f}x / "
              f"{us['fp16 matmul'] / us['ring 3']:.2f}x", flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "awq_inflight.json"), "w"), indent=1)
