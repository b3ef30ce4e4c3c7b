"""Session 21: why a nearly empty last token tile is slow on the WGMMA weight-only path.

wo_large_m_rule.py found 8192^2 (8-bit) with 128-token tiles, unsplit, at 81.0 us for M = 129 but 63.4 at M = 192
and 56.7 at M = 256 - the same grid of tiles. Hypothesis: the x tiles of the last token tile are mostly outside x,
and the TMA's zero fill of those rows is slower than loading real rows. Probe: the same config at M = 129 / 160 /
192 / 256, and M = 129 with x (and out) zero-padded to 256 rows, 128- and 256-token tiles; CUDA-graph medians of
three interleaved rounds, each launch checked against float64 first. Writes wo_partial_tile.json to $OUT.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cute_kernels import arch as _arch  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import TileConfig  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import wgmma  # noqa: E402

N = K = 8192
CASES = [  # (label, M computed, valid rows, tile_n, split)
    ("t128 M=129", 129, 129, 128, 1), ("t128 M=129 padded to 256", 256, 129, 128, 1), ("t128 M=160", 160, 160, 128, 1),
    ("t128 M=192", 192, 192, 128, 1), ("t128 M=256", 256, 256, 128, 1),
    ("t256 M=129 s2", 129, 129, 256, 2), ("t256 M=256 s2", 256, 256, 256, 2),
    ("t256 M=257", 257, 257, 256, 1), ("t256 M=257 padded to 512", 512, 257, 256, 1), ("t256 M=512", 512, 512, 256, 1),
    ("t16 M=1", 1, 1, 16, 1), ("t16 M=1 padded to 16", 16, 1, 16, 1), ("t16 M=16", 16, 16, 16, 1),
]


def main():
    sms = _arch.sm_count(0)
    sets = [torch.randint(0, 256, (N, K), dtype=torch.uint8, device="cuda") for _ in range(3)]
    calls, errs = {}, {}
    for label, m, valid, tile_n, split in CASES:
        x = torch.zeros(m, K, dtype=torch.bfloat16, device="cuda")
        x[:valid] = torch.randn(valid, K, device="cuda").to(torch.bfloat16)
        out = torch.full((m, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        cfg = TileConfig(tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1, split_k=split)
        wgmma.quantized_mm_wgmma(x, sets[0], out, 0.01, 8, None, wgmma.NO_GROUP, sms, cfg=cfg)
        ref = quantized_mm_ref(x[:4].cpu(), sets[0][:256].cpu(), 0.01, 8)
        errs[label] = ((out[:4, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        calls[label] = [lambda x=x, out=out, w=w, cfg=cfg: wgmma.quantized_mm_wgmma(
            x, w, out, 0.01, 8, None, wgmma.NO_GROUP, sms, cfg=cfg) for w in sets]
    times = {label: [] for label in calls}
    for _ in range(3):
        for label, c in calls.items():
            times[label].append(graph_time_us(c)[0])
    rows = {label: dict(us=statistics.median(v), rounds=v, err=errs[label]) for label, v in times.items()}
    for label, r in rows.items():
        print(f"{label:28s} {r['us']:8.2f} us   err {r['err']:.1e}")
    with open(os.path.join(os.environ.get("OUT", "."), "wo_partial_tile.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
