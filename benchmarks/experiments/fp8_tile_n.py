"""Session 5: wider FP8 tiles (tile_n 160 / 192, several SFB segments per tile) against the shipped 128-wide ones.

Checks every candidate config against the float64 reference on ragged problems (both granularities), then times
each candidate and torch._scaled_mm blockwise side by side per shape: CUDA-graph medians of 4 calls per graph (weights
rotated among copies so the working set exceeds L2), three interleaved repeats, best and median kept. Writes
results.json to $OUT and prints a table.
"""

import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import TileConfig  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

GW, BW = (1, 128, 128), (128, 128, 128)


def T(tm, tn, cm=1, cn=1, sk=1):
    return TileConfig(tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn, split_k=sk)


def candidates(m):
    base = select_config(m, 1, 1)
    if m <= 64:
        return {"table": base, "64x160": T(64, 160, sk=8), "64x192": T(64, 192, sk=8)}
    if m <= 256:
        return {"table": base, "128x160": T(128, 160, sk=4), "128x192": T(128, 192, sk=4)}
    return {"table": base, "128x160c2": T(128, 160, 2), "128x192c2": T(128, 192, 2), "128x192c1x2": T(128, 192, 1, 2)}


def operands(m, n, k, seed=0, gran=GW):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    a, a_s = quantize_fp8_per_token_group(x, 128) if gran == GW else quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    return a, b, to_mn_major(a_s), to_mn_major(b_s), b_s


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def check(log):
    all_cfgs = {}
    for m in (1, 64, 200, 1000):
        all_cfgs.update({(m, k): v for k, v in candidates(m).items()})
    for (m, name), cfg in all_cfgs.items():
        for gran in (GW, BW):
            for n in (584, 2112):
                a, b, sa, sb, _ = operands(m + 3, n, 1024, seed=m + n, gran=gran)
                out = torch.full((m + 3, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                fp8_blockwise_scaled_mm(a, b, sa, sb, scale_granularity=gran, config=cfg, out=out)
                e = rel_err(out, fp8_blockwise_scaled_mm_ref(a, b, sa, sb, gran))
                ok = e < 1e-2 and not out.isnan().any().item()
                log.append(f"check {name} M={m + 3} N={n} gran={gran}: rel err {e:.3g} {'ok' if ok else 'FAIL'}")
                assert ok, log[-1]


def main():
    out_dir = os.environ.get("OUT", "bench_out")
    os.makedirs(out_dir, exist_ok=True)
    log = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    check(log)
    print("\n".join(log[-4:]), flush=True)
    shapes = [(8192, 8192, 8192)]
    for n, k in [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]:
        for m in (64, 128, 1024, 4096):
            shapes.append((m, n, k))
    rows = []
    for m, n, k in shapes:
        a, b, sa, sb, b_s = operands(m, n, k)
        copies = max(1, min(8, math.ceil(200e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        fns = {}
        for name, cfg in candidates(m).items():
            fns[name] = [lambda j=j, cfg=cfg: fp8_blockwise_scaled_mm(a, bs[j], sa, sb, config=cfg, out=outs[j])
                         for j in range(copies)]
        # torch's blockwise recipe as benchmarks/bench_fp8_blockwise.py probes it: a_scale MN-major, b_scale.t()
        sbt = b_s.t()
        try:
            torch._scaled_mm(a, b.t(), sa, sbt, out_dtype=torch.bfloat16)
            fns["torch blockwise"] = [lambda j=j: torch._scaled_mm(a, bs[j].t(), sa, sbt, out_dtype=torch.bfloat16)
                                      for j in range(copies)]
        except Exception as exc:  # noqa: BLE001
            log.append(f"torch blockwise M={m} N={n} K={k}: {type(exc).__name__}")
        reps = {name: [] for name in fns}
        for _ in range(3):
            for name, calls in fns.items():
                reps[name].append(graph_time_us(calls * max(1, 4 // copies))[0])
        row = {"M": m, "N": n, "K": k}
        for name, ts in reps.items():
            row[name] = {"best_us": min(ts), "median_us": statistics.median(ts), "all": ts,
                         "tflops_best": 2 * m * n * k / min(ts) / 1e6}
        rows.append(row)
        print(json.dumps({kk: (v if not isinstance(v, dict) else round(v["median_us"], 1)) for kk, v in row.items()}),
              flush=True)
        fns = None  # free the weight copies before the next shape
    with open(os.path.join(out_dir, "fp8_tile_n.json"), "w") as fh:
        json.dump({"log": log, "rows": rows}, fh, indent=1)
    print("\n| M | N | K | method: median µs (best TFLOPS) ...")
    for r in rows:
        cells = [f"{kk} {v['median_us']:.1f} ({v['tflops_best']:.0f})" for kk, v in r.items() if isinstance(v, dict)]
        print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
