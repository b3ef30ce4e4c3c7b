"""Session 15: where the WGMMA path (now with 16-token tiles, four K-tiles of WGMMAs in flight and, for 1/2-bit,
two K-tiles per stage) overtakes the decode path at 1-16 tokens, per format and layer.

Through the ops with the path forced (``quantized_mm(..., path=...)``, ``awq_gemm(..., path=...)``), so what is timed
is what the dispatch would run: decode vs wgmma for int1 / int2 / int4 (per-tensor scale, bf16 x), int4 g128
(int4g, bf16 scales) and AWQ g128 (fp16 x), M in {1, 2, 4, 8, 12, 16}, on the issues' four layers; plus the
shipped dispatch (``path=None``) and torch.matmul on the dense weight. Every (family, path) is checked against
float64 first (ragged problem, NaN-poisoned output). CUDA-graph medians, weight copies rotated past L2.
Session 16 reran it for the grouped formats (int4g, int2g, int1g, awq; WO_FAMS) after the WGMMA path's group
parameters moved into its TMA stages (data/session16_h100/).
Prints a table; writes $OUT/wo_crossover.json.
"""
import json
import os
import statistics

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.formats.awq import awq_dequantize_float, awq_quantize
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import awq_gemm, quantized_mm

OUT = os.environ.get("OUT", ".")
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,8,12,16").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "int1,int2,int4,int4g,awq").split(","))
PATHS = ("decode", "wgmma", None)
L2_MARGIN = 150 << 20


def family(fam):
    dtype = torch.float16 if fam == "awq" else torch.bfloat16
    group = 128 if fam == "awq" or fam.endswith("g") else None  # int4g, int2g, int1g: bf16 group scales g128
    bits = 4 if fam == "awq" else int(fam[3])
    return dtype, group, bits


def make(fam, n, k):
    dtype, group, bits = family(fam)
    if fam == "awq":
        q, z, s = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, group, dtype)
        return q, s, z
    w, s, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    return w, s, None if gs is None else gs.to(dtype)


def weight_copies(fam, n, k, margin=L2_MARGIN):
    """Enough copies of one layer's weights (2-8) that a graph rotating over them reads past L2."""
    bits = family(fam)[2]
    return [make(fam, n, k) for _ in range(max(2, min(8, -(-margin // (n * k * bits // 8)))))]


def interleaved_medians(fns, wts, rounds):
    """{name: median µs} and {name: every round's µs} of ``fns`` (name -> callable(weights)), each timed as a CUDA
    graph over ``wts`` (``graph_time_us``), the names interleaved round by round."""
    times = {v: [] for v in fns}
    for _ in range(rounds):
        for v, f in fns.items():
            times[v].append(graph_time_us([lambda w=w, f=f: f(w) for w in wts])[0])
    return {v: statistics.median(t) for v, t in times.items()}, times


def shipped_path(fam, m, n, k):
    """The path the dispatch picks for ``fam`` at M tokens on an N x K layer (an SM90 with 132 SMs)."""
    from cute_kernels.weight_only import config

    dtype, group, bits = family(fam)
    return config.select_tile(bits, m, n, 132, scaled=group is not None, awq=fam == "awq", dense=fam != "awq", k=k,
                              wgmma=True)[0]


def rule_rows(families, layers, ms, rules, use, path_of, rounds):
    """Rows timing the dispatch (no path forced) under each of ``rules`` (names; ``use(name)`` switches to one),
    interleaved round by round, per family, layer and M: medians per rule, every round's times ("all") and the path
    ``path_of(fam, m, n, k)`` each rule picks ("paths"). Weight copies rotated past L2 (``weight_copies``)."""
    rows = []
    for fam in families:
        dtype = family(fam)[0]
        for n, k in layers:
            wts = weight_copies(fam, n, k)
            for m in ms:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                times, paths = {r: [] for r in rules}, {}
                for _ in range(rounds):
                    for r in rules:
                        use(r)
                        paths[r] = path_of(fam, m, n, k)
                        times[r].append(graph_time_us([lambda w=w: call(fam, x, w, out, None) for w in wts])[0])
                row = {"fam": fam, "M": m, "N": n, "K": k, "paths": paths,
                       **{r: statistics.median(t) for r, t in times.items()}, "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    return rows


def call(fam, x, wt, out, path):
    bits = family(fam)[2]
    if fam == "awq":
        return awq_gemm(x, *wt, out=out, path=path)
    return quantized_mm(x, wt[0], wt[1], bits, wt[2], out=out, path=path)


def check():
    bad = 0
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        n, k = 520, 2176
        wt = make(fam, n, k)
        for m in (1, 5, 16):
            x = torch.randn(m, k, dtype=dtype, device="cuda")
            if fam == "awq":
                ref = awq_gemm_ref(x.cpu(), wt[0].cpu(), wt[1].cpu(), wt[2].cpu())
            else:
                gs = None if wt[2] is None else wt[2].float().cpu()
                ref = quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits, gs)
            for path in PATHS:
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                call(fam, x, wt, out, path)
                err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                if out.isnan().any() or err > (1.5e-3 if dtype == torch.float16 else 8e-3):
                    bad += 1
                    print("CHECK FAILED", fam, m, path, err, flush=True)
    print(f"checks: {bad} failed", flush=True)


def main():
    check()
    rows = []
    for fam in FAMILIES:
        dtype, group, bits = family(fam)
        for n, k in LAYERS:
            copies = max(2, min(8, -(-L2_MARGIN // (n * k * bits // 8))))
            wts = [make(fam, n, k) for _ in range(copies)]
            if fam == "awq":
                dense = [awq_dequantize_float(*w).to(dtype).t().contiguous() for w in wts[:2]]
            else:
                dense = [unpack_weights(w[0], bits, k).to(dtype) * w[1] for w in wts[:2]]
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                row = {"fam": fam, "M": m, "N": n, "K": k}
                for path in PATHS:
                    row[str(path)] = graph_time_us([lambda w=w, p=path: call(fam, x, w, out, p) for w in wts])[0]
                row["dense"] = graph_time_us([lambda wd=wd: torch.matmul(x, wd.t(), out=out) for wd in dense])[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
            del wts, dense
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_crossover.json"), "w") as f:
        json.dump({"device": dev, "rows": rows}, f)
    print(f"\n{dev}: µs; shipped = the dispatch (path=None); x dense = torch.matmul time / best path")
    print(f"{'fam':5s} {'N':>6s} {'K':>6s} " + " ".join(f"M={m:<2d} dec/wgmma" for m in MS))
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d} {k:6d} " + " ".join(f"{r['decode']:6.1f}/{r['wgmma']:<6.1f}" for r in rs))
    print("\nspeedup of the better path over torch.matmul (dense weight):")
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d} {k:6d} " + " ".join(
                f"{r['dense'] / min(r['decode'], r['wgmma']):13.2f}" for r in rs))


if __name__ == "__main__":
    main()
