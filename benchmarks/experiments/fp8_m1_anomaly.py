"""Why did bench_fp8_blockwise.py time FP8 M = 1 at 4096 x 7168 at 23.4 µs on an H100 when probes gave 14-16 µs?

Session 13. The benchmark and the probe (``wo_tensor_pipe.py fp8m1``) differ in how they build the rotated
operands: the benchmark keeps one activation ``a`` and one MN-major ``b_scale`` tensor for all its 7 weight copies
(``copies = ceil(200e6 / N K)``), the probe builds 8 independent operand sets. This script times, in one process
and alternating (ABAB), on every DeepSeek-V3 layer at M = 1:
  bench: the benchmark's construction, verbatim (shared a / scales, `copies` weights);
  sets:  the probe's construction (independent sets, as many as the benchmark's copies);
  sets8: the probe's construction with 8 sets.
Each is checked against the float64 reference once. CUDA-graph medians (``cute_kernels.bench.graph_time_us``).
``python benchmarks/experiments/fp8_m1_anomaly.py`` prints a table and writes $OUT/fp8_m1_anomaly.json.
"""
import json
import math
import os
import sys

sys.path[:0] = ["benchmarks"]
import torch

from bench_fp8_blockwise import DSV3_NK, GROUPWISE, operands, ours, rel_err
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref


def bench_calls(n, k):
    a, b, a_s, b_s = operands(1, n, k)
    copies = max(1, min(8, math.ceil(200e6 / b.numel())))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    sbs = [to_mn_major(b_s)] * copies
    f = ours(a, b, a_s, b_s)
    e = rel_err(f(), fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GROUPWISE))
    return [lambda j=j: f(bs[j], sbs[j]) for j in range(copies)], copies, e


def set_calls(n, k, count):
    calls, errs = [], []
    for s in range(count):
        a, b, a_s, b_s = operands(1, n, k, seed=s)
        calls.append(ours(a, b, a_s, b_s))
        if s == 0:
            errs.append(rel_err(calls[0](), fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GROUPWISE)))
    return calls, errs[0]


def main():
    out = os.environ.get("OUT", ".")
    rows = []
    for n, k in DSV3_NK:
        bench, copies, e_bench = bench_calls(n, k)
        sets, e_sets = set_calls(n, k, copies)
        sets8, _ = set_calls(n, k, 8)
        assert max(e_bench, e_sets) < 1e-2, (n, k, e_bench, e_sets)
        t = {"bench": [], "sets": [], "sets8": []}
        for _ in range(2):
            for name, calls in (("bench", bench), ("sets", sets), ("sets8", sets8)):
                t[name].append(graph_time_us(calls)[0])
        row = {"N": n, "K": k, "copies": copies, "rel_err": e_bench, **t}
        rows.append(row)
        print(json.dumps(row), flush=True)
        bench = sets = sets8 = None
        torch.cuda.empty_cache()
    with open(os.path.join(out, "fp8_m1_anomaly.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    print(f"device: {torch.cuda.get_device_name()}")
    print("| N | K | copies | bench µs | sets µs | sets8 µs |")
    for r in rows:
        cells = [" / ".join(f"{v:.2f}" for v in r[name]) for name in ("bench", "sets", "sets8")]
        print(f"| {r['N']} | {r['K']} | {r['copies']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
