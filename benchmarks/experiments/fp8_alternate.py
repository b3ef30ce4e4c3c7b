"""Session 5: the two consumer warpgroups of 128-row FP8 tiles taking the tensor cores in turns (named barriers,
``Fp8BlockwiseGemmSm90.mainloop``) against both issuing freely, same configs.

Builds both variants directly (``build_sm90`` with ``fp8_blockwise.ALTERNATE_WARPGROUPS`` set before each build),
checks them against the float64 reference on ragged problems (odd and even K-tile counts, split-K, both
granularities), then times them side by side with torch._scaled_mm blockwise: CUDA-graph medians of 4 calls (weights
rotated), three interleaved repeats. Writes fp8_alternate.json to $OUT and prints a table.
"""

import json
import math
import os
import statistics
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))

import cute_kernels.sm90.fp8_blockwise as fb  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90, select_config  # noqa: E402
from cute_kernels.ops.split_k import launch_planned, resolve_split  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402
from fp8_pair import BW, GW, SMS, operands, rel_err  # noqa: E402

_built = {}


def runner(cfg, alternate, gran, m, n, k):
    cfg, split = resolve_split(cfg, m, n, k, 1, SMS)
    key = (cfg, alternate, gran)
    if key not in _built:
        fb.ALTERNATE_WARPGROUPS = alternate
        _built[key] = build_sm90(2, torch.bfloat16, gran, cfg, SMS)
    fn = _built[key]
    return lambda a, b, out, sa, sb: launch_planned(fn, (a, b, out, sa, sb), split, a.device, torch.float32)


def check(log):
    for m, n, k in ((77, 2112, 1152), (200, 584, 1024), (333, 712, 1152), (1000, 1000, 2048)):
        for gran in (GW, BW):
            a, b, sa, sb, _ = operands(m, n, k, seed=m + n + k, gran=gran)
            ref = fp8_blockwise_scaled_mm_ref(a, b, sa, sb, gran)
            sel = select_config(m, n, k, 1, SMS)
            for cfg in {sel, replace(sel, tile_n=128)}:
                for alternate in (False, True):
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    runner(cfg, alternate, gran, m, n, k)(a, b, out, sa, sb)
                    e = rel_err(out, ref)
                    ok = e < 1e-2 and not out.isnan().any().item()
                    log.append(f"check alternate={alternate} {cfg.describe()} M={m} N={n} K={k} {gran}: "
                               f"rel err {e:.3g} {'ok' if ok else 'FAIL'}")
                    assert ok, log[-1]


def main():
    out_dir = os.environ.get("OUT", "bench_out")
    os.makedirs(out_dir, exist_ok=True)
    log = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    check(log)
    print("\n".join(log), flush=True)
    shapes = [(8192, 8192, 8192)]
    for n, k in [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]:
        for m in (128, 1024, 4096):
            shapes.append((m, n, k))
    rows = []
    for m, n, k in shapes:
        a, b, sa, sb, b_s = operands(m, n, k)
        copies = max(1, min(8, math.ceil(200e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        sel = select_config(m, n, k, 1, SMS)
        fns = {}
        for cfg in dict.fromkeys([sel, replace(sel, tile_n=128)]):
            for alternate in (False, True):
                f = runner(cfg, alternate, GW, m, n, k)
                fns[f"{cfg.describe()} {'alt' if alternate else 'free'}"] = [
                    lambda j=j, f=f: f(a, bs[j], outs[j], sa, sb) for j in range(copies)]
        sbt = b_s.t()
        fns["torch blockwise"] = [lambda j=j: torch._scaled_mm(a, bs[j].t(), sa, sbt, out_dtype=torch.bfloat16)
                                  for j in range(copies)]
        reps = {name: [] for name in fns}
        for _ in range(3):
            for name, calls in fns.items():
                reps[name].append(graph_time_us(calls * max(1, 4 // copies))[0])
        row = {"M": m, "N": n, "K": k}
        for name, ts in reps.items():
            row[name] = {"median_us": statistics.median(ts), "all": ts,
                         "tflops": 2 * m * n * k / statistics.median(ts) / 1e6}
        rows.append(row)
        print(json.dumps({kk: (v if not isinstance(v, dict) else round(v["median_us"], 1)) for kk, v in row.items()}),
              flush=True)
    with open(os.path.join(out_dir, "fp8_alternate.json"), "w") as fh:
        json.dump({"log": log, "rows": rows}, fh, indent=1)
    print("\n| M | N | K | variant: median µs (TFLOPS) ...")
    for r in rows:
        cells = [f"{kk} {v['median_us']:.1f} ({v['tflops']:.0f})" for kk, v in r.items() if isinstance(v, dict)]
        print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
