"""Is an idle SM a cost when the int8 decode GEMM is DRAM-bound? (session 13)

Unsplit swapped tiles at M = 1, K = 4096: N = 14336 (112 tiles of 128 rows: 20 SMs idle; 224 of 64: 92 SMs run
two), 16896 (132 x 128: one per SM), 8448 (132 x 64, or 66 x 128), 7168 (112 x 64, or 56 x 128), each next to a
bare read of the same bytes (copy_bandwidth.read_sized). CUDA-graph medians, weights rotated, results not checked
(the configs are the shipped kernels, checked by the GPU tests). If an SM's own streaming rate limited the kernel,
the GEMM / read ratio would follow the busiest SM's share of the rows; it does not (H100, session 13: 1.11-1.14 for
every 64-row grid and the balanced 128-row one). ``python benchmarks/experiments/int8_balance_probe.py``.
"""
import sys

sys.path[:0] = ["benchmarks", "benchmarks/experiments"]
from copy_bandwidth import read_sized  # noqa: E402
from cute_kernels import TileConfig  # noqa: E402
from int8_vs_read import gemm_us  # noqa: E402

for n in (14336, 16896, 8448, 7168):
    r = read_sized(n * 4096 / 1e6)["us"]
    for h in (64, 128):
        cfg = TileConfig(tile_m=h, tile_n=16, cluster_m=1, swap_ab=True, split_k=1)
        t = gemm_us(1, n, 4096, check=False, config=cfg)
        print(f"N={n} K=4096 tile {h}: tiles {-(-n // h)} gemm {t:.2f} us, bare read {r:.2f} us, ratio {t / r:.2f}",
              flush=True)
