"""Benchmarks against what a user would otherwise call, side by side in one run (``python -m cute_kernels bench``).

Method (/work/.library/device/METHOD.md): FLOPs and bytes first, roofline floor = max(FLOPs / peak, bytes /
bandwidth); every kernel is checked against the float64 reference before it is timed; times are medians of CUDA-graph
replays (triton's do_bench_cudagraph), so per-call host cost does not hide a few-microsecond kernel; when one
problem's operands fit in L2, several copies are rotated so the weights come from HBM as in a real model.
"""

from __future__ import annotations

import json
from pathlib import Path

# H200 / H100 SXM dense peaks and the measured copy bandwidth of the H200 here (read + write).
PEAK_INT8_TOPS = 1979.0
PEAK_BF16_TFLOPS = 989.0
HBM_TBPS = 4.8
L2_BYTES = 50 * 2**20

INT8_SHAPES_NK = [(4096, 4096), (14336, 4096), (4096, 14336)]
INT8_MS = [1, 16, 32, 128, 256, 1024, 4096]  # 256: a common serving batch (not in #2's list)


def save_plot(fig, path, dpi: int = 110) -> None:
    """``fig.savefig`` as a 64-colour palette PNG: the plots live in docs/, and the tree travels to the device
    machine beside a ~61 MiB payload (a line plot loses nothing visible; RGBA PNGs were 3x the size)."""
    fig.savefig(path, dpi=dpi)
    try:
        from PIL import Image  # matplotlib's own dependency
    except ImportError:
        return
    Image.open(path).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def graph_time_us(calls, replays: int = 12, min_calls: int = 1, warmup_ms: float = 0.0):
    """Median µs per call of a CUDA graph that runs every callable in ``calls`` once (eager CUDA events if capture
    fails). Returns (µs, "graph" | "eager"). Several calls per graph rotate operands and amortize the replay launch.
    ``min_calls``: the list is repeated until the graph holds at least this many calls, so that two timings compared
    with each other carry the same small share of the replay's own launch (a graph of 2 calls adds ~1 µs per call).
    The warm-up runs on the capture stream, so per-stream state (split-K workspaces) exists before capture.
    ``warmup_ms`` > 0 (session 56) replays the graph for about that long before the timed replays, as triton's
    do_bench warms up for 25 ms: the timing then starts from the clock and power state the graph itself sets, not
    the one the previous measurement left (0: one replay, as before)."""
    import statistics

    import torch

    calls = list(calls) * -(-min_calls // max(1, len(calls)))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.synchronize()
    how = "graph"
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for c in calls:
                c()
        run = g.replay
    except Exception as exc:  # noqa: BLE001 - report and time eagerly instead
        print(f"  graph capture failed ({type(exc).__name__}: {str(exc)[:200]}); timing eagerly")
        torch.cuda.synchronize()
        how = "eager"

        def run():
            for c in calls:
                c()
    run()
    torch.cuda.synchronize()
    if warmup_ms > 0:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        for _ in range(max(1, int(warmup_ms / max(e0.elapsed_time(e1), 1e-3)))):
            run()
        torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / len(calls))
    return statistics.median(times), how


def _time_us(fn) -> float:
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    # Medians (METHOD.md): triton's default return_mode is the mean, which one slow replay drags up.
    try:
        ms = do_bench_cudagraph(fn, rep=100, return_mode="median")
    except Exception:  # noqa: BLE001 - a baseline that cannot be captured is still timed, flagged in the notes
        ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    torch.cuda.synchronize()
    return ms * 1e3


def int8_operand_sets(m: int, n: int, k: int, copies: int) -> list[tuple]:
    """``copies`` fresh operand sets of ``int8_scaled_mm`` on the GPU, for rotating through more than L2: (a [m, k]
    full-range int8, b [k, n] int8 column-major (the ``.t()`` of a row-major weight), a_scale [m], b_scale [n],
    bf16 bias [n])."""
    import torch

    return [(torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda"),
             torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t(),
             torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01,
             torch.randn(n, device="cuda").bfloat16()) for _ in range(copies)]


def _int8_case(m, n, k):
    import torch

    from . import int8_scaled_mm
    from .reference import int8_scaled_mm_ref

    bytes_one = m * k + n * k + 2 * m * n + 4 * (m + n) + 2 * n
    copies = max(1, min(16, -(-3 * L2_BYTES // bytes_one))) if bytes_one < 2 * L2_BYTES else 1
    sets = int8_operand_sets(m, n, k, copies)
    a, b, sa, sb, bias = sets[0]
    out = int8_scaled_mm(a, b, sa, sb, bias)
    rows = slice(0, min(m, 512))
    ref = int8_scaled_mm_ref(a[rows], b, sa[rows], sb, bias)
    err = ((out[rows].double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
    it = [0]

    def ours():
        s = sets[it[0] % copies]
        it[0] += 1
        int8_scaled_mm(*s)

    # torch._int_mm refuses M <= 16: pad the activations to 32 rows for the baseline (noted in the table).
    mp = max(m, 32)
    a_pad = [torch.zeros(mp, k, dtype=torch.int8, device="cuda") for _ in range(copies)]
    sa_pad = torch.ones(mp, device="cuda")

    def torch_int_mm():
        s = sets[it[0] % copies]
        ap = a_pad[it[0] % copies]
        it[0] += 1
        return (torch._int_mm(ap, s[1]).float() * sa_pad[:, None] * s[3][None] + s[4]).bfloat16()

    wb = [s[1].t().bfloat16() for s in sets]
    xb = [s[0].bfloat16() for s in sets]

    def torch_bf16():
        i = it[0] % copies
        it[0] += 1
        return xb[i] @ wb[i].t()

    flops = 2 * m * n * k
    roof_us = max(flops / (PEAK_INT8_TOPS * 1e12), bytes_one / (HBM_TBPS * 1e12)) * 1e6
    t_ours = _time_us(ours)
    t_int = _time_us(torch_int_mm)
    t_bf16 = _time_us(torch_bf16)
    return {
        "M": m, "N": n, "K": k, "copies_rotated": copies, "max_rel_err": err,
        "ours_us": t_ours, "ours_tops": flops / t_ours / 1e6, "roofline_us": roof_us, "roofline_frac": roof_us / t_ours,
        "weight_GBps": n * k / t_ours / 1e3,
        "torch_int_mm_epi_us": t_int, "torch_bf16_us": t_bf16,
        "speedup_vs_int_mm_epi": t_int / t_ours, "speedup_vs_bf16": t_bf16 / t_ours,
        "int_mm_padded_to": mp if mp != m else None,
    }


def bench_int8(out_dir: Path, quick: bool) -> list[dict]:
    import torch

    shapes = [(8192, 8192, 8192)] + [(m, n, k) for (n, k) in INT8_SHAPES_NK for m in INT8_MS]
    if quick:
        shapes = shapes[:1] + [s for s in shapes if s[0] in (16, 4096)]
    rows = []
    for m, n, k in shapes:
        r = _int8_case(m, n, k)
        rows.append(r)
        print(f"M={m:5d} N={n:5d} K={k:5d}  ours {r['ours_us']:8.1f} us {r['ours_tops']:7.0f} TOPS "
              f"roof {r['roofline_frac']:.2f}  int_mm+epi {r['torch_int_mm_epi_us']:8.1f} us "
              f"(x{r['speedup_vs_int_mm_epi']:.2f})  bf16 {r['torch_bf16_us']:8.1f} us  err {r['max_rel_err']:.1e}",
              flush=True)
    dev = torch.cuda.get_device_name()
    lines = [f"int8_scaled_mm on {dev} (bf16 out, per-token + per-channel scales + bias)", "",
             "| M | N | K | ours µs | TOPS | roofline frac | weight GB/s | torch._int_mm+epi µs | speedup | bf16 matmul µs | speedup |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pad = f" (M padded to {r['int_mm_padded_to']})" if r["int_mm_padded_to"] else ""
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['ours_us']:.1f} | {r['ours_tops']:.0f} | "
                     f"{r['roofline_frac']:.2f} | {r['weight_GBps']:.0f} | {r['torch_int_mm_epi_us']:.1f}{pad} | "
                     f"{r['speedup_vs_int_mm_epi']:.2f}x | {r['torch_bf16_us']:.1f} | {r['speedup_vs_bf16']:.2f}x |")
    table = "\n".join(lines)
    (out_dir / "int8_scaled_mm.md").write_text(table + "\n")
    (out_dir / "int8_scaled_mm.json").write_text(json.dumps({"device": dev, "rows": rows}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(INT8_SHAPES_NK), figsize=(15, 4), sharey=True)
        for ax, (n, k) in zip(axes, INT8_SHAPES_NK):
            sel = [r for r in rows if (r["N"], r["K"]) == (n, k)]
            ms = [r["M"] for r in sel]
            for key, label in (("ours_tops", "cute_kernels int8_scaled_mm"),
                               ("torch_int_mm_epi_us", "torch._int_mm + epilogue"),
                               ("torch_bf16_us", "bf16 torch.matmul")):
                ys = [r[key] if key.endswith("tops") else 2 * r["M"] * n * k / r[key] / 1e6 for r in sel]
                ax.plot(ms, ys, marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"N={n}, K={k}")
            ax.set_xlabel("M (tokens)")
        axes[0].set_ylabel("TOPS / TFLOPS")
        axes[0].legend()
        fig.suptitle(f"int8_scaled_mm vs torch on {dev}")
        fig.tight_layout()
        save_plot(fig, out_dir / "int8_scaled_mm.png")
    except ImportError:
        print("matplotlib missing: no plot written")
    print(table)
    return rows


def run_benchmark(kernel: str, out: str, quick: bool = False) -> int:
    import torch

    if not torch.cuda.is_available():
        print("bench needs a CUDA GPU")
        return 2
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if kernel == "int8_scaled_mm":
        bench_int8(out_dir, quick)
        return 0
    raise SystemExit(f"no benchmark named {kernel!r} in the CLI; see benchmarks/ for the other families")
