"""Session 28: int8 on N = K = 4096 at 17-64 tokens - which tile streams the weight fastest now that the two K
slices of the decode tiles meet in a cluster (``Sm90GemmKernel.split_cluster``).

With cluster split-K the 4096^2 rows at 1 / 16 tokens read the weight at 80% of the copy bandwidth in the benchmark,
32 tokens at 76%: the 64 x 32 swapped tile costs ~0.3 µs more than the 64 x 16 one although the weight bytes are the
same. Variants through ``int8_scaled_mm(config=...)`` (the op then plans the split and the cluster as for its own
pick): the table's choice, 64 x 16 swapped tiles over several token tiles (no K split: 128 CTAs for 32 tokens), and
64 x 32 / 64 x 64 swapped split tiles. Each variant float64-checked first (NaN-poisoned); then CUDA-graph medians
(``bench.graph_time_us``) over operand sets rotated past L2, variants interleaved over IM_ROUNDS rounds.
Env: IM_MS ("17,24,32,48,64"), IM_ROUNDS (5). Writes $OUT/int8_mid_tokens.json and prints a table.
"""
import json
import os
import statistics
import sys

sys.path[:0] = ["benchmarks"]
import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.bench import graph_time_us, int8_operand_sets
from cute_kernels.ops import int8_scaled_mm as int8_op
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
MS = [int(v) for v in os.environ.get("IM_MS", "17,24,32,48,64").split(",")]
ROUNDS = int(os.environ.get("IM_ROUNDS", "5"))
N = K = 4096
VARIANTS = {"table": None,
            "16x": TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8),
            "32x": TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8),
            "64x": TileConfig(tile_m=64, tile_n=64, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)}


def main():
    rows = []
    for m in MS:
        sets = int8_operand_sets(m, N, K, 12)
        a, b, sa, sb, bias = sets[0]
        ref = int8_scaled_mm_ref(a.cpu(), b.cpu(), sa.cpu(), sb.cpu(), bias.cpu())
        for name, cfg in VARIANTS.items():
            out = torch.full((m, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            int8_scaled_mm(a, b, sa, sb, bias, out=out, config=cfg)
            err = ((out.double().cpu() - ref).abs() / (ref.abs() + 1e-2)).max().item()
            assert not out.isnan().any() and err < 1e-2, (m, name, err)
        times = {name: [] for name in VARIANTS}
        for _ in range(ROUNDS):
            for name, cfg in VARIANTS.items():
                int8_op._validated.clear()
                times[name].append(graph_time_us([lambda s=s, c=cfg: int8_scaled_mm(*s, config=c) for s in sets])[0])
        row = {"M": m, **{name: statistics.median(t) for name, t in times.items()}, "rounds": times}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "int8_mid_tokens.json"), "w") as f:
        json.dump({"device": dev, "rows": rows}, f, indent=1)
    print(f"\n{dev}: int8_scaled_mm, N = K = {N}, µs (CUDA-graph medians of {ROUNDS} interleaved rounds)")
    print("| M | " + " | ".join(VARIANTS) + " |")
    print("|---:|" + "---:|" * len(VARIANTS))
    for r in rows:
        print(f"| {r['M']} | " + " | ".join(f"{r[v]:.2f}" for v in VARIANTS) + " |")


if __name__ == "__main__":
    main()
