"""Session 9: bulk L2 prefetch of each CTA's weight rows at kernel start (``TileShape.l2_prefetch_mb``).

The decode kernels at M = 1 are bound by the latency of each warp's short chain of dependent weight loads, not by
DRAM bandwidth (ncu, session 5). Here every CTA first issues one ``cp.async.bulk.prefetch.L2`` per weight row
(before waiting for the previous grid: L2 is coherent), so the whole weight stream is requested at once and the
warps' loads then find their bytes in L2. Budgets of 16 and 32 MB over the whole weight (the leading bytes of each
row beyond that) against the shipped tile; ABBA, CUDA-graph medians, weights rotated beyond L2, each variant
checked against float64 first (wo_probe). Writes wo_l2_prefetch.json to $OUT.
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, signed_operands, signed_variant, sweep  # noqa: E402

from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (4096, 4096)]
BUDGETS = tuple(int(v) for v in os.environ.get("WO_L2_BUDGETS", "16,32").split(","))  # MB; session 10 ran 1,2,4


def variants(fmt, m, n, k, scaled=False):
    awq = fmt == "awq"
    _, tile = config.select_tile(4 if awq else fmt, m, n, SMS, scaled=scaled, awq=awq, k=k)
    return {"shipped": tile, **{f"l2_{mb}": replace(tile, l2_prefetch_mb=mb) for mb in BUDGETS}}


rows = sweep("wo_l2_prefetch", variants, SHAPES, [1, 4, 16], SHAPES, [1, 16], OUT)
for n, k in SHAPES:
    w_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for bits in (2, 1):
        ws, _ = signed_operands(n, k, bits, None)
        for m in (1, 8):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs = {}, {}
            for label, tile in variants(bits, m, n, k).items():
                err, c = signed_variant(x, ws, None, bits, tile, f"int{bits} {n}x{k} M={m} {label}")
                if c is not None:
                    calls[label], errs[label] = c, err
            us = abba_us(calls, {"bf16 matmul": [lambda: torch.matmul(x, w_bf.t())]})
            print(f"int{bits} N={n} K={k} M={m}: " + " ".join(f"[{a}] {u:.2f}" for a, u in us.items()), flush=True)
            rows.append({"label": f"int{bits} N={n} K={k} M={m}", "us": us, "errs": errs, "fmt": f"int{bits}",
                         "n": n, "k": k, "m": m})
            json.dump(rows, open(os.path.join(OUT, "wo_l2_prefetch.json"), "w"), indent=1)
        ws = None
