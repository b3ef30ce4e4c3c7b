"""Decode-size int8 tiles and K-slice counts again, after the session-13 fix-up change, session 13.

The wave model (``configs.split_cost``, ``SPLIT_SLICE_COST = 0.1`` per extra slice, fitted on an H200 when the
fix-up carried three GPU-scope fences) picks 2 slices of 64-row tiles at N = K = 4096 and N = 4096, K = 14336, and
no split at N = 14336, K = 4096. With one fence per fix-up a slice costs less, so more slices may now pay. Every
(tile height, slice count) is forced here (``split_k.best_split`` patched to return the cap) and timed next to the
table's pick; CUDA-graph medians with the weight copies rotated (int8_vs_read.gemm_us), two rounds, the first
config of each problem checked against float64. ``python benchmarks/experiments/int8_split_resweep.py`` prints a
table and writes $OUT/int8_split_resweep.json.
"""
import json
import os
import sys

sys.path[:0] = ["benchmarks", "benchmarks/experiments"]
import torch

import cute_kernels.ops.split_k as split_k
from cute_kernels import TileConfig
from int8_vs_read import gemm_us

LAYERS = [(4096, 4096), (14336, 4096), (4096, 14336)]
MS = [1, 32]
HEIGHTS = [64, 128]
SLICES = [1, 2, 4, 8]


def forced_slices(tiles, tile_m, max_slices, k_tiles, sm_count):
    return max(1, min(max_slices, k_tiles))


def main():
    rows = []
    for n, k in LAYERS:
        for m in MS:
            tile_n = 16 if m <= 16 else 32
            for rnd in range(2):
                t = {"table": gemm_us(m, n, k, check=rnd == 0)}
                split_k.best_split = forced_slices
                try:
                    for h in HEIGHTS:
                        for s in SLICES:
                            cfg = TileConfig(tile_m=h, tile_n=tile_n, cluster_m=1, swap_ab=True, split_k=s)
                            t[f"{h}/{s}"] = gemm_us(m, n, k, check=False, config=cfg)
                finally:
                    split_k.best_split = _shipped_best_split
                rows.append({"M": m, "N": n, "K": k, "round": rnd, "us": t})
                print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "int8_split_resweep.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    names = list(rows[0]["us"])
    print(f"device: {torch.cuda.get_device_name()}; µs, rounds 1 / 2; columns tile height / K slices")
    print("| M | N | K | " + " | ".join(names) + " |")
    for a, b in zip(rows[::2], rows[1::2]):
        cells = [f"{a['us'][c]:.2f} / {b['us'][c]:.2f}" for c in names]
        print(f"| {a['M']} | {a['N']} | {a['K']} | " + " | ".join(cells) + " |")


_shipped_best_split = split_k.best_split

if __name__ == "__main__":
    main()
