"""Session 6: how deep must the decode path's weight prefetch be? quantized_mm at M = 1 with the register double
buffer (one K step ahead, the shipped plans for 2/4/8-bit) against the cp.async ring at 2-8 stages (1-7 steps
ahead), for 16-row tile counts nt = 1 and 2, plus a read-only floor (torch sum over the packed bytes viewed as
float32, same rotation). Every variant checked against float64 first; CUDA-graph medians over weight sets rotated
through more than L2, three interleaved repeats. Writes wo_depth.json to $OUT.
"""
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_weight_only as bwo  # noqa: E402
from cute_kernels.weight_only import config, quantized_mm  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for n, k in [(8192, 8192), (4096, 14336)]:
    for bits in (4, 2, 8, 1):
        per_set = n * k * bits // 8
        sets = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
                for _ in range(bwo.n_sets(per_set, 16))]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        shipped = config.decode_tile(bits, 1, n, SMS)
        variants = {"shipped " + ("ring" if shipped.stages else "regs"): shipped}
        for nt in (1, 2):
            for stages in (2, 3, 4, 6, 8):
                variants[f"ring nt{nt} s{stages}"] = dataclasses.replace(shipped, nt=nt, stages=stages,
                                                                         swap_registers=False)
        calls, errs = {}, {}
        for name, tile in variants.items():
            errs[name] = bwo._check(quantized_mm(x, sets[0], 0.01, bits, tile=tile), x, sets[0], 0.01, bits)
            calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, tile=tile) for w in sets]
        calls["read floor"] = [lambda w=w: w.view(torch.float32).sum() for w in sets]
        reps = {name: [] for name in calls}
        for _ in range(3):
            for name, c in calls.items():
                reps[name].append(bwo.graph_time_us(c)[0])
        row = {"n": n, "k": k, "bits": bits, "MB": per_set / 1e6, "errs": errs,
               "us": {name: statistics.median(ts) for name, ts in reps.items()}}
        rows.append(row)
        best = min((v, kk) for kk, v in row["us"].items() if kk != "read floor")
        print(f"N={n} K={k} int{bits} ({per_set / 1e6:.1f} MB): " + ", ".join(
            f"{kk} {v:.2f}" for kk, v in row["us"].items()) + f" | best {best[1]} {best[0]:.2f} us = "
            f"{per_set / best[0] / 1e6:.2f} TB/s", flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "wo_depth.json"), "w"), indent=1)
