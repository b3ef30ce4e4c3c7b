"""Session 10: confirmation run of the decode path's L2 prefetch rule (``config.DECODE_L2_PREFETCH_MB`` for the 2- and
4-bit formats on layers with N >= K): the shipped tile against the same tile with ``l2_prefetch_mb = 0``.

ABBA, CUDA-graph medians, weight copies rotated beyond L2, every variant checked against float64 first
(wo_probe.signed_variant); bf16 x. Writes wo_prefetch_rule.json to $OUT.
Run from the project root: python benchmarks/experiments/wo_prefetch_rule.py
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, signed_operands, signed_variant  # noqa: E402

from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
rows = []
for n, k in ((8192, 8192), (14336, 4096), (4096, 4096), (4096, 14336)):
    w_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for bits, group in ((4, None), (4, 128), (2, None)):
        ws, gs = signed_operands(n, k, bits, group)
        for m in (1, 8, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            _, tile = config.select_tile(bits, m, n, SMS, scaled=group is not None, k=k)
            label = f"int{bits}{'' if group is None else ' g128'} N={n} K={k} M={m}"
            calls = {}
            for name, t in (("shipped", tile), ("off", replace(tile, l2_prefetch_mb=0))):
                err, c = signed_variant(x, ws, gs, bits, t, f"{label} {name}")
                if c is not None and err == err:
                    calls[name] = c
            if tile.l2_prefetch_mb == 0:
                calls.pop("off", None)  # the same tile: nothing to compare
            us = abba_us(calls, {"bf16 matmul": [lambda: torch.matmul(x, w_bf.t())]})
            print(f"{label} prefetch {tile.l2_prefetch_mb} MB: " + " ".join(f"[{a}] {u:.2f}" for a, u in us.items()),
                  flush=True)
            rows.append({"label": label, "prefetch_mb": tile.l2_prefetch_mb, "us": us})
        ws = gs = None
json.dump(rows, open(os.path.join(OUT, "wo_prefetch_rule.json"), "w"), indent=1)
