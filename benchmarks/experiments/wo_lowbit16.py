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
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_weight_only as bwo  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import config, quantized_mm  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
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
    out = {}
    for name, t in v.items():  # drop duplicates of the shipped tile
        if name == "shipped" or t != base:
            out[name] = t
    return out


for n, k in [(4096, 14336), (4096, 4096), (8192, 8192), (14336, 4096)]:
    for bits in (2, 1):
        per_set = n * k * bits // 8
        ws = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
              for _ in range(bwo.n_sets(per_set, 16))]
        for m in (12, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w_bf = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16),)
            calls, errs, tiles = {}, {}, {}
            for name, tile in variants(bits, m, n, k).items():
                out = quantized_mm(x, ws[0], 0.01, bits, tile=tile)
                ref = quantized_mm_ref(x.cpu(), ws[0][:256].cpu(), 0.01, bits)
                err = ((out[:, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
                if not err < 1e-2 or bool(out.isnan().any()):
                    print(f"  WRONG RESULT int{bits} {n}x{k} M={m} {name}: {err:.3e}")
                    continue
                errs[name], tiles[name] = err, tile.key
                calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, tile=tile) for w in ws]
            names = list(calls)
            reps = {name: [] for name in names}
            for _ in range(2):
                for name in names + names[::-1]:
                    reps[name].append(bwo.graph_time_us(calls[name])[0])
            reps["bf16 matmul"] = [bwo.graph_time_us([lambda: torch.matmul(x, w_bf[0].t())])[0] for _ in range(2)]
            us = {name: statistics.median(ts) for name, ts in reps.items()}
            best = min((u, nm) for nm, u in us.items() if nm in names)
            print(f"int{bits} N={n} K={k} M={m}: " + " ".join(f"[{nm}] {u:.2f}" for nm, u in us.items())
                  + f" | best {best[1]} ({us['shipped'] / best[0]:.2f}x shipped)", flush=True)
            rows.append({"bits": bits, "n": n, "k": k, "m": m, "us": us, "errs": errs, "tiles": tiles})
            json.dump(rows, open(os.path.join(OUT, "wo_lowbit16.json"), "w"), indent=1)
        del ws
