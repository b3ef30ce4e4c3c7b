"""Shared pieces of the session-7 weight-only experiments (wo_x_ring, wo_cta_shape, wo_waves, wo_dispatch7,
wo_lowbit16): operands, the float64 check of one variant, ABBA timing.

Timing: every variant's calls (one per weight set, sets rotated beyond L2) form one CUDA graph
(``bench_weight_only.graph_time_us``); variants are timed in the order A B ... B A, twice, and the median of each
variant's four graph medians is kept. Baselines (``extra``) are timed twice after them.
"""
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import awq_dequantize, awq_gemm, quantized_mm  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def abba_us(calls: dict, extra: dict | None = None, rounds: int = 2) -> dict:
    """{name: median µs} for {name: [callables]}."""
    names = list(calls)
    reps = {name: [] for name in names}
    for _ in range(rounds):
        for name in names + names[::-1]:
            reps[name].append(bwo.graph_time_us(calls[name])[0])
    for name, c in (extra or {}).items():
        reps[name] = [bwo.graph_time_us(c)[0] for _ in range(2)]
    return {name: statistics.median(ts) for name, ts in reps.items()}


def report(label: str, us: dict, variants) -> None:
    best = min((u, n) for n, u in us.items() if n in variants)
    print(f"{label}: " + " ".join(f"[{n}] {u:.2f}" for n, u in us.items())
          + f" | best {best[1]} ({us['shipped'] / best[0]:.2f}x shipped)", flush=True)


def awq_operands(oc: int, ic: int):
    """Weight sets for rotation and two dequantized fp16 copies (the fp16 torch.matmul baseline)."""
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(ic * oc // 2, 16))]
    return sets, [awq_dequantize(*z) for z in sets[:2]]


def signed_operands(n: int, k: int, bits: int, group):
    per_set = n * k * bits // 8
    ws = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
          for _ in range(bwo.n_sets(per_set, 16))]
    gs = None if group is None else (torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
    return ws, gs


def awq_variant(x, sets, tile, label: str):
    """(error, calls) of awq_gemm with ``tile``, checked on all tokens and the first 256 output channels; (None,
    None) when the variant does not build or fit."""
    try:
        err = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0], rows=16)
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile or fit is skipped
        print(f"  {label}: skipped ({type(exc).__name__}: {str(exc)[:160]})")
        return None, None
    return err, [lambda z=z: awq_gemm(x, *z, tile=tile) for z in sets]


def signed_variant(x, ws, gs, bits: int, tile, label: str):
    """(error, calls) of quantized_mm (scale 0.01, optional group scales) with ``tile``, checked on all tokens and
    the first 256 rows; a wrong result is reported and its error is NaN; (None, None) when it does not build."""
    try:
        out = quantized_mm(x, ws[0], 0.01, bits, gs, tile=tile)
        ref = quantized_mm_ref(x[:16].cpu(), ws[0][:256].cpu(), 0.01, bits,
                               None if gs is None else gs[:256].float().cpu())
        err = ((out[:16, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        if not err < 1e-2 or bool(out.isnan().any()):
            print(f"  WRONG RESULT {label}: {err:.3e}")
            err = float("nan")
    except Exception as exc:  # noqa: BLE001
        print(f"  {label}: skipped ({type(exc).__name__}: {str(exc)[:160]})")
        return None, None
    return err, [lambda w=w: quantized_mm(x, w, 0.01, bits, gs, tile=tile) for w in ws]


def sweep(name: str, variants, awq_shapes, awq_ms, signed_shapes, signed_ms, out_dir: str) -> list:
    """Time ``variants(fmt, m, n, k, scaled=...)`` ({label: TileShape}, one labelled "shipped") on AWQ (fp16 x, group
    128: ``awq_shapes`` (OC, IC) x ``awq_ms``, with fp16 torch.matmul) and on int4 / int4 with group-128 scales / int8
    (bf16 x: ``signed_shapes`` (N, K) x ``signed_ms``); writes ``<name>.json`` to ``out_dir`` after every problem."""
    import json
    import os

    rows = []

    def add(label, calls, errs, tiles, extra=None, **fields):
        us = abba_us(calls, extra)
        report(label, us, calls)
        rows.append({"label": label, "us": us, "errs": errs, "tiles": tiles, **fields})
        json.dump(rows, open(os.path.join(out_dir, f"{name}.json"), "w"), indent=1)

    for oc, ic in awq_shapes:
        sets, dense = awq_operands(oc, ic)
        for m in awq_ms:
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            calls, errs, tiles = {}, {}, {}
            for label, tile in variants("awq", m, oc, ic).items():
                err, c = awq_variant(x, sets, tile, f"awq {oc}x{ic} M={m} {label}")
                if c is not None:
                    calls[label], errs[label], tiles[label] = c, err, tile.key
            add(f"awq OC={oc} IC={ic} M={m}", calls, errs, tiles,
                {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]}, fmt="awq", n=oc, k=ic, m=m)
        del sets, dense
    for n, k in signed_shapes:
        for bits, group in [(4, None), (4, 128), (8, None)]:
            ws, gs = signed_operands(n, k, bits, group)
            g = "" if group is None else f" g{group}"
            for m in signed_ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                calls, errs, tiles = {}, {}, {}
                for label, tile in variants(bits, m, n, k, scaled=gs is not None).items():
                    err, c = signed_variant(x, ws, gs, bits, tile, f"int{bits}{g} {n}x{k} M={m} {label}")
                    if c is not None:
                        calls[label], errs[label], tiles[label] = c, err, tile.key
                add(f"int{bits}{g} N={n} K={k} M={m}", calls, errs, tiles, fmt=f"int{bits}{g}", n=n, k=k, m=m)
            del ws
    return rows
