"""Session 7: the new decode dispatch (9-16-token plans of 4/8-bit and AWQ; side-by-side warps on multi-wave grids,
``config.side_by_side_warps``) against the session-6 dispatch, on the layers it was tuned on and on others
(Llama-2-13B 13824 x 5120 / 5120 x 13824, 11008 x 4096, 6144 x 4096, 28672 x 4096 / 8192).

The session-6 tiles come from data/wo_session6_tiles.json (written by running the session-6 ``config.decode_tile``
on these problems). Each problem whose tile changed: old and new timed in ABBA order over two rounds (CUDA-graph
medians, weights rotated beyond L2), both checked against float64 first (all tokens); AWQ rows also time fp16
torch.matmul on the dequantized weight. Writes wo_dispatch7.json to $OUT.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, awq_operands, awq_variant, signed_operands, signed_variant  # noqa: E402
from cute_kernels.weight_only import config  # noqa: E402
from cute_kernels.weight_only.kernel import TileShape  # noqa: E402

OUT = os.environ.get("OUT", ".")
DATA = json.load(open(os.path.join(os.path.dirname(__file__), "data", "wo_session6_tiles.json")))
OLD = {k: TileShape(**v) for k, v in DATA["old_tiles"].items()}
rows = []


def record(label, calls, errs, extra=None, **fields):
    us = abba_us(calls, extra)
    tail = f" fp16 {us['fp16 matmul']:.2f} -> {us['fp16 matmul'] / us['new']:.2f}x" if extra else ""
    print(f"{label}: old {us['old']:.2f} new {us['new']:.2f} ({us['old'] / us['new']:.2f}x){tail}", flush=True)
    rows.append({"label": label, "us": us, "errs": errs, **fields})
    json.dump(rows, open(os.path.join(OUT, "wo_dispatch7.json"), "w"), indent=1)


for oc, ic in DATA["awq_shapes"]:
    sets = None
    for m in (1, 4, 8, 12, 16):
        old, new = OLD[f"awq {oc} {ic} {m}"], config.decode_tile("awq", m, oc, SMS, k=ic)
        if old == new:
            continue
        if sets is None:
            sets, dense = awq_operands(oc, ic)
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        calls, errs = {}, {}
        for name, tile in (("old", old), ("new", new)):
            errs[name], calls[name] = awq_variant(x, sets, tile, f"awq {oc}x{ic} M={m} {name}")
        record(f"awq OC={oc} IC={ic} M={m} {old.key} -> {new.key}", calls, errs,
               {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]},
               fmt="awq", n=oc, k=ic, m=m, old=old.key, new=new.key)
    del sets

for n, k in DATA["int_shapes"]:
    for fmt, bits, group in (("int4", 4, None), ("int4 g128", 4, 128), ("int8", 8, None)):
        ws = None
        for m in (1, 8, 16):
            old = OLD[f"{fmt} {n} {k} {m}"]
            new = config.decode_tile(bits, m, n, SMS, scaled=group is not None, k=k)
            if old == new:
                continue
            if ws is None:
                ws, gs = signed_operands(n, k, bits, group)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs = {}, {}
            for name, tile in (("old", old), ("new", new)):
                errs[name], calls[name] = signed_variant(x, ws, gs, bits, tile, f"{fmt} {n}x{k} M={m} {name}")
            record(f"{fmt} N={n} K={k} M={m} {old.key} -> {new.key}", calls, errs,
                   fmt=fmt, n=n, k=k, m=m, old=old.key, new=new.key)
        del ws
