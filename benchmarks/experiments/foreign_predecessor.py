"""Session 24: does one of our GEMMs run slower right after a foreign (non-PDL) kernel than after another of ours?
fp8_realign.py found copy-then-GEMM pairs 17 µs slower than the copy plus the GEMM timed apart (7168 x 16384,
M = 1023). In a model there is always some other kernel (activation quantization, norms) before each GEMM.
CUDA-graph medians, weights rotated: the GEMM alone; a tiny torch kernel (an add on 4 KB) alone; pairs of the two;
and the GEMM after a larger elementwise kernel (an add over 64 MB, ~50 µs). int8 and FP8. Writes
foreign_predecessor.json to $OUT."""
import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
import cute_kernels as ck  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major  # noqa: E402


def fp8_case(m, n, k):
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    sa = to_tma_aligned_mn_major(a_s)
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
    copies = max(1, min(4, math.ceil(150e6 / b.numel())))
    bs, sb = [b] + [b.clone() for _ in range(copies - 1)], to_mn_major(b_s)
    o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return [lambda j=j: ck.fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=o) for j in range(copies)]


def int8_case(m, n, k):
    a = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
    copies = max(1, min(4, math.ceil(150e6 / (n * k))))
    ws = [torch.randint(-128, 127, (n, k), device="cuda", dtype=torch.int8) for _ in range(copies)]
    s1, s2 = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
    o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return [lambda j=j: ck.int8_scaled_mm(a, ws[j].t(), s1, s2, out=o) for j in range(copies)]


small = torch.zeros(1024, device="cuda")
big = torch.zeros(16 << 20, device="cuda")
rows = []
for name, calls in [("fp8 1024x7168x16384", fp8_case(1024, 7168, 16384)), ("fp8 64x7168x16384", fp8_case(64, 7168, 16384)),
                    ("int8 1024x8192x8192", int8_case(1024, 8192, 8192)), ("int8 1x4096x4096", int8_case(1, 4096, 4096))]:
    tiny = [lambda: small.add_(1.0) for _ in calls]
    large = [lambda: big.add_(1.0) for _ in calls]
    variants = {
        "gemm": calls,
        "tiny": tiny,
        "tiny+gemm": [f for pair in zip(tiny, calls) for f in pair],
        "large": large,
        "large+gemm": [f for pair in zip(large, calls) for f in pair],
    }
    t = {v: [] for v in variants}
    for _ in range(3):
        for v, c in variants.items():
            t[v].append(graph_time_us(c)[0])
    med = {v: statistics.median(x) for v, x in t.items()}
    for v in ("tiny+gemm", "large+gemm"):  # graph_time_us gives µs per callable: a pair is two of them
        med[v] *= 2
    extra_tiny = med["tiny+gemm"] - med["tiny"] - med["gemm"]
    extra_large = med["large+gemm"] - med["large"] - med["gemm"]
    rows.append(dict(problem=name, us=med, rounds=t, extra_tiny=extra_tiny, extra_large=extra_large))
    print(f"{name:22s} gemm {med['gemm']:8.2f}  tiny {med['tiny']:5.2f}  tiny+gemm {med['tiny+gemm']:8.2f} "
          f"(extra {extra_tiny:+6.2f})  large {med['large']:6.2f}  large+gemm {med['large+gemm']:8.2f} "
          f"(extra {extra_large:+6.2f})", flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), "foreign_predecessor.json"), "w"), indent=1)
