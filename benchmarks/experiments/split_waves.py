"""Session 23: K-slice counts the wave model does not pick, on the 7168-row FP8 layers.

7168 rows make 112 tiles of 64 rows (or 56 of 128), 0.85 of a wave on 132 SMs; the model (``configs.split_cost``
with ``SPLIT_SLICE_COST`` = 0.1 per extra slice) keeps 1-2 slices there. Seven slices would make 784 / 392 units, 0.99
of whole waves, at the price of more fp32 partials through L2 and more per-slice prologues. This times the shipped
config's kernel with the slice count forced (the split kernel takes the count at run time), groupwise scales loaded
by the consumers (no staged a_scale, the same for every variant), against the op's shipped call. Each variant is
checked against float64 first; CUDA-graph medians, weights rotated beyond L2, three interleaved rounds.
Writes split_waves.json to $OUT.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402

from fp8_sweep import GW, SMS, operands, rel_err  # noqa: E402

from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import replace  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90, fp8_blockwise_scaled_mm, select_config  # noqa: E402
from cute_kernels.ops.split_k import launch_planned  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

OUT = os.environ.get("OUT", ".")
PROBLEMS = [(16, 7168, 16384), (64, 7168, 16384), (128, 7168, 16384)]
SLICES = (1, 2, 4, 7, 8)


def main():
    rows = []
    for m, n, k in PROBLEMS:
        cfg = replace(select_config(m, n, k), split_k=8)  # the kernel takes the count at run time, up to 8 here
        km, kn = (n, m) if cfg.swap_ab else (m, n)
        tiles = -(-km // cfg.tile_m) * -(-kn // cfg.tile_n)
        fn = build_sm90(2, torch.bfloat16, GW, cfg, SMS)
        sets = [operands(m, n, k, seed=i) for i in range(2)]
        ref = fp8_blockwise_scaled_mm_ref(*sets[0][:4], GW)
        calls = {"shipped": [lambda s=s: fp8_blockwise_scaled_mm(*s[:4]) for s in sets]}
        for sl in SLICES:
            if sl > cfg.split_k:
                continue
            plan = (sl, tiles * sl * cfg.tile_m * cfg.tile_n, tiles)

            def run(s, plan=plan, out=None):
                out = out if out is not None else torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                launch_planned(fn, (s[0], s[1], out, s[2], s[3]), plan, s[0].device, torch.float32)
                return out
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            run(sets[0], out=out)
            err = rel_err(out, ref)
            if not err < 1e-2 or bool(out.isnan().any()):
                print(f"  WRONG {m}x{n}x{k} slices {sl}: {err:.3e}", flush=True)
                continue
            calls[f"s{sl}"] = [lambda s=s, r=run: r(s) for s in sets]
        us = {name: [] for name in calls}
        for _ in range(3):
            for name, c in calls.items():
                us[name].append(graph_time_us(c)[0])
        med = {name: statistics.median(v) for name, v in us.items()}
        rows.append(dict(m=m, n=n, k=k, cfg=cfg.describe(), tiles=tiles, us=med))
        print(f"fp8 M={m} N={n} K={k} {cfg.describe()} ({tiles} tiles): "
              + " ".join(f"[{a}] {u:.2f}" for a, u in med.items()), flush=True)
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), open(os.path.join(OUT, "split_waves.json"), "w"),
                  indent=1)


if __name__ == "__main__":
    main()
