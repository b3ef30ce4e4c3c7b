"""Session 7: 1/2-bit weights at 9-16 tokens. The shipped plans (token-major grids: one 8-token tile per CTA, 4
16-row tiles per warp halved until >= 1.5 CTAs per SM) lose to bf16 torch.matmul on the narrow long-K layer
(bench_weight_only.py, 4096 x 14336, M = 16: 2-bit 50.4 us vs 33.9, 1-bit 36.3 vs 33.6): halved to 1 tile per warp,
each activation fragment (8 tokens x 256-512 K values per 64-byte weight chunk) feeds 16 rows. This sweep keeps 2 or
4 tiles per warp (never halved), token-major or both token tiles per warp (mt 2), registers or a 3-stage ring.
ABBA order over two rounds, CUDA-graph medians, weights rotated beyond L2, every variant checked against float64
first (all tokens). Writes wo_lowbit16.json to $OUT.
"""
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, report, signed_operands, signed_variant  # noqa: E402
from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
r = dataclasses.replace
rows = []


def variants(bits, m, n, k):
    base = config.decode_tile(bits, m, n, SMS, k=k)
    flat = dict(token_major=False, mt=2)
    v = {"shipped": base, "nt4 tm": r(base, nt=4), "nt2 tm": r(base, nt=2),
         "nt4 mt2": r(base, nt=4, **flat), "nt2 mt2": r(base, nt=2, **flat),
         "nt4 mt2 ring3": r(base, nt=4, stages=3, swap_registers=False, **flat),
         "nt2 mt2 ring3": r(base, nt=2, stages=3, swap_registers=False, **flat)}
    return {name: t for name, t in v.items() if name == "shipped" or t != base}  # no duplicates of the shipped tile


for n, k in [(4096, 14336), (4096, 4096), (8192, 8192), (14336, 4096)]:
    for bits in (2, 1):
        ws, _ = signed_operands(n, k, bits, None)
        for m in (12, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            calls, errs, tiles = {}, {}, {}
            for name, tile in variants(bits, m, n, k).items():
                err, c = signed_variant(x, ws, None, bits, tile, f"int{bits} {n}x{k} M={m} {name}")
                if c is not None and err == err:
                    calls[name], errs[name], tiles[name] = c, err, tile.key
            us = abba_us(calls, {"bf16 matmul": [lambda: torch.matmul(x, w_bf.t())]})
            report(f"int{bits} N={n} K={k} M={m}", us, calls)
            rows.append({"bits": bits, "n": n, "k": k, "m": m, "us": us, "errs": errs, "tiles": tiles})
            json.dump(rows, open(os.path.join(OUT, "wo_lowbit16.json"), "w"), indent=1)
        del ws
