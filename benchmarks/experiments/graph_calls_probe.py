"""Session 24: why bench_fp8_blockwise.py's CUDA-graph column reads our decode-size FP8 calls 5-8 µs slower than
fp8_vs_int8_small_m.py does (7168 x 16384, M = 1: 54.9 vs 46.5 µs on the same H100) while cuBLAS reads the same in
both. The two differ in how many calls one graph replay holds (the weight copies: 2 here, vs 4) and in ``out=``.
Times ours and torch blockwise with 2 and 4 calls per graph, with and without ``out=``. Writes
graph_calls_probe.json to $OUT."""
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm  # noqa: E402

rows = []
for m, n, k in [(1, 7168, 16384), (64, 7168, 16384), (64, 4096, 7168), (1024, 7168, 16384)]:
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
    bs = [b, b.clone()]
    sa, sb = to_mn_major(a_s), to_mn_major(b_s)
    o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {
        "ours out=None": lambda j: fp8_blockwise_scaled_mm(a, bs[j], sa, sb, scale_granularity=(1, 128, 128)),
        "ours out=o": lambda j: fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=o),
    }
    if m > 1:
        fns["torch blockwise"] = lambda j: torch._scaled_mm(a, bs[j].t(), sa, b_s.t(), out_dtype=torch.bfloat16)
    r = {"M": m, "N": n, "K": k}
    for rnd in range(3):
        for name, fn in fns.items():
            for calls in (2, 4, 8):
                t = graph_time_us([lambda j=j % 2: fn(j) for j in range(calls)])[0]
                r.setdefault(f"{name} x{calls}", []).append(t)
    med = {key: statistics.median(v) for key, v in r.items() if isinstance(v, list)}
    rows.append({**{k_: r[k_] for k_ in ("M", "N", "K")}, "us": med})
    print(f"M={m} N={n} K={k}: " + "  ".join(f"{key} {v:.1f}" for key, v in med.items()), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), "graph_calls_probe.json"), "w"), indent=1)
