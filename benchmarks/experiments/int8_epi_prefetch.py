"""Session 9: L2 prefetch of the epilogue's vector operands at tile start (``EpilogueTree.prefetch``), old vs new.

Run once per code version (``python benchmarks/experiments/int8_epi_prefetch.py TAG``), versions alternating; each
run times decode-size int8 GEMMs (the issue's M <= 32 rows and M = 128), two FP8 blockwise decode rows and 8192^3
as a control: CUDA-graph medians over weight copies rotated beyond L2 (cute_kernels.bench.graph_time_us), every
problem checked against float64 first. Prints one JSON line per problem and writes int8_epi_prefetch_TAG.json.
"""
import json
import os
import sys

import torch

from cute_kernels import int8_scaled_mm
from cute_kernels.bench import graph_time_us, int8_operand_sets
from cute_kernels.reference import int8_scaled_mm_ref

TAG = sys.argv[1] if len(sys.argv) > 1 else "run"
OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
rows = []


def int8_problem(m, n, k):
    sets = int8_operand_sets(m, n, k, max(2, min(16, -(-L2_MARGIN // (n * k)))))
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(*sets[0], out=out)
    r = slice(0, min(m, 256))
    ref = int8_scaled_mm_ref(*[t[r] if i in (0, 2) else t for i, t in enumerate(sets[0])])
    err = ((out[r].double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
    us, _ = graph_time_us([lambda s=s: int8_scaled_mm(*s) for s in sets])
    return us, err, n * k / us / 1e3


def fp8_problem(m, n, k):
    from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
    from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm
    from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

    copies = max(2, min(16, -(-L2_MARGIN // (n * k))))
    a, sa = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    sets = [(a, *quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128)) for _ in range(copies)]
    out = fp8_blockwise_scaled_mm(a, sets[0][1], sa, sets[0][2])
    ref = fp8_blockwise_scaled_mm_ref(a, sets[0][1], sa, sets[0][2])
    err = ((out.double() - ref).norm() / ref.norm()).item()
    us, _ = graph_time_us([lambda s=s: fp8_blockwise_scaled_mm(s[0], s[1], sa, s[2]) for s in sets])
    return us, err, n * k / us / 1e3


problems = [("int8", m, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)) for m in (1, 16, 32, 128)]
problems += [("fp8", 1, 7168, 2048), ("fp8", 64, 2112, 7168), ("int8", 8192, 8192, 8192)]
for kind, m, n, k in problems:
    us, err, gbps = (int8_problem if kind == "int8" else fp8_problem)(m, n, k)
    row = dict(tag=TAG, kind=kind, M=m, N=n, K=k, us=round(us, 2), weight_GBps=round(gbps), err=err)
    rows.append(row)
    print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(OUT, f"int8_epi_prefetch_{TAG}.json"), "w"), indent=1)
