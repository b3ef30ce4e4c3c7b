"""Session 10: the decode path's L2 prefetch (``TileShape.l2_prefetch_mb = 4``) for AWQ, which the shipped rule
leaves off: the shipped tile against the same tile with the prefetch, M in {1, 4, 8, 16}, fp16 x, group 128, with
fp16 torch.matmul on the dequantized weight. ABBA, CUDA-graph medians, weight sets rotated beyond L2, every variant
checked against float64 first (wo_probe.awq_variant). Writes awq_prefetch_rule.json to $OUT.
Run from the project root: python benchmarks/experiments/awq_prefetch_rule.py
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, awq_operands, awq_variant  # noqa: E402

from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
rows = []
for oc, ic in ((8192, 8192), (14336, 4096), (4096, 4096), (4096, 14336)):
    sets, deq = awq_operands(oc, ic)
    for m in (1, 4, 8, 16):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        _, tile = config.select_tile(4, m, oc, SMS, scaled=True, awq=True, k=ic)
        label = f"awq OC={oc} IC={ic} M={m}"
        calls = {}
        for name, t in (("shipped", tile), ("prefetch", replace(tile, l2_prefetch_mb=config.DECODE_L2_PREFETCH_MB))):
            err, c = awq_variant(x, sets, t, f"{label} {name}")
            if c is not None and err == err:
                calls[name] = c
        us = abba_us(calls, {"fp16 matmul": [lambda w=w: torch.matmul(x, w) for w in deq]})
        print(f"{label}: " + " ".join(f"[{a}] {u:.2f}" for a, u in us.items()), flush=True)
        rows.append({"label": label, "us": us, "shipped_prefetch_mb": tile.l2_prefetch_mb})
    sets = deq = None
json.dump(rows, open(os.path.join(OUT, "awq_prefetch_rule.json"), "w"), indent=1)
