"""Session 39: configs.raster_for's N-fastest plain order for 2x1 clusters whose A exceeds L2 and B does not
(``RASTER_ALONG_N_FOR_LARGE_A``), on fp8_blockwise_scaled_mm at prefill sizes, against the old rule (M fastest) and
cuBLAS blockwise (torch._scaled_mm, 1x128 / 128x128 scales); two shapes the rule leaves alone as controls.
float64-checked (the whole output), CUDA-graph medians of 3 interleaved rounds over 2 weight copies, µs and TFLOPS."""
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, "benchmarks")
import cute_kernels.configs as configs  # noqa: E402
import cute_kernels.ops.fp8_blockwise_scaled_mm as f8  # noqa: E402
from bench_fp8_blockwise import operands, probe_torch_blockwise, torch_blockwise_layouts  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

SHAPES = [(8192, 4096, 7168), (16384, 4096, 7168), (8192, 7168, 2048), (16384, 7168, 2048), (8192, 2112, 7168),
          (16384, 2048, 4096), (4096, 4096, 7168), (8192, 8192, 8192)]


def ours(rule):
    def run(a, b, sa, sb):
        configs.RASTER_ALONG_N_FOR_LARGE_A = rule
        f8._validated = f8.PlanCache()  # the op's plan cache would keep the first order
        try:
            return f8.fp8_blockwise_scaled_mm(a, b, sa, sb)
        finally:
            configs.RASTER_ALONG_N_FOR_LARGE_A = True
    return run


def main():
    log = []
    layout = probe_torch_blockwise(log)
    print(log[-1])
    rows = []
    for m, n, k in SHAPES:
        a, b, a_s, b_s = operands(m, n, k)
        sa, sb = to_mn_major(a_s), to_mn_major(b_s)
        bs = [b, b.clone()]
        ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, (1, 128, 128))
        methods = {"new rule": ours(True), "old rule": ours(False)}
        if layout is not None:
            tsa, tsb = next((s1, s2) for nm, s1, s2 in torch_blockwise_layouts(a_s, b_s) if nm == layout)
            methods["cuBLAS blockwise"] = lambda a_, b_, sa_, sb_: torch._scaled_mm(a_, b_.t(), tsa, tsb,
                                                                                  out_dtype=torch.bfloat16)
        errs = {}
        for name, fn in methods.items():
            out = fn(a, b, sa, sb)
            errs[name] = ((out.double() - ref).norm() / ref.norm()).item()
            assert errs[name] < 1e-2 and not out.isnan().any(), (name, errs[name])
        del ref
        times = {name: [] for name in methods}
        for _ in range(3):
            for name, fn in methods.items():
                times[name].append(graph_time_us([lambda bi=bi, fn=fn: fn(a, bi, sa, sb) for bi in bs])[0])
        med = {name: statistics.median(ts) for name, ts in times.items()}
        cfg = f8.select_config(m, n, k, 1, 132)
        row = dict(m=m, n=n, k=k, config=cfg.describe(), raster_new=configs.raster_for(cfg, m, n, k), us=med,
                   tflops={nm: 2 * m * n * k / t / 1e6 for nm, t in med.items()}, err=errs, rounds=times)
        rows.append(row)
        print(f"{m}x{n}x{k} {row['raster_new']}: " + ", ".join(
            f"{nm} {t:.0f} us ({row['tflops'][nm]:.0f} TF)" for nm, t in med.items())
            + f"; new/old {med['new rule'] / med['old rule']:.2f}"
            + (f", cuBLAS/new {med['cuBLAS blockwise'] / med['new rule']:.2f}x" if "cuBLAS blockwise" in med else ""),
            flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "fp8_raster_rule39.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows, "log": log}, fh, indent=1)


if __name__ == "__main__":
    main()
