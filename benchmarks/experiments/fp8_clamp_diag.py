"""Session 22 diagnostic: run one FP8 clamped-tile case (argv: case index) and report OK / the CUDA error."""
import sys

import torch

from cute_kernels.configs import TileConfig
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

G = (1, 128, 128)
CASES = [  # (m, n, k, config or None, a_scale layout)
    (65, 2112, 7168, None, "tma"), (65, 2112, 7168, None, "kmajor"),
    (65, 2112, 7168, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1), "tma"),
    (65, 2112, 7168, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1), "kmajor"),
    (129, 2112, 7168, None, "tma"), (129, 2112, 7168, None, "kmajor"),
    (257, 2112, 1536, None, "tma"), (40, 1000, 640, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1,
                                                                 swap_ab=True), "kmajor"),
]
m, n, k, cfg, lay = CASES[int(sys.argv[1])]
a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
if lay == "tma":
    store = torch.zeros(k // 128, -(-m // 4) * 4, device="cuda")
    store[:, :m] = a_s.t()
    sa = store.t()[:m]
else:
    sa = a_s.contiguous()
out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
used = cfg or select_config(m, n, k)
try:
    fp8_blockwise_scaled_mm(a, b, sa, b_s.t().contiguous().t(), scale_granularity=G, out=out, config=cfg)
    torch.cuda.synchronize()
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, G)
    print(f"case {sys.argv[1]} M={m} {used.describe()} {lay}: OK rel err "
          f"{((out.double() - ref).norm() / ref.norm()).item():.2e}", flush=True)
except Exception as e:  # noqa: BLE001
    print(f"case {sys.argv[1]} M={m} {used.describe()} {lay}: FAIL {type(e).__name__} {str(e)[:120]}", flush=True)
