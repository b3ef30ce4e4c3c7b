"""Session 23: the decode path's rolling L2 prefetch (``TileShape.l2_ahead``) - each warp asks L2 for its own weight
rows a fixed number of its K steps ahead of the step it decodes, the variant session 9 named and left untried.

Why: on an H200 the AWQ decode kernels at 1-4 tokens read their weights at ~2.1-2.4 TB/s, about what they read on
an H100 (session 21), while fp16 torch.matmul reads ~20% faster there than on the H100. A stream that does not
speed up with the memory is bound by how many bytes it keeps in flight: each warp of the register pipeline keeps
one K step (1 KB per 16-row tile) ahead, and each of those loads holds a request slot of the SM until its data
returns. A prefetch to L2 holds nothing, so the loads that follow it wait for L2, not DRAM.

Variants of the shipped decode tile (``config.decode_tile``): l2_ahead in ``WO_AHEAD`` (default 2,4,8) own K steps;
AWQ (fp16 x, group 128) at ``WO_AWQ_MS`` tokens, the signed formats (bf16 x, no group scales) ``WO_BITS`` at
``WO_SIGNED_MS`` tokens, on the four layers of the issues. ABBA, CUDA-graph medians, weights rotated beyond L2, every
variant float64-checked first (wo_probe). Writes wo_l2_ahead.json to $OUT.
Not shipped (slower on 17 of 20 points, see docs/weight_only.md, session 23): the knob lives in
patches/wo_l2_ahead.patch. Run from the project root after `git apply benchmarks/experiments/patches/wo_l2_ahead.patch`:
python benchmarks/experiments/wo_l2_ahead.py
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, awq_operands, awq_variant, report, signed_operands, signed_variant  # noqa: E402

from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
AHEAD = [int(v) for v in os.environ.get("WO_AHEAD", "2,4,8").split(",")]
AWQ_MS = [int(v) for v in os.environ.get("WO_AWQ_MS", "1,4").split(",") if v]
SIGNED_MS = [int(v) for v in os.environ.get("WO_SIGNED_MS", "1").split(",") if v]
BITS = [int(v) for v in os.environ.get("WO_BITS", "4,2,1").split(",") if v]
LAYERS = [(8192, 8192), (14336, 4096), (4096, 14336), (4096, 4096)]
rows = []


def save():
    json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), open(os.path.join(OUT, "wo_l2_ahead.json"), "w"),
              indent=1)


def tiles_of(tile):
    return {"shipped": tile, **{f"a{a}": replace(tile, l2_ahead=a) for a in AHEAD}}


for n, k in LAYERS:
    if AWQ_MS:
        sets, dense = awq_operands(n, k)
        for m in AWQ_MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            _, tile = config.select_tile(4, m, n, SMS, scaled=True, awq=True, k=k, path="decode")
            calls, errs = {}, {}
            for name, t in tiles_of(tile).items():
                err, c = awq_variant(x, sets, t, f"awq {n}x{k} M={m} {name}")
                if c is not None:
                    calls[name], errs[name] = c, err
            us = abba_us(calls, {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]})
            label = f"awq OC={n} IC={k} M={m}"
            report(label, us, calls)
            rows.append(dict(label=label, fmt="awq", n=n, k=k, m=m, tile=str(tile), us=us, errs=errs))
            save()
        del sets, dense
    for bits in BITS:
        ws, gs = signed_operands(n, k, bits, None)
        w_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for m in SIGNED_MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            _, tile = config.select_tile(bits, m, n, SMS, k=k, path="decode")
            calls, errs = {}, {}
            for name, t in tiles_of(tile).items():
                err, c = signed_variant(x, ws, gs, bits, t, f"int{bits} {n}x{k} M={m} {name}")
                if c is not None and err == err:
                    calls[name], errs[name] = c, err
            us = abba_us(calls, {"bf16 matmul": [lambda: torch.matmul(x, w_bf.t())]})
            label = f"int{bits} N={n} K={k} M={m}"
            report(label, us, calls)
            rows.append(dict(label=label, fmt=f"int{bits}", n=n, k=k, m=m, tile=str(tile), us=us, errs=errs))
            save()
        del ws, w_bf
