"""Session 9: weight-tile height x K slices for decode-size int8 GEMMs, forced, against the wave model's pick.

For the issue's M <= 32 layers: tile_m in {64, 128} and every K-slice count in {1, 2, 3, 4, 6, 8} (the host's
``split_k.best_split`` is replaced by the forced count), CUDA-graph medians over weights rotated beyond L2, each
variant checked against float64 first. Two rounds in alternating order; prints one line per problem.
Writes int8_small_m_split.json to $OUT.
"""
import json
import os
import statistics
import sys

import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.configs import select_sm90_int8
from cute_kernels.ops import split_k
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
_model_best_split = split_k.best_split
_op = sys.modules["cute_kernels.ops.int8_scaled_mm"]  # its warm-path memo keeps each signature's split plan
rows = []


def run_forced(cfg, slices, sets):
    split_k.best_split = (lambda *a, **kw: slices) if slices else _model_best_split
    _op._validated.clear()
    try:
        calls = [lambda s=s: int8_scaled_mm(*s, config=cfg) for s in sets]
        return graph_time_us(calls)[0]
    finally:
        split_k.best_split = _model_best_split


for n, k, ms in ((4096, 14336, (1, 16, 32)), (14336, 4096, (1, 16, 32)), (4096, 4096, (1, 16))):
    copies = max(2, min(16, -(-L2_MARGIN // (n * k))))
    w = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t() for _ in range(copies)]
    sb = torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    for m in ms:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        sa = torch.rand(m, device="cuda") * 0.01
        sets = [(a, b, sa, sb, bias) for b in w]
        ref = int8_scaled_mm_ref(a, w[0], sa, sb, bias)
        table = select_sm90_int8(m, n, k)
        variants = {"table": (table, 0)}
        for tile_m in (64, 128):
            for slices in (1, 2, 3, 4, 6, 8):
                cfg = TileConfig(tile_m=tile_m, tile_n=table.tile_n, cluster_m=1, cluster_n=1, swap_ab=True,
                                 split_k=max(2, slices))
                variants[f"{tile_m}x{table.tile_n} s{slices}"] = (cfg if slices > 1 else
                                                                  TileConfig(**{**cfg.__dict__, "split_k": 1}), slices)
        times = {name: [] for name in variants}
        for rnd in range(2):
            for name in (list(variants) if rnd == 0 else list(variants)[::-1]):
                cfg, slices = variants[name]
                if rnd == 0:
                    split_k.best_split = (lambda *a_, **kw: slices) if slices else _model_best_split
                    _op._validated.clear()
                    try:
                        out = int8_scaled_mm(a, w[0], sa, sb, bias, config=cfg)
                    finally:
                        split_k.best_split = _model_best_split
                    err = ((out.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
                    assert err < 1e-2, (name, err)
                times[name].append(run_forced(cfg, slices, sets))
        us = {name: round(statistics.median(t), 2) for name, t in times.items()}
        best = min(us, key=us.get)
        print(f"M={m} N={n} K={k} table={table.describe()}: table {us['table']} best {best} {us[best]} "
              f"({us['table'] / us[best]:.3f}x) | " + " ".join(f"{k_}={v}" for k_, v in us.items() if k_ != "table"),
              flush=True)
        rows.append(dict(M=m, N=n, K=k, table=table.describe(), us=us, weight_GBps_best=round(n * k / us[best] / 1e3)))
        json.dump(rows, open(os.path.join(OUT, "int8_small_m_split.json"), "w"), indent=1)
