"""Session 7: activations staged in the cp.async ring with the weights (``TileShape.x_ring``) against the shipped
decode plans.

Why: in the M = 16 plans each step loads its x runs (16 tokens x 128 K values = 4 KB per warp, twice the step's
weight bytes) from L2 at the top of the step that uses them (SASS: 8 LDG.128 right before the MMAs), with only
16 warps per SM to hide the latency; ``x_ahead`` (registers) was measured slower at M = 16 (register pressure).
``x_ring`` puts them in a second thread-private ring, ``stages - 1`` steps ahead, and loads the group parameters one
step ahead in registers.

For every problem: the shipped tile and x_ring with 2, 3 and 4 stages (those that fit a CTA's shared memory), ABBA
order over two rounds (CUDA-graph medians, weights rotated beyond L2), every variant checked against float64 first.
AWQ (fp16 x, group 128) on the four layers of issue #5 and the signed formats (bf16 x) on two layers.
Writes wo_x_ring.json to $OUT; prints one line per problem.

Dropped (slower nearly everywhere, docs/weight_only.md session 7): the kernel variant is not in the tree. To rerun,
apply it first: ``git apply benchmarks/experiments/patches/wo_x_ring.patch`` (written against commit 1350df0).
The recorded run covered the AWQ rows and int4 at 8192^2; the other signed rows stopped at a bug in this script
(a bf16 reference scale), fixed after the run.
"""
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


def variants(fmt, m, n, scaled=False):
    v = {"shipped": config.decode_tile(fmt, m, n, SMS, scaled=scaled)}
    for st in (2, 3, 4):
        v[f"xr{st}"] = config.decode_tile(fmt, m, n, SMS, scaled=scaled, ring=True, x_ring=True, stages=st,
                                          x_ahead=False)
    return v


def time_variants(label, calls, errs, extra=None):
    names = list(calls)
    reps = {name: [] for name in names}
    for _ in range(2):
        for name in names + names[::-1]:
            reps[name].append(bwo.graph_time_us(calls[name])[0])
    if extra:
        for name, c in extra.items():
            reps[name] = [bwo.graph_time_us(c)[0] for _ in range(2)]
    us = {name: statistics.median(ts) for name, ts in reps.items()}
    best = min((u, n) for n, u in us.items() if n in names)
    print(f"{label}: " + " ".join(f"{n} {u:.2f}" for n, u in us.items())
          + f" | best {best[1]} ({us['shipped'] / best[0]:.2f}x shipped)", flush=True)
    return {"label": label, "us": us, "errs": errs}


def dump():
    json.dump(rows, open(os.path.join(OUT, "wo_x_ring.json"), "w"), indent=1)


# ---------------------------------------------------------------- AWQ
for oc, ic in [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)]:
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(ic * oc // 2, 16))]
    dense = [awq_dequantize(*z) for z in sets[:2]]
    for m in (1, 8, 16):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        calls, errs = {}, {}
        for name, tile in variants("awq", m, oc).items():
            try:
                errs[name] = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0], rows=16)
            except Exception as exc:  # noqa: BLE001 - a variant that does not fit is skipped
                print(f"  awq {oc}x{ic} M={m} {name}: skipped ({type(exc).__name__}: {str(exc)[:120]})")
                continue
            calls[name] = [lambda z=z, tile=tile: awq_gemm(x, *z, tile=tile) for z in sets]
        fp16 = {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]}
        row = time_variants(f"awq OC={oc} IC={ic} M={m}", calls, errs, fp16)
        row.update(fmt="awq", n=oc, k=ic, m=m)
        rows.append(row)
        dump()
    del sets, dense

# ---------------------------------------------------------------- signed formats, bf16 x
for n, k in [(8192, 8192), (4096, 14336)]:
    for bits, group in [(4, None), (4, 128), (8, None)]:
        per_set = n * k * bits // 8
        ws = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
              for _ in range(bwo.n_sets(per_set, 16))]
        gs = None if group is None else (torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
        for m in (1, 8, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs = {}, {}
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
                    print(f"  int{bits} {n}x{k} M={m} {name}: skipped ({type(exc).__name__}: {str(exc)[:120]})")
                    continue
                calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, gs, tile=tile) for w in ws]
            g = "" if group is None else f" g{group}"
            row = time_variants(f"int{bits}{g} N={n} K={k} M={m}", calls, errs)
            row.update(fmt=f"int{bits}{g}", n=n, k=k, m=m)
            rows.append(row)
            dump()
        del ws
