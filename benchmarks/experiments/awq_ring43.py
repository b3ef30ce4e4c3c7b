"""Session 43: AWQ's decode tiles at 1-8 tokens, the dispatch's tile against variants of it (the weight pipeline: the
register double buffer or a cp.async ring of 2-4 stages, preloaded before the PDL wait or not; the L2 prefetch; the
2-CTA cap; ...), all through awq_gemm (forced ``tile=``), beside the fp16 matmul. config.AWQ_SIDE_BY_SIDE_RING came
from these runs (data archive session43/).

First a float64 check of every variant on shapes whose warps' step counts leave remainders (IC = 4736, 7040; OC = 200
for the row tail), NaN-poisoned outputs. Then bench_awq.py's method: 240 MB of rotating weight sets, CUDA graphs of
>= 16 calls, medians of interleaved rounds.

    python benchmarks/experiments/awq_ring43.py OUT_JSON [--rounds N] [--variants ship,register,...] [--layers ...]

Variant "blob": awq_blob_linear on each set's blob (AwqLinear's "sm90_blob" layout) instead of awq_gemm.
"""

import argparse
import json
import statistics
from dataclasses import replace

import torch

from cute_kernels import arch
from cute_kernels.bench import graph_time_us
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config

CALLS = 16
VARIANTS = {  # overrides of the dispatch's decode tile
    "ship": {},
    "register": {"stages": 0, "preload_weights": False, "l2_prefetch_mb": 4},  # the register double buffer
    "swap": {"stages": 0, "preload_weights": False, "swap_registers": True},
    "nt2": {"nt": 2},
    "ring4": {"stages": 4, "preload_weights": True},
    "ring3": {"stages": 3, "preload_weights": True},
    "ring4_nopre": {"stages": 4, "preload_weights": False},
    "ring4_nopf": {"stages": 4, "preload_weights": True, "l2_prefetch_mb": 0},
    "r3n": {"stages": 3, "preload_weights": True, "l2_prefetch_mb": 0},
    "r3nc": {"stages": 3, "preload_weights": True, "l2_prefetch_mb": 0, "max_ctas_per_sm": 2},
    "r3c": {"stages": 3, "preload_weights": True, "max_ctas_per_sm": 2},
    "r2nc": {"stages": 2, "preload_weights": True, "l2_prefetch_mb": 0, "max_ctas_per_sm": 2},
    "nt2r3": {"nt": 2, "stages": 3, "preload_weights": True},
    "nt2r3n": {"nt": 2, "stages": 3, "preload_weights": True, "l2_prefetch_mb": 0},
    "nt2r5": {"nt": 2, "stages": 5, "preload_weights": True},
    "nt2r5n": {"nt": 2, "stages": 5, "preload_weights": True, "l2_prefetch_mb": 0},
    "ring4cap": {"stages": 4, "preload_weights": True, "max_ctas_per_sm": 2},
}


def _set(ic, oc, dtype):
    return (torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda"),
            (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).to(dtype),
            torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda"))


def _tile(m, oc, ic, variant):
    if variant not in VARIANTS:
        return None
    tile = config.decode_tile("awq", m, oc, arch.sm_count(0), scaled=True, k=ic)
    return replace(tile, **VARIANTS[variant]) if VARIANTS[variant] else None


_blobs = {}


def _call(x, s, variant, out=None):
    if variant == "blob":  # awq_blob_linear on the set's blob (AwqLinear's "sm90_blob" layout), built once
        from cute_kernels.weight_only import awq_blob, awq_blob_linear

        key = (s[0].data_ptr(), tuple(s[0].shape), s[0]._version)
        if key not in _blobs:  # built in the warm-up, outside the timed graph
            _blobs[key] = awq_blob(s[0])
        blob = _blobs[key]
        return awq_blob_linear(x, blob, s[1], s[2], out=out)
    tile = _tile(x.shape[0], s[1].shape[1], x.shape[1], variant)
    if tile is None:
        return awq_gemm(x, *s, out=out)
    return awq_gemm(x, *s, out=out, path="decode", tile=tile)


def check(variants):
    worst = {}
    for ic, oc in ((4736, 200), (7040, 200), (4096, 4096), (7040, 1024)):
        for dtype in (torch.float16, torch.bfloat16):
            s = _set(ic, oc, dtype)
            for m in (1, 3, 4, 8):
                x = torch.randn(m, ic, device="cuda", dtype=dtype)
                ref = awq_gemm_ref(x.cpu(), *(t.cpu() for t in s))
                for v in variants:
                    out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                    _call(x, s, v, out)
                    err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    if not err < (2e-3 if dtype == torch.float16 else 1e-2):  # test_awq_gpu.py's tolerances
                        print(f"WRONG {v} ic={ic} oc={oc} m={m} {dtype}: {err}", flush=True)
                    worst[v] = max(worst.get(v, 0.0), err if err == err else float("inf"))
            _blobs.clear()
    print("check: worst error / max|ref| per variant", {k: f"{v:.1e}" for k, v in worst.items()}, flush=True)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="ship,register")
    ap.add_argument("--layers", default="4096x4096,14336x4096,4096x14336,8192x8192")
    ap.add_argument("--ms", default="1,4")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sets-mb", type=float, default=240.0)
    args = ap.parse_args()
    variants = args.variants.split(",")
    worst = check(variants)
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        for dname in args.dtypes.split(","):
            dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
            n = min(16, max(2, -(-int(args.sets_mb * 2**20) // (ic * oc // 2))))
            sets = [_set(ic, oc, dtype) for _ in range(n)]
            dense = [awq_dequantize(*s) for s in sets[:max(2, -(-int(args.sets_mb * 2**20) // (ic * oc * 2)))]]
            for m in map(int, args.ms.split(",")):
                x = torch.randn(m, ic, device="cuda", dtype=dtype)
                t = {v: [] for v in variants + ["fp16"]}
                for _ in range(args.rounds):
                    for v in variants:
                        t[v].append(graph_time_us([lambda s=s, v=v: _call(x, s, v) for s in sets],
                                                  min_calls=CALLS)[0])
                    t["fp16"].append(graph_time_us([lambda w=w: torch.matmul(x, w) for w in dense],
                                                   min_calls=CALLS)[0])
                med = {k: statistics.median(v) for k, v in t.items()}
                tiles = {v: str(_tile(m, oc, ic, v) or config.decode_tile("awq", m, oc, arch.sm_count(0), scaled=True,
                                                                          k=ic)) for v in variants}
                rows.append(dict(oc=oc, ic=ic, m=m, dtype=dname, sets=n, rounds=t, median=med, tiles=tiles))
                line = "  ".join(f"{v} {med[v]:6.2f} ({med['fp16'] / med[v]:.2f}x)" for v in variants)
                print(f"{oc:5d}x{ic:<5d} M={m} {dname}  fp16 {med['fp16']:6.2f}  {line}", flush=True)
            del sets, dense
            _blobs.clear()
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), worst=worst, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
