"""Session 9: in-kernel split-K for FP8 blockwise GEMMs above 256 tokens, where whole tiles quantize into waves.

M = 1024, N = 7168 is 448 tiles of 128 x 128: 3.4 waves on 132 SMs, run as 4. Two K slices make 896 work units (6.8
waves -> 7). The table's config with K slices forced to 1 (shipped), 2, 3, 4 (``split_k.best_split`` replaced),
CUDA-graph medians over weight copies rotated beyond L2, each variant checked against float64 first, two rounds in
alternating order. Writes fp8_large_m_split.json to $OUT.
"""
import json
import os
import statistics
import sys
from dataclasses import replace

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.ops import split_k
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
_model = split_k.best_split
_op = sys.modules["cute_kernels.ops.fp8_blockwise_scaled_mm"]
rows = []


def forced(slices, fn):
    split_k.best_split = (lambda *a, **kw: slices) if slices > 1 else _model
    _op._validated.clear()
    try:
        return fn()
    finally:
        split_k.best_split = _model


for m, n, k in ((1024, 7168, 16384), (1024, 7168, 2048), (512, 7168, 16384), (1024, 4096, 7168),
                (2048, 7168, 16384)):
    copies = max(2, min(8, -(-L2_MARGIN // (n * k))))
    a, sa = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    ws = [quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128) for _ in range(copies)]
    ref = fp8_blockwise_scaled_mm_ref(a, ws[0][0], sa, ws[0][1])
    table = select_config(m, n, k)
    variants = {s: (table if s == 1 else replace(table, split_k=s)) for s in (1, 2, 3, 4)}
    times = {s: [] for s in variants}
    errs = {}
    for rnd in range(2):
        for s in (list(variants) if rnd == 0 else list(variants)[::-1]):
            cfg = variants[s]
            if rnd == 0:
                out = forced(s, lambda: fp8_blockwise_scaled_mm(a, ws[0][0], sa, ws[0][1], config=cfg))
                errs[s] = ((out.double() - ref).norm() / ref.norm()).item()
                assert errs[s] < 5e-3 and not out.isnan().any(), (s, errs[s])
            calls = [lambda w=w, cfg=cfg: fp8_blockwise_scaled_mm(a, w[0], sa, w[1], config=cfg) for w in ws]
            times[s].append(forced(s, lambda: graph_time_us(calls)[0]))
    us = {s: round(statistics.median(t), 2) for s, t in times.items()}
    tflops = {s: round(2 * m * n * k / u / 1e6) for s, u in us.items()}
    print(f"M={m} N={n} K={k} {table.describe()}: " + " ".join(f"s{s} {u} us ({tflops[s]} TF)" for s, u in us.items()),
          flush=True)
    rows.append(dict(M=m, N=n, K=k, table=table.describe(), us=us, tflops=tflops, errs=errs))
    json.dump(rows, open(os.path.join(OUT, "fp8_large_m_split.json"), "w"), indent=1)
