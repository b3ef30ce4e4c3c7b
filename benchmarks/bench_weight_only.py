"""Benchmark quantized_mm (1/2/4/8-bit weight-only) against bf16 torch.matmul on the dequantized weight.

Columns, timed in the same run: ``ours`` = cute_kernels.quantized_mm on its default dispatch (bf16 x, per-tensor
scale), ``bf16`` = torch.matmul(x, W_bf16.t()) on a pre-dequantized bf16 weight (what a user would otherwise run);
speedup = bf16 / ours; ``GB/s`` = packed weight bytes / time (the decode path's figure of merit, compared with the
device's copy bandwidth measured here: bytes read + written by a 1 GiB device-to-device copy). For M >= 17 the
large-M paths are also forced side by side - the tensor-core tiles of the kernel template and the dense path
(dequantize + cuBLAS; the dispatcher's DENSE_MIN_M comes from this crossover) - and the dequantize alone
(``dequantize_weights``: packed bytes read + dense bf16 bytes written / time). A second table times the decode and
tensor-core paths forced at M in {8, 16} (the crossover the dispatcher's DECODE_MAX_M comes from).
``--quick``: N = K = 8192, bits {4, 8}, M {64, 128, 256, 1024, 4096}, no second table (well under a minute).
``--decode``: the three layers, every width, M {1, 4, 16} only (the decode path, issue #4's targets), no second table.

Method (../.library/device/METHOD.md): each timing is the median over CUDA-graph replays of a graph that runs every
input set once; weights rotate over enough sets that each call streams them from HBM, not L2 (tensor-core rows with
M >= 64 re-read weights from L2 by design and use 2 sets). Each configuration is checked against the float64
reference before it is timed. Writes results.json / results.md to --out (default $OUT); ``--plot results.json``
(on any machine with matplotlib) draws speedup vs bits.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from cute_kernels.bench import graph_time_us, save_plot  # noqa: F401 - graph_time_us re-exported for bench_awq

SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336)]
BITS = [1, 2, 4, 8]
MS = [1, 4, 16, 64, 256, 4096]
QUICK_BITS = [4, 8]
QUICK_MS = [64, 128, 256, 1024, 4096]
DECODE_MS = [1, 4, 16]
LARGE_M = 17  # from here on (past the decode path) the large-M paths are timed side by side
L2_MARGIN_BYTES = 4 * 60 * 2**20  # 4x the largest Hopper L2


def eager_time_us(call, iters=50):
    """Host-visible time per call, launch overhead included (no graph)."""
    call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / iters


def copy_bandwidth_gbs() -> tuple[float, float]:
    """(copy GB/s counting read + write, read-only GB/s): the best of torch's and a Triton kernel's, 2 GiB buffers
    (copy_bandwidth.py; until session 12 this was torch's graph-captured ``copy_`` and ``sum`` alone)."""
    import copy_bandwidth

    res = copy_bandwidth.measure()
    return res["copy_gbs"], res["read_gbs"]


def n_sets(bytes_per_set: int, cap: int = 32) -> int:
    return max(2, min(cap, math.ceil(L2_MARGIN_BYTES / bytes_per_set)))


def _check(out, x, w_packed, scale, bits, rows=8, cols=256):
    """Float64 reference on a corner of the output (the full reference at these sizes costs seconds of CPU)."""
    from cute_kernels.reference import quantized_mm_ref

    ref = quantized_mm_ref(x[:rows].cpu(), w_packed[:cols].cpu(), scale, bits)
    err = ((out[:rows, :cols].double().cpu() - ref).abs().max() / ref.abs().max()).item()
    if not err < 1e-2 or bool(out.isnan().any()):
        print(f"  WRONG RESULT before timing: error {err:.3e}, NaNs {int(out.isnan().sum())}", flush=True)
        return float("nan")
    return err


def bench_quantized_mm(shapes, bits_list, ms, check=True, sink=None):
    from cute_kernels.weight_only import quantized_mm
    from cute_kernels.weight_only.config import select_tile
    from cute_kernels import arch

    rows = []
    for n, k in shapes:
        bf_sets = [torch.randn(n, k, device="cuda").to(torch.bfloat16) * 0.02 for _ in range(n_sets(n * k * 2, 4))]
        for bits in bits_list:
            w_sets = [torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, device="cuda")
                      for _ in range(n_sets(n * k * bits // 8))]
            for m in ms:
                try:
                    row = _bench_one(quantized_mm, select_tile, arch, n, k, bits, m, w_sets, bf_sets, check)
                except Exception as exc:  # noqa: BLE001 - record and go on with the other configurations
                    print(f"N={n} K={k} bits={bits} M={m}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    continue
                rows.append(row)
                if sink:
                    sink(rows)
            del w_sets
        del bf_sets
    return rows


def _bench_one(quantized_mm, select_tile, arch, n, k, bits, m, w_sets, bf_sets, check):
    packed_bytes = n * k * bits // 8
    scale = 0.01
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    from cute_kernels.weight_only import wgmma

    on_wgmma = wgmma.eligible(x, bits, n, k, None, x.dtype, arch.current_arch(x.device))
    # bf16 x: the dense path is available; the WGMMA path too for 1/2/4-bit on SM90
    path, tile = select_tile(bits, m, n, arch.sm_count(0), dense=True, k=k, wgmma=on_wgmma)
    out = quantized_mm(x, w_sets[0], scale, bits)
    err = _check(out, x, w_sets[0], scale, bits) if check else None
    ws = w_sets if m <= 256 else w_sets[:2]  # up to 256 tokens the weights stream (WGMMA path): from HBM, not L2
    t_ours, how = graph_time_us([lambda w=w: quantized_mm(x, w, scale, bits) for w in ws])
    variants = {}
    if path == "decode":  # both weight pipelines of the decode tiles, same run (config.DECODE_PLANS picks one)
        from cute_kernels.weight_only.config import decode_tile

        for ring in (True, False):
            tl = decode_tile(bits, m, n, arch.sm_count(0), ring=ring)
            e = _check(quantized_mm(x, w_sets[0], scale, bits, tile=tl), x, w_sets[0], scale, bits)
            variants["ring" if ring else "registers"] = (
                graph_time_us([lambda w=w, tl=tl: quantized_mm(x, w, scale, bits, tile=tl) for w in ws])[0], e)
    t_dequant = None
    if m >= LARGE_M:  # the two large-M paths forced side by side, and the dense path's dequantize alone
        from cute_kernels.weight_only import dequantize_weights

        for p in ("tensor_core", "dense") + (("wgmma",) if on_wgmma else ()):
            e = _check(quantized_mm(x, w_sets[0], scale, bits, path=p), x, w_sets[0], scale, bits)
            variants[p] = (graph_time_us([lambda w=w, p=p: quantized_mm(x, w, scale, bits, path=p) for w in ws])[0], e)
        t_dequant, _ = graph_time_us([lambda w=w: dequantize_weights(w, bits, k) for w in ws])
    bs = bf_sets if m < 64 else bf_sets[:1]
    # Session 40: as many calls per graph as ours - with 4 bf16 copies (ours: up to 32) the replay's launch weighed
    # several times more on each bf16 call than on ours; the tables recorded before this line carry that bias.
    t_ref, _ = graph_time_us([lambda w=w: torch.matmul(x, w.t()) for w in bs], min_calls=len(ws))
    host = eager_time_us(lambda: quantized_mm(x, w_sets[0], scale, bits)) if m == 1 else None
    row = dict(n=n, k=k, bits=bits, m=m, path=path, tile=list(tile.key) if tile else None, us=t_ours, bf16_us=t_ref,
               speedup=t_ref / t_ours, weight_gbs=packed_bytes / t_ours / 1e3,
               tflops=2 * m * n * k / t_ours / 1e6, bf16_tflops=2 * m * n * k / t_ref / 1e6,
               timing=how, host_us=host, max_err=err, sets=len(ws),
               pipelines={name: dict(us=v[0], err=v[1]) for name, v in variants.items()},
               dequant_us=t_dequant,
               dequant_gbs=None if t_dequant is None else (packed_bytes + n * k * 2) / t_dequant / 1e3)
    extra = "  ".join(f"{name} {v[0]:.2f}" for name, v in variants.items())
    if t_dequant is not None:
        extra += f"  dequantize {t_dequant:.2f} us ({row['dequant_gbs']:.0f} GB/s)"
    print(f"N={n} K={k} bits={bits} M={m:5d} {path:11s} {t_ours:9.2f} us  bf16 {t_ref:9.2f} us  "
          f"x{t_ref / t_ours:5.2f}  {row['weight_gbs']:7.0f} GB/s  {row['tflops']:6.1f} TF  [{how}]  {extra}",
          flush=True)
    return row


def bench_paths(shapes, bits_list, ms=(8, 16)):
    """Both paths forced at the same M: where the tensor-core tiles start to win."""
    from cute_kernels.weight_only import quantized_mm

    rows = []
    for n, k in shapes:
        for bits in bits_list:
            w_sets = [torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, device="cuda")
                      for _ in range(n_sets(n * k * bits // 8))]
            for m in ms:
                x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
                res = {}
                for path in ("decode", "tensor_core"):
                    res[path], _ = graph_time_us([lambda w=w, p=path: quantized_mm(x, w, 0.01, bits, path=p)
                                                  for w in w_sets])
                rows.append(dict(n=n, k=k, bits=bits, m=m, decode_us=res["decode"],
                                 tensor_core_us=res["tensor_core"]))
                print(f"paths N={n} K={k} bits={bits} M={m}: decode {res['decode']:.2f} us, "
                      f"tensor_core {res['tensor_core']:.2f} us", flush=True)
    return rows


def bench_tc_tiles(n=8192, k=8192, bits=4):
    """Candidate tensor-core tiles per M (config.TENSOR_CORE_TILE / TENSOR_CORE_SPLIT_K_TILE come from this)."""
    from cute_kernels.weight_only import quantized_mm
    from cute_kernels.weight_only.kernel import TileShape

    w_sets = [torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, device="cuda") for _ in range(2)]
    rows = []
    for m in (64, 256, 4096):
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        for tile in (TileShape(4, 4, 2, 1), TileShape(4, 4, 2, 4), TileShape(4, 4, 2, 2), TileShape(2, 4, 4, 2)):
            if m == 4096 and tile.warps_k > 1:
                continue
            try:
                t, _ = graph_time_us([lambda w=w: quantized_mm(x, w, 0.01, bits, path="tensor_core", tile=tile)
                                      for w in w_sets], replays=5)
            except Exception as exc:  # noqa: BLE001
                print(f"tile {tile.key}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            rows.append(dict(m=m, tile=list(tile.key), us=t, tflops=2 * m * n * k / t / 1e6))
            print(f"tc tile M={m} {tile.key}: {t:.1f} us, {2 * m * n * k / t / 1e6:.1f} TFLOPS", flush=True)
    return rows


def markdown(rows, copy_gbs, device):
    lines = [f"Device: {device}; copy bandwidth {copy_gbs:.0f} GB/s (read + write); bf16 x, per-tensor scale.", "",
             "| N | K | bits | M | path | ours µs | bf16 matmul µs | speedup | weight GB/s | % copy BW | TFLOPS | "
             "tensor core µs | dense µs | wgmma µs | dequantize µs (GB/s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def forced(r, p):
        v = r.get("pipelines", {}).get(p)
        return f"{v['us']:.2f}" if v else ""

    for r in rows:
        dq = f"{r['dequant_us']:.2f} ({r['dequant_gbs']:.0f})" if r.get("dequant_us") else ""
        lines.append(f"| {r['n']} | {r['k']} | {r['bits']} | {r['m']} | {r['path']} | {r['us']:.2f} | "
                     f"{r['bf16_us']:.2f} | {r['speedup']:.2f} | {r['weight_gbs']:.0f} | "
                     f"{100 * r['weight_gbs'] / copy_gbs:.0f}% | {r['tflops']:.1f} | {forced(r, 'tensor_core')} | "
                     f"{forced(r, 'dense')} | {forced(r, 'wgmma')} | {dq} |")
    return "\n".join(lines)


def panel_plot(png_path: str, panels: list, xlabel: str, ylabel: str, title: str, xticks=None) -> None:
    """One row of panels sharing y, one per ``(title, draw)`` in ``panels`` (``draw(ax)`` plots it), log2 x axis
    with a line at 1.0; saved to ``png_path``. Shared by this script's and bench_awq's plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), sharey=True)
    for ax, (panel_title, draw) in zip(axes, panels):
        draw(ax)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        if xticks is not None:
            ax.set_xticks(xticks)
            ax.set_xticklabels([str(t) for t in xticks])
        ax.set_title(panel_title)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_plot(fig, png_path)


def plot(json_path: str, png_path: str) -> None:
    data = json.load(open(json_path))
    rows = data["quantized_mm"]

    def draw(n, k):
        def on(ax):
            for m in MS:
                pts = sorted((r["bits"], r["speedup"]) for r in rows if r["n"] == n and r["k"] == k and r["m"] == m)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"M={m}")
        return on

    panel_plot(png_path, [(f"N={n}, K={k}", draw(n, k)) for n, k in SHAPES], "weight bits",
               "speedup vs bf16 torch.matmul", f"quantized_mm, {data['device']} ({data['date']})", xticks=BITS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true",
                    help=f"N = K = 8192, bits {QUICK_BITS}, M {QUICK_MS}: the large-M paths only")
    ap.add_argument("--decode", action="store_true",
                    help=f"every layer and width, M {DECODE_MS}: the decode path only")
    ap.add_argument("--bits", help="comma-separated widths instead of the mode's")
    ap.add_argument("--ms", help="comma-separated token counts instead of the mode's")
    ap.add_argument("--layers", help="comma-separated NxK layers instead of the mode's, e.g. 8192x8192")
    ap.add_argument("--plot", metavar="RESULTS_JSON", help="only draw the plot from a results.json")
    ap.add_argument("--png", default="weight_only_speedup.png")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot, args.png)
        return
    shapes, bits_list, ms = (SHAPES[:1], QUICK_BITS, QUICK_MS) if args.quick else (SHAPES, BITS, MS)
    if args.decode:
        shapes, bits_list, ms = SHAPES, BITS, DECODE_MS
    if args.bits:
        bits_list = [int(b) for b in args.bits.split(",")]
    if args.ms:
        ms = [int(m) for m in args.ms.split(",")]
    if args.layers:
        shapes = [tuple(int(v) for v in layer.split("x")) for layer in args.layers.split(",")]
    device = torch.cuda.get_device_name()
    copy_gbs, read_gbs = copy_bandwidth_gbs()
    print(f"{device}: copy bandwidth {copy_gbs:.0f} GB/s (read + write), read-only {read_gbs:.0f} GB/s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    data = dict(device=device, date=time.strftime("%Y-%m-%d"), copy_gbs=copy_gbs, read_gbs=read_gbs,
                quantized_mm=[], paths=[])

    def save(_rows=None):
        with open(os.path.join(args.out, "weight_only_results.json"), "w") as f:
            json.dump(data, f, indent=1)

    if not (args.quick or args.decode or args.bits or args.ms or args.layers):
        data["paths"] = bench_paths(shapes[:1], BITS)
        save()
        data["tc_tiles"] = bench_tc_tiles()
        save()
    rows = data["quantized_mm"] = bench_quantized_mm(shapes, bits_list, ms,
                                                     sink=lambda r: (data.update(quantized_mm=r), save()))
    save()
    md = markdown(rows, copy_gbs, device)
    with open(os.path.join(args.out, "weight_only_results.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
