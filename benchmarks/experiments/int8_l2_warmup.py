"""Session 10: int8_scaled_mm with the first K-tiles of each CTA's first tile prefetched into L2 before the PDL wait
(``Sm90GemmKernel.l2_warmup``, ``ops.int8_scaled_mm.L2_WARMUP_KTILES``), against off, in one process.

Decode-size rows of issue #2 (M <= 32 must read the weight at >= 80% of the 4.2 TB/s copy bandwidth) plus M = 128
and 8192^3 as controls. Per problem: every variant checked against float64, then CUDA-graph medians of back-to-back
calls over weight copies rotated beyond L2 (cute_kernels.bench.graph_time_us), variants interleaved over ROUNDS
rounds. Prints one JSON line per problem and writes int8_l2_warmup.json to $OUT.
Run from the project root: python benchmarks/experiments/int8_l2_warmup.py
"""
import json
import os

import torch

from cute_kernels import int8_scaled_mm
from cute_kernels.bench import graph_time_us, int8_operand_sets
from cute_kernels.ops import int8_scaled_mm as op
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
VARIANTS = (0, 2, 4, 8)
ROUNDS = 3
rows = []


def problem(m, n, k):
    sets = int8_operand_sets(m, n, k, max(2, min(16, -(-L2_MARGIN // (n * k)))))
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    r = slice(0, min(m, 256))
    ref = int8_scaled_mm_ref(*[t[r] if i in (0, 2) else t for i, t in enumerate(sets[0])])
    res = dict(M=m, N=n, K=k)
    times = {v: [] for v in VARIANTS}
    for v in VARIANTS:
        op.L2_WARMUP_KTILES = v
        op._validated.clear()
        out.fill_(float("nan"))
        int8_scaled_mm(*sets[0], out=out)
        err = ((out[r].double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
        assert err < 1e-2 and not torch.isnan(out).any(), (v, err)
    for _ in range(ROUNDS):
        for v in VARIANTS:
            op.L2_WARMUP_KTILES = v
            op._validated.clear()
            times[v].append(graph_time_us([lambda s=s: int8_scaled_mm(*s) for s in sets])[0])
    for v in VARIANTS:
        res[f"warm{v}"] = round(sorted(times[v])[len(times[v]) // 2], 2)
    res["weight_TBps_best"] = round(n * k / min(res[f"warm{v}"] for v in VARIANTS) / 1e6, 2)
    res["weight_TBps_off"] = round(n * k / res["warm0"] / 1e6, 2)
    return res


for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
    for m in (1, 16, 32, 128):
        rows.append(problem(m, n, k))
        print(json.dumps(rows[-1]), flush=True)
rows.append(problem(8192, 8192, 8192))
print(json.dumps(rows[-1]), flush=True)
op.L2_WARMUP_KTILES = 0
json.dump(rows, open(os.path.join(OUT, "int8_l2_warmup.json"), "w"), indent=1)
print("\n| M | N | K | " + " | ".join(f"warm {v}" for v in VARIANTS) + " | TB/s off -> best |")
for r in rows:
    print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(str(r[f'warm{v}']) for v in VARIANTS)
          + f" | {r['weight_TBps_off']} -> {r['weight_TBps_best']} |")
