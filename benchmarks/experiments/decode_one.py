"""Session 24: run one decode-size GEMM a few times (for ncu): ``python decode_one.py fp8|int8 M N K``.
FP8: groupwise per-token a_scale (4-row-aligned MN-major), 128x128 weight blocks; int8: per-token / per-channel scales."""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import cute_kernels as ck  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major  # noqa: E402

op, m, n, k = sys.argv[1], *map(int, sys.argv[2:5])
o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
if op == "fp8":
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128)
    sa, sb = to_tma_aligned_mn_major(a_s), to_mn_major(b_s)
    call = lambda: ck.fp8_blockwise_scaled_mm(a, b, sa, sb, out=o)  # noqa: E731
else:
    a = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
    w = torch.randint(-128, 127, (n, k), device="cuda", dtype=torch.int8)
    s1, s2 = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
    call = lambda: ck.int8_scaled_mm(a, w.t(), s1, s2, out=o)  # noqa: E731
for _ in range(6):
    call()
torch.cuda.synchronize()
