"""Session 6: fixed cost vs streaming rate of the decode path. quantized_mm at M = 1, N = 8192, K from 2048 to
32768 (shipped plans, bf16 x), and a device-to-device copy of the same byte count, each fitted as
time = fixed + bytes / rate (least squares). Says whether the issue's 75%-of-copy-bandwidth target at N = K = 8192 is
limited by the streaming rate or by the fixed cost of a launch. CUDA-graph medians over weight sets rotated through
more than L2, three repeats; the kernel is checked against float64 at every K first. Writes wo_scaling.json to $OUT.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_weight_only as bwo  # noqa: E402
from cute_kernels.weight_only import quantized_mm  # noqa: E402


def fit(points):
    """(fixed us, rate TB/s) of time = fixed + bytes / rate."""
    xs, ys = [b for b, _ in points], [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, 1 / slope / 1e6


rows, n = [], 8192
copy_pts = []
for k in (2048, 4096, 8192, 16384, 32768):
    per = n * k // 2  # int4 bytes: the copy runs at every int4 size
    src = [torch.empty(per, dtype=torch.uint8, device="cuda") for _ in range(bwo.n_sets(per, 16))]
    dst = torch.empty(per, dtype=torch.uint8, device="cuda")
    t = statistics.median(bwo.graph_time_us([lambda s=s: dst.copy_(s) for s in src])[0] for _ in range(3))
    copy_pts.append((per, t))
    rows.append({"what": "copy", "bytes": per, "us": t})
    print(f"copy {per / 1e6:.1f} MB: {t:.2f} us ({2 * per / t / 1e6:.2f} TB/s read+write)", flush=True)
    src = dst = None
fits = {"copy (bytes read)": fit(copy_pts)}
for bits in (8, 4, 2, 1):
    pts = []
    for k in (2048, 4096, 8192, 16384, 32768):
        per = n * k * bits // 8
        sets = [torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, device="cuda")
                for _ in range(bwo.n_sets(per, 16))]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        err = bwo._check(quantized_mm(x, sets[0], 0.01, bits), x, sets[0], 0.01, bits)
        t = statistics.median(bwo.graph_time_us([lambda w=w: quantized_mm(x, w, 0.01, bits) for w in sets])[0]
                              for _ in range(3))
        pts.append((per, t))
        rows.append({"what": f"int{bits}", "k": k, "bytes": per, "us": t, "err": err})
        print(f"int{bits} K={k}: {t:.2f} us, {per / t / 1e6:.2f} TB/s (err {err:.2e})", flush=True)
        del sets
    fits[f"int{bits}"] = fit(pts)
for name, (fixed, rate) in fits.items():
    print(f"fit {name}: fixed {fixed:.2f} us + bytes / {rate:.2f} TB/s", flush=True)
json.dump({"rows": rows, "fits": fits}, open(os.path.join(os.environ.get("OUT", "."), "wo_scaling.json"), "w"),
          indent=1)
