"""Session 6: confirm ``config.DECODE_MIN_INFLIGHT_KB`` - where the decode grid keeps too few weight bytes in flight
per SM, the M <= 8 plans of the signed formats now take the cp.async ring with two steps ahead (3 stages) instead of
the register double buffer. For every problem where the two differ: both timed in ABBA order (registers, ring,
ring, registers; CUDA-graph medians over weight sets rotated through more than L2, three repeats), each checked
against float64 first. Writes wo_inflight.json to $OUT.
"""
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
for n, k in [(4096, 14336), (4096, 4096), (8192, 8192), (14336, 4096)]:
    for bits in (8, 4, 2, 1):
        per_set = n * k * bits // 8
        sets = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
                for _ in range(bwo.n_sets(per_set, 16))]
        for m in (1, 4, 8):
            new, old = config.decode_tile(bits, m, n, SMS), config.decode_tile(bits, m, n, SMS, ring=False)
            if new == old:
                continue
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs = {}, {}
            for name, tile in (("registers", old), ("ring", new)):
                errs[name] = bwo._check(quantized_mm(x, sets[0], 0.01, bits, tile=tile), x, sets[0], 0.01, bits)
                calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, tile=tile) for w in sets]
            reps = {name: [] for name in calls}
            for _ in range(3):
                for name in ("registers", "ring", "ring", "registers"):
                    reps[name].append(bwo.graph_time_us(calls[name])[0])
            row = {"n": n, "k": k, "bits": bits, "m": m, "errs": errs,
                   "us": {name: statistics.median(ts) for name, ts in reps.items()}}
            rows.append(row)
            print(f"N={n} K={k} int{bits} M={m}: registers {row['us']['registers']:.2f} ring "
                  f"{row['us']['ring']:.2f} us ({per_set / row['us']['ring'] / 1e6:.2f} TB/s)", flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "wo_inflight.json"), "w"), indent=1)
