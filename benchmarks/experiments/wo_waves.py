"""Session 7, second sweep (after wo_cta_shape.py): how many waves the decode grid should have.

wo_cta_shape.py found (H200): (a) on grids of several waves (AWQ at OC = 14336, IC = 4096: 896 CTAs of 16 rows,
~3.4 waves at 2 CTAs per SM) putting 2-4 warps side by side along N (same per-warp tile, each warp 2-4x more K
steps, a quarter of the CTAs) is 1.11-1.17x faster at every M, while on one-wave grids it is slower (fewer CTAs than
slots); (b) at 9-16 tokens, fatter warps (more 16-row tiles per warp: each activation fragment feeds more rows) win
on some layers even with half the SMs idle (int4, N = 4096, K = 14336: 64 CTAs of 64 rows 23.4 us vs 29.9 shipped).

This sweep times, for the decode path: warps_n in {1, 2, 4} (warps_k = 8 / warps_n) for the shipped per-warp tiles,
and at M = 16 the row count per warp (nt 1, 2, 4; ring and registers). ABBA order over two rounds (CUDA-graph medians,
weights rotated beyond L2), every variant checked against float64 first (all tokens). Writes wo_waves.json to $OUT.
"""
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config, quantized_mm  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
OUT = os.environ.get("OUT", ".")
rows = []
r = dataclasses.replace


def variants(fmt, m, n, scaled=False):
    base = config.decode_tile(fmt, m, n, SMS, scaled=scaled)
    v = {"shipped": base}
    for wn in (1, 2, 4):
        if wn != base.warps_n:
            v[f"wn{wn}"] = r(base, warps_n=wn, warps_k=8 // wn)
    if m > 8:
        for nt in (1, 2, 4):
            for st in (0, 3):
                t = r(base, nt=nt, stages=st, swap_registers=False)
                if t != base:
                    v[f"nt{nt} {'ring3' if st else 'regs'}"] = t
    return v


def time_variants(label, calls, errs, extra=None):
    names = list(calls)
    reps = {name: [] for name in names}
    for _ in range(2):
        for name in names + names[::-1]:
            reps[name].append(bwo.graph_time_us(calls[name])[0])
    for name, c in (extra or {}).items():
        reps[name] = [bwo.graph_time_us(c)[0] for _ in range(2)]
    us = {name: statistics.median(ts) for name, ts in reps.items()}
    best = min((u, n) for n, u in us.items() if n in names)
    print(f"{label}: " + " ".join(f"[{n}] {u:.2f}" for n, u in us.items())
          + f" | best {best[1]} ({us['shipped'] / best[0]:.2f}x shipped)", flush=True)
    return {"label": label, "us": us, "errs": errs}


def dump():
    json.dump(rows, open(os.path.join(OUT, "wo_waves.json"), "w"), indent=1)


for oc, ic in [(14336, 4096), (28672, 4096), (11008, 4096), (8192, 8192), (28672, 8192), (4096, 4096)]:
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(ic * oc // 2, 16))]
    dense = [awq_dequantize(*z) for z in sets[:2]]
    for m in (1, 4, 16):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        calls, errs, tiles = {}, {}, {}
        for name, tile in variants("awq", m, oc).items():
            try:
                errs[name] = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0], rows=16)
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile or fit is skipped
                print(f"  awq {oc}x{ic} M={m} {name}: skipped ({type(exc).__name__}: {str(exc)[:160]})")
                continue
            calls[name] = [lambda z=z, tile=tile: awq_gemm(x, *z, tile=tile) for z in sets]
            tiles[name] = tile.key
        fp16 = {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]}
        row = time_variants(f"awq OC={oc} IC={ic} M={m}", calls, errs, fp16)
        row.update(fmt="awq", n=oc, k=ic, m=m, tiles=tiles)
        rows.append(row)
        dump()
    del sets, dense

for n, k in [(4096, 14336), (14336, 4096), (8192, 8192), (4096, 4096)]:
    for bits, group in [(4, None), (4, 128), (8, None)]:
        per_set = n * k * bits // 8
        ws = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
              for _ in range(bwo.n_sets(per_set, 16))]
        gs = None if group is None else (torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
        for m in (1, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs, tiles = {}, {}, {}
            for name, tile in variants(bits, m, n, scaled=gs is not None).items():
                try:
                    out = quantized_mm(x, ws[0], 0.01, bits, gs, tile=tile)
                    ref = quantized_mm_ref(x[:16].cpu(), ws[0][:256].cpu(), 0.01, bits,
                                           None if gs is None else gs[:256].float().cpu())
                    err = ((out[:16, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    if not err < 1e-2 or bool(out.isnan().any()):
                        print(f"  WRONG RESULT int{bits} {n}x{k} M={m} {name}: {err:.3e}")
                        err = float("nan")
                    errs[name] = err
                except Exception as exc:  # noqa: BLE001
                    print(f"  int{bits} {n}x{k} M={m} {name}: skipped ({type(exc).__name__}: {str(exc)[:160]})")
                    continue
                calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, gs, tile=tile) for w in ws]
                tiles[name] = tile.key
            g = "" if group is None else f" g{group}"
            row = time_variants(f"int{bits}{g} N={n} K={k} M={m}", calls, errs)
            row.update(fmt=f"int{bits}{g}", n=n, k=k, m=m, tiles=tiles)
            rows.append(row)
            dump()
        del ws
