"""Session 56: the WGMMA path's tile plans for AWQ at 9-16 tokens, re-measured on the H200.

``wgmma.select_config`` picks the 16-token plan (128 or 64 weight rows a CTA, CTAs per SM, K split, split tail) from
rules measured on an H100 (sessions 17-32). Each variant here replaces its answer for the layer by a fixed
``TileConfig`` (``wgmma.select_config`` patched for the duration of the variant's calls, which then reach every
helper that asks it: the split-K workspace, the cluster split, the stage options) and runs ``awq_gemm(path="wgmma")``;
``ship`` is the unpatched plan and ``auto`` awq_gemm as dispatched. Every variant is checked against a float64
reference on a NaN-poisoned output first, then timed like bench_awq.py (CUDA graphs of >= 16 calls over rotating
weight sets beyond L2, medians of interleaved rounds).

Variant names: ``ship``, ``auto``, or ``m<rows>c<ctas per SM>s<split>[t<split tail>]`` - e.g. ``m64c2s2``: 64-row
tiles, two CTAs per SM, K in two slices.

    python benchmarks/experiments/awq_wgmma16_56.py OUT_JSON [--layers 4096x4096,...] [--ms 16] [--variants ...]
"""

import argparse
import re
import statistics
from contextlib import contextmanager
from dataclasses import replace

import torch

from awq_ablate44 import _reference64, add_layer_args, torch_dtype, weight_sets, write_rows
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq_gemm, awq_repack, wgmma

CALLS = 16
_SHIPPED_SELECT = wgmma.select_config


def forced_config(v: str, m: int, n: int, k: int, sms: int):
    """The TileConfig variant ``v`` names for this layer, or None for the shipped plan."""
    if v in ("ship", "auto"):
        return None
    hit = re.fullmatch(r"m(\d+)c(\d+)s(\d+)(?:t(\d+))?", v)
    if hit is None:
        raise ValueError(f"variant {v!r}: expected ship, auto or m<rows>c<ctas>s<split>[t<tail>]")
    rows, ctas, split, tail = (int(g) if g else 1 for g in hit.groups())
    return replace(_SHIPPED_SELECT(m, n, k, sms), tile_m=rows, ctas_per_sm=ctas, split_k=split, split_tail=tail)


@contextmanager
def patched_select(cfg):
    """wgmma.select_config answering ``cfg`` for every query while the block runs (unchanged when cfg is None)."""
    if cfg is not None:
        wgmma.select_config = lambda *a, **kw: cfg
    try:
        yield
    finally:
        wgmma.select_config = _SHIPPED_SELECT


def main():
    ap = argparse.ArgumentParser()
    add_layer_args(ap, "4096x4096,14336x4096,4096x14336,8192x8192", "16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="ship,auto,m64c2s1,m64c2s2")
    args = ap.parse_args()
    dtype = torch_dtype(args.dtype)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    variants = args.variants.split(",")
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        sets = weight_sets(oc, ic, dtype, args.sets_mb)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            ref64 = _reference64(x, awq_repack.kernel_weights(*sets[0], 128))
            cfgs = {v: forced_config(v, m, oc, ic, sms) for v in variants}
            path = {v: None if v == "auto" else "wgmma" for v in variants}
            err = {}
            for v in variants:
                out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                with patched_select(cfgs[v]):
                    awq_gemm(x, *sets[0], out=out, path=path[v])
                e = ((out.double() - ref64).abs().max() / ref64.abs().max()).item()
                err[v] = f"{e:.1e}" if e < 2e-3 else f"WRONG {e:.1e}"
            t = {v: [] for v in variants}
            for _ in range(args.rounds):
                for v in variants:
                    with patched_select(cfgs[v]):
                        t[v].append(graph_time_us([lambda s=s, p=path[v]: awq_gemm(x, *s, path=p) for s in sets],
                                                  min_calls=CALLS)[0])
            med = {v: statistics.median(r) for v, r in t.items()}
            rows.append(dict(oc=oc, ic=ic, m=m, shipped=str(_SHIPPED_SELECT(m, oc, ic, sms)),
                             configs={v: str(c) for v, c in cfgs.items()}, err_vs_float64=err, rounds=t, median=med))
            print(f"{oc}x{ic} M={m} err {err} " + "  ".join(f"{v} {u:.2f}" for v, u in med.items()), flush=True)
        del sets
        awq_repack.clear_cache()
        wgmma.clear_cache()
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
