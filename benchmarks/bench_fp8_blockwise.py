"""Benchmark fp8_blockwise_scaled_mm against torch._scaled_mm (blockwise 1x128 / 128x128, and rowwise) on SM90.

Shapes: 8192^3 and the DeepSeek-V3 linear layers (N, K) x M. Every method runs on the same fp8 operands; weights
rotate among enough copies to exceed L2, so small-M runs stream the weight from HBM as in real decoding.
Timing: triton.testing.do_bench medians after warm-up (eager: includes each call's host path), and the same calls
replayed from a CUDA graph (``cute_kernels.bench.graph_time_us``: kernel time without the host path). Before timing,
each method's output is checked against the float64 reference on a smaller problem (the torch blockwise scale layout
is probed the same way).
Writes results.json / results.md (and plot.png if matplotlib is there) to --out (default $OUT), table last.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cute_kernels.bench import save_plot  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402

DSV3_NK = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]
DSV3_M = [1, 64, 128, 1024, 4096]
GROUPWISE = (1, 128, 128)


def operands(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    a, a_s = quantize_fp8_per_token_group(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    return a, b, a_s, b_s  # scales row-major (K-major) here; each method lays them out its own way


def ours(a, b, a_s, b_s):
    sa, sb = to_mn_major(a_s), to_mn_major(b_s)  # the DeepSeek-V3 / vLLM layout
    return lambda bi=b, sbi=sb: fp8_blockwise_scaled_mm(a, bi, sa, sbi, scale_granularity=GROUPWISE)


def torch_blockwise_layouts(a_s, b_s):
    """Candidate (scale_a, scale_b) layouts for torch._scaled_mm's 1x128 / 128x128 recipe; the probe picks one."""
    sa = to_mn_major(a_s)
    return [("a mn-major, b_s.t()", sa, b_s.t()), ("a mn-major, b_s", sa, b_s),
            ("a mn-major, b_s.t().contig", sa, b_s.t().contiguous()), ("a contiguous, b_s.t()", a_s, b_s.t())]


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def probe_torch_blockwise(log):
    a, b, a_s, b_s = operands(256, 512, 512, seed=3)
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GROUPWISE)
    for name, sa, sb in torch_blockwise_layouts(a_s, b_s):
        try:
            out = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
            e = rel_err(out, ref)
            log.append(f"torch blockwise layout {name}: rel err {e:.3g}")
            if e < 1e-2:
                return name
        except Exception as exc:  # noqa: BLE001
            log.append(f"torch blockwise layout {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--quick", action="store_true", help="only 8192^3 and M in {1, 4096}")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from triton.testing import do_bench

    log = []
    tb_layout = probe_torch_blockwise(log)
    log.append(f"torch blockwise layout chosen: {tb_layout}")
    # Check ours once per config bucket on a mid-size problem.
    for m in (1, 100, 1000):
        a, b, a_s, b_s = operands(m, 576, 1024, seed=m)
        e = rel_err(ours(a, b, a_s, b_s)(), fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GROUPWISE))
        log.append(f"ours M={m} N=576 K=1024 rel err {e:.3g}")
        assert e < 1e-2, log[-1]

    shapes = [(8192, 8192, 8192)] + [(m, n, k) for n, k in DSV3_NK for m in DSV3_M]
    if args.quick:
        shapes = [s for s in shapes if s[0] in (1, 4096) or s == (8192, 8192, 8192)]
    rows = []
    for m, n, k in shapes:
        a, b, a_s, b_s = operands(m, n, k)
        copies = max(1, min(8, math.ceil(200e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        sbs = [to_mn_major(b_s)] * copies
        row = {"M": m, "N": n, "K": k, "weight_copies": copies}
        methods = {}
        f = ours(a, b, a_s, b_s)
        i = [0]

        def rot(fn):
            def call():
                i[0] = (i[0] + 1) % copies
                return fn(i[0])
            return call

        # method name -> fn(j) running the method on weight copy j
        methods["cute_kernels groupwise"] = lambda j: f(bs[j], sbs[j])
        if tb_layout is not None:
            sa, sb = next((s1, s2) for nm, s1, s2 in torch_blockwise_layouts(a_s, b_s) if nm == tb_layout)
            methods["torch blockwise"] = lambda j: torch._scaled_mm(a, bs[j].t(), sa, sb, out_dtype=torch.bfloat16)
        ra = torch.rand(m, 1, device="cuda") * 0.01 + 1e-3
        rb = torch.rand(1, n, device="cuda") * 0.01 + 1e-3
        methods["torch rowwise"] = lambda j: torch._scaled_mm(a, bs[j].t(), ra, rb, out_dtype=torch.bfloat16)
        for name, fn in methods.items():
            try:
                ms = do_bench(rot(fn), warmup=25, rep=100, return_mode="median")
                row[name] = {"us": ms * 1e3, "tflops": 2 * m * n * k / ms / 1e9}
                # The same calls replayed from a CUDA graph: no host path, so the small-M rows show kernel time.
                row[name]["graph_us"], _ = graph_time_us([lambda j=j, fn=fn: fn(j) for j in range(copies)])
            except Exception as exc:  # noqa: BLE001 - e.g. torch blockwise refuses M=1
                row[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        bs = a = b = None  # free before the next shape (the timing closures hold them)

    names = ["cute_kernels groupwise", "torch blockwise", "torch rowwise"]
    md = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", "",
          "| M | N | K | " + " | ".join(f"{n} us (TFLOPS)" for n in names) + " | ours / torch blockwise |"
          " CUDA graph: ours / torch blockwise us | graph ratio |",
          "|---|---|---|" + "---|" * (len(names) + 3)]
    for r in rows:
        cells = []
        for n in names:
            v = r.get(n, {"error": "n/a"})
            cells.append(f"{v['us']:.1f} ({v['tflops']:.0f})" if "us" in v else "fails")
        ob, tb = r.get(names[0], {}), r.get(names[1], {})
        ratio = f"{tb['us'] / ob['us']:.2f}x" if "us" in ob and "us" in tb else "-"
        g_ours, g_tb = ob.get("graph_us"), tb.get("graph_us")
        graph = f"{g_ours:.1f} / " + (f"{g_tb:.1f}" if g_tb else "fails") if g_ours else "-"
        g_ratio = f"{g_tb / g_ours:.2f}x" if g_ours and g_tb else "-"
        md.append(f"| {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells) + f" | {ratio} | {graph} | {g_ratio} |")
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "log": log, "rows": rows}, fh, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write("\n".join(log + [""] + md) + "\n")
    try:
        plot(rows, names, os.path.join(args.out, "plot.png"))
    except Exception as exc:  # noqa: BLE001 - no matplotlib on the device machine: plot from results.json later
        print(f"no plot: {exc}")
    print("\n".join(log))
    print("\n".join(md))


def plot(rows, names, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows]
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ys = [r.get(n, {}).get("tflops", 0) for r in rows]
        ax.bar([x + i * width for x in range(len(rows))], ys, width, label=n)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels, rotation=70, fontsize=7)
    ax.set_ylabel("TFLOPS")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    save_plot(fig, path)


if __name__ == "__main__":
    main()
