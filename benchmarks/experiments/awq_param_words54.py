"""Session 54: awq_gemm with and without the parameter words (config.AWQ_PARAM_WORDS_WARPS_N vs None: before, fp16's
one-warp tiles ran awq_fma and the awq_zmma tiles read the scales and zero points), as dispatched (path None), in
the same run: CUDA graphs of >= 16 calls over 240 MB of rotating weight sets (awq_ablate44.weight_sets), medians
of interleaved rounds, float64-checked on poisoned outputs.

    python benchmarks/experiments/awq_param_words54.py OUT_JSON [--layers 4096x4096,...] [--ms 1,4] [--dtype fp16]
        [--before wide]

Session 55: ``--before wide`` runs "before" with config.AWQ_PARAM_WORDS_WIDE_TILES = () instead (the side-by-side
ring and one-CTA-per-SM tiles without the words, as in session 54; the capped tiles keep theirs). Session 56:
``--before side_one_cta`` runs "before" with config.AWQ_SIDE_BY_SIDE_ONE_CTA = None (the side-by-side word tile in
two-CTA slots, as in session 55).
"""

import argparse
import json
import statistics

import torch

from awq_ablate44 import CALLS, _reference64, add_layer_args, torch_dtype, weight_sets
from cute_kernels import awq_gemm
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq as awq_mod, awq_repack, config

SHIPPED = (config.AWQ_PARAM_WORDS_WARPS_N, config.AWQ_PARAM_WORDS_WIDE_TILES, config.AWQ_SIDE_BY_SIDE_ONE_CTA)
SETTINGS = {"words": SHIPPED, "before": (None, (), config.AWQ_SIDE_BY_SIDE_ONE_CTA)}


def use(name):
    (config.AWQ_PARAM_WORDS_WARPS_N, config.AWQ_PARAM_WORDS_WIDE_TILES,
     config.AWQ_SIDE_BY_SIDE_ONE_CTA) = SETTINGS[name]
    awq_mod._plans.clear()


def main():
    ap = argparse.ArgumentParser()
    add_layer_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", default="all", choices=("all", "wide", "side_one_cta"),
                    help="all: no words at all (session 54); wide: no words on the session 55 tiles; side_one_cta: "
                    "the side-by-side word tile in two-CTA slots (session 55)")
    args = ap.parse_args()
    if args.before == "wide":
        SETTINGS["before"] = (config.AWQ_PARAM_WORDS_WARPS_N, (), config.AWQ_SIDE_BY_SIDE_ONE_CTA)
    elif args.before == "side_one_cta":
        SETTINGS["before"] = SHIPPED[:2] + (None,)
    dtype = torch_dtype(args.dtype)
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        sets = weight_sets(oc, ic, dtype, args.sets_mb)
        kw = awq_repack.kernel_weights(*sets[0], 128)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            ref = _reference64(x, kw)
            err = {}
            for name in SETTINGS:
                use(name)
                out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                awq_gemm(x, *sets[0], out=out)
                err[name] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            t = {name: [] for name in SETTINGS}
            for _ in range(args.rounds):
                for name in SETTINGS:
                    use(name)
                    t[name].append(graph_time_us([lambda s=s: awq_gemm(x, *s) for s in sets], min_calls=CALLS)[0])
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(oc=oc, ic=ic, m=m, err_vs_float64=err, rounds=t, median=med))
            print(f"{oc}x{ic} M={m} {args.dtype} err {', '.join(f'{k} {v:.1e}' for k, v in err.items())}  "
                  + "  ".join(f"{k} {v:.2f}" for k, v in med.items())
                  + f"  words/before {med['words'] / med['before']:.3f}", flush=True)
        del sets
        awq_repack.clear_cache()
    use("words")
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
