"""Config sweep at a few shapes: which tile/cluster/split wins, and what the epilogue costs (CUDA-graph medians)."""
import sys
import torch
from triton.testing import do_bench_cudagraph
from cute_kernels import TileConfig, int8_scaled_mm

def bench(m, n, k, cfg, kinds=("vector", "vector"), bias=True):
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()
    sa = torch.rand(m if kinds[0] == "vector" else 1, device="cuda")
    sb = torch.rand(n if kinds[1] == "vector" else 1, device="cuda")
    bi = torch.randn(n, device="cuda").bfloat16() if bias else None
    int8_scaled_mm(a, b, sa, sb, bi, config=cfg)
    us = do_bench_cudagraph(lambda: int8_scaled_mm(a, b, sa, sb, bi, config=cfg), rep=100, return_mode="median") * 1e3
    return us

rows = []
from cute_kernels.configs import select_sm90_int8
if "--big" in sys.argv:
    for cfg in [TileConfig(), TileConfig(cluster_m=1, cluster_n=2)]:
        us = bench(8192, 8192, 8192, cfg)
        rows.append(("8192^3", cfg.describe(), us, 2 * 8192**3 / us / 1e6))
for m in (1, 16, 32, 64, 128):
    for (n, k) in ((4096, 4096), (4096, 14336), (14336, 4096)):
        t = select_sm90_int8(m, n, k)
        cands = [t, TileConfig(tile_m=64, tile_n=t.tile_n, cluster_m=1, swap_ab=True),
                 TileConfig(tile_m=128, tile_n=t.tile_n, cluster_m=1, swap_ab=True)]
        for cfg in cands:
            us = bench(m, n, k, cfg)
            rows.append((f"{m}x{n}x{k}", cfg.describe() + (" (table)" if cfg is t else ""), us, n * k / us / 1e3))
print("| shape | config | us | TOPS (8192^3) or weight GB/s |")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.0f} |")
