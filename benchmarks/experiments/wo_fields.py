"""Session 8: decode with fields left in place (``TileShape.fields_in_place``) against one shift per pair.

A pair's two fields may sit at any mantissa bit j when the fma that removes the magic also scales by 2^-j, so one
shifted copy of a 32-bit word serves several pairs: 1-bit 16 -> 2-3 shifts per word, 2-bit 7 -> 1-2, 4-bit in fp16
3 -> 1 (AWQ too); the 1-bit decode trades one of its two ALU ops per pair for an fma. The shipped tile of every
problem (decode path M <= 16, tensor-core path M = 64), both placements, ABBA order over two rounds, CUDA-graph
medians, weights rotated beyond L2, every variant checked against float64 first. Writes wo_fields.json to $OUT.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from wo_probe import SMS, abba_us, awq_operands, awq_variant, signed_operands, signed_variant  # noqa: E402
from dataclasses import replace  # noqa: E402

from cute_kernels.weight_only import config  # noqa: E402

OUT = os.environ.get("OUT", ".")
SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (4096, 4096)]
MS = [1, 8, 16, 64]
rows = []


def measure(label, make, tile, extra, **fields):
    calls, errs = {}, {}
    for name, flag in (("per_pair", False), ("in_place", True)):
        err, c = make(replace(tile, fields_in_place=flag), name)
        if c is not None and err == err:
            calls[name], errs[name] = c, err
    us = abba_us(calls, extra)
    gain = us["per_pair"] / us["in_place"] if len(calls) == 2 else float("nan")
    print(f"{label}: " + " ".join(f"[{n}] {u:.2f}" for n, u in us.items()) + f" | in_place {gain:.3f}x"
          f" (shipped: {'in_place' if tile.fields_in_place else 'per_pair'})", flush=True)
    rows.append({"label": label, "us": us, "errs": errs, "gain": gain, "shipped_in_place": tile.fields_in_place,
                 **fields})
    json.dump(rows, open(os.path.join(OUT, "wo_fields.json"), "w"), indent=1)


def run_signed(n, k):
    w_bf = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for bits, dtype in [(1, torch.bfloat16), (2, torch.bfloat16), (1, torch.float16), (2, torch.float16),
                        (4, torch.float16)]:
        ws, _ = signed_operands(n, k, bits, None)
        for m in MS:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            xb = x.bfloat16()
            _, tile = config.select_tile(bits, m, n, SMS, k=k)
            tag = f"int{bits} {str(dtype)[6:]} N={n} K={k} M={m}"
            measure(tag, lambda t, name: signed_variant(x, ws, None, bits, t, f"{tag} {name}"), tile,
                    {"bf16 matmul": [lambda: torch.matmul(xb, w_bf.t())]},
                    bits=bits, dtype=str(dtype), n=n, k=k, m=m, tile_key=tile.key)


def run_awq(n, k):
    sets, dense = awq_operands(n, k)
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        _, tile = config.select_tile(4, m, n, SMS, scaled=True, awq=True, k=k)
        tag = f"awq N={n} K={k} M={m}"
        measure(tag, lambda t, name: awq_variant(x, sets, t, f"{tag} {name}"), tile,
                {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]},
                bits="awq", dtype="torch.float16", n=n, k=k, m=m, tile_key=tile.key)


for n, k in SHAPES:
    run_signed(n, k)
    run_awq(n, k)
