"""Shared harness of the session-5 FP8 experiments (fp8_tile_n.py, fp8_pair.py, fp8_alternate.py, fp8_sfa_tma.py).

``Kernels`` builds a config directly with ``build_sm90`` after setting module constants of
``cute_kernels.sm90.fp8_blockwise`` (the switches an experiment compares), so two variants of one config can run side
by side. ``check`` compares variants with the float64 reference on ragged problems; ``sweep`` times variants and
torch._scaled_mm blockwise per shape: CUDA-graph medians of 4 calls (weights rotated among copies beyond L2), three
interleaved repeats, median kept. Results go to ``$OUT/<name>.json`` and a table is printed.
"""

import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import cute_kernels.sm90.fp8_blockwise as fb  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90  # noqa: E402
from cute_kernels.ops.split_k import launch_planned, resolve_split  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

GW, BW = (1, 128, 128), (128, 128, 128)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
DSV3_NK = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]


def operands(m, n, k, seed=0, gran=GW):
    """fp8 a, b with MN-major scales, plus b's row-major scale (torch's blockwise recipe takes its .t())."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * torch.exp2(
        torch.randint(-5, 3, (n // 8 + 1, 1), device="cuda", generator=g).float()).repeat_interleave(8, 0)[:n]
    a, a_s = quantize_fp8_per_token_group(x, 128) if gran == GW else quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    return a, b, to_mn_major(a_s), to_mn_major(b_s), b_s


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


class Kernels:
    """Compiled variants: (TileConfig, switches) -> launch(a, b, out, a_scale, b_scale). Switches are module
    constants of fp8_blockwise, except ``sfa_tma`` (build_sm90's argument; groupwise scales only)."""

    def __init__(self):
        self._built = {}

    def runner(self, cfg, switches: dict, gran, m, n, k):
        cfg, split = resolve_split(cfg, m, n, k, 1, SMS)
        key = (cfg, tuple(sorted(switches.items())), gran)
        if key not in self._built:
            module = {name: v for name, v in switches.items() if name != "sfa_tma"}  # sfa_tma: a build argument
            saved = {name: getattr(fb, name) for name in module}
            for name, value in module.items():
                setattr(fb, name, value)
            try:
                self._built[key] = build_sm90(2, torch.bfloat16, gran, cfg, SMS,
                                              sfa_tma=switches.get("sfa_tma", False) and gran == GW)
            finally:
                for name, value in saved.items():
                    setattr(fb, name, value)
        fn = self._built[key]
        return lambda a, b, out, sa, sb: launch_planned(fn, (a, b, out, sa, sb), split, a.device, torch.float32)


def check(kernels: Kernels, problems, variants_for, log):
    """Every variant of ``variants_for(m, n, k)`` ({label: (cfg, switches)}) against float64, both granularities."""
    for m, n, k in problems:
        for gran in (GW, BW):
            a, b, sa, sb, _ = operands(m, n, k, seed=m + n + k, gran=gran)
            ref = fp8_blockwise_scaled_mm_ref(a, b, sa, sb, gran)
            for label, (cfg, switches) in variants_for(m, n, k).items():
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kernels.runner(cfg, switches, gran, m, n, k)(a, b, out, sa, sb)
                e = rel_err(out, ref)
                ok = e < 1e-2 and not out.isnan().any().item()
                log.append(f"check {label} M={m} N={n} K={k} {gran}: rel err {e:.3g} {'ok' if ok else 'FAIL'}")
                assert ok, log[-1]


def shapes(ms):
    return [(8192, 8192, 8192)] + [(m, n, k) for n, k in DSV3_NK for m in ms]


def sweep(name, kernels: Kernels, shape_list, variants_for, log):
    rows = []
    for m, n, k in shape_list:
        a, b, sa, sb, b_s = operands(m, n, k)
        copies = max(1, min(8, math.ceil(200e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        fns = {}
        for label, (cfg, switches) in variants_for(m, n, k).items():
            f = kernels.runner(cfg, switches, GW, m, n, k)
            fns[label] = [lambda j=j, f=f: f(a, bs[j], outs[j], sa, sb) for j in range(copies)]
        sbt = b_s.t()  # torch's blockwise recipe as benchmarks/bench_fp8_blockwise.py probes it
        try:  # cuBLAS refuses some shapes (M = 1)
            torch._scaled_mm(a, b.t(), sa, sbt, out_dtype=torch.bfloat16)
            fns["torch blockwise"] = [lambda j=j: torch._scaled_mm(a, bs[j].t(), sa, sbt, out_dtype=torch.bfloat16)
                                      for j in range(copies)]
        except RuntimeError:
            pass
        reps = {label: [] for label in fns}
        for _ in range(3):
            for label, calls in fns.items():
                reps[label].append(graph_time_us(calls * max(1, 4 // copies))[0])
        row = {"M": m, "N": n, "K": k}
        for label, ts in reps.items():
            row[label] = {"median_us": statistics.median(ts), "all": ts,
                          "tflops": 2 * m * n * k / statistics.median(ts) / 1e6}
        rows.append(row)
        print(json.dumps({kk: (v if not isinstance(v, dict) else round(v["median_us"], 1)) for kk, v in row.items()}),
              flush=True)
    out_dir = os.environ.get("OUT", "bench_out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "log": log, "rows": rows}, fh, indent=1)
    print("\n| M | N | K | variant: median µs (TFLOPS) ...")
    for r in rows:
        cells = [f"{kk} {v['median_us']:.1f} ({v['tflops']:.0f})" for kk, v in r.items() if isinstance(v, dict)]
        print(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells))


def run(name, check_problems, ms, variants_for):
    """An experiment's whole run: check every variant on ``check_problems``, then sweep 8192^3 and the DeepSeek-V3
    shapes at the given M."""
    log = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    kernels = Kernels()
    check(kernels, check_problems, variants_for, log)
    print("\n".join(log), flush=True)
    sweep(name, kernels, shapes(ms), variants_for, log)
