"""Session 10: fp8_blockwise_scaled_mm with the first K-tiles of each CTA's first tile prefetched into L2 before the
PDL wait (``Sm90GemmKernel.l2_warmup``, ``ops.fp8_blockwise_scaled_mm.L2_WARMUP_KTILES``), against off.

DeepSeek-V3 layers at decode-size and mid M plus two large controls; groupwise activations (1x128, MN-major scales),
128x128 weight blocks, bf16 out. Per problem: every variant checked against float64 (relative error <= 1e-2), then
CUDA-graph medians of back-to-back calls over weight copies rotated beyond L2, variants interleaved over ROUNDS
rounds. Writes fp8_l2_warmup.json to $OUT. Run from the project root: python benchmarks/experiments/fp8_l2_warmup.py
"""
import json
import os

import torch

import cute_kernels.ops.fp8_blockwise_scaled_mm as op
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
VARIANTS = (0, 2, 4)
ROUNDS = 3
rows = []


def problem(m, n, k):
    copies = max(2, min(16, -(-L2_MARGIN // (n * k))))
    a, sa = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    sa = to_mn_major(sa)
    ws = [quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128) for _ in range(copies)]
    ref = fp8_blockwise_scaled_mm_ref(a, ws[0][0], sa, ws[0][1])
    res = dict(M=m, N=n, K=k)
    for v in VARIANTS:
        op.L2_WARMUP_KTILES = v
        op._validated.clear()
        out = op.fp8_blockwise_scaled_mm(a, ws[0][0], sa, ws[0][1])
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2 and not torch.isnan(out).any(), (v, err)
    times = {v: [] for v in VARIANTS}
    for _ in range(ROUNDS):
        for v in VARIANTS:
            op.L2_WARMUP_KTILES = v
            op._validated.clear()
            times[v].append(graph_time_us([lambda w=w: op.fp8_blockwise_scaled_mm(a, w[0], sa, w[1]) for w in ws])[0])
    for v in VARIANTS:
        res[f"warm{v}"] = round(sorted(times[v])[len(times[v]) // 2], 2)
    return res


for n, k in ((2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)):
    for m in (1, 16, 64, 128):
        rows.append(problem(m, n, k))
        print(json.dumps(rows[-1]), flush=True)
for m, n, k in ((1024, 7168, 2048), (8192, 8192, 8192)):
    rows.append(problem(m, n, k))
    print(json.dumps(rows[-1]), flush=True)
op.L2_WARMUP_KTILES = 0
json.dump(rows, open(os.path.join(OUT, "fp8_l2_warmup.json"), "w"), indent=1)
print("\n| M | N | K | " + " | ".join(f"warm {v}" for v in VARIANTS) + " |")
for r in rows:
    print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(str(r[f'warm{v}']) for v in VARIANTS) + " |")
