"""Session 27: the weight's first stages loaded into the shared-memory ring before the PDL wait.

``Sm90GemmKernel.weight_preload``: before ``griddepcontrol.wait`` the producer acquires the first P stages of its
ring and TMAs the weight operand of its first work unit's K-tiles into them (with the weight-only path's group
parameters); the activations of those stages follow after the wait. Back to back, a CTA of call i + 1 becomes
resident when call i's CTA on its SM exits, so its weight loads run during call i's tail, when the memory system is
partly idle (session 26's timeline: the last CTA ends 0.7-4.4 µs after the median, and the first stage lands
1.7-5.7 µs after the wait). The ops' module switches (int8 / FP8 ``WEIGHT_PRELOAD_KTILES``, weight-only
``wgmma.WEIGHT_PRELOAD_STAGES``) select P; 16 means the whole ring (the kernel clamps to its stage count).

Per problem, through the public ops: every variant checked against float64 (NaN-poisoned output), then CUDA-graph
medians of back-to-back calls over weight copies rotated beyond L2, the variants interleaved over ROUNDS rounds.
``python benchmarks/experiments/weight_preload.py`` (env WP_FAMS int8,fp8,awq,int4,int1; WP_MS; WP_VARIANTS
"0,4,16"; WP_ROUNDS; WP_LAYERS; WP_ISOLATED "0,1"; WP_CHECK_ONLY=1 only compiles and checks, e.g. one process per family to fill the
compile cache in parallel before a timing run) writes $OUT/weight_preload.json and prints a table (µs, and each variant / off).
"""
import importlib
import json
import os
import statistics
import sys

sys.path[:0] = ["benchmarks"]
import torch

from cute_kernels import fp8_blockwise_scaled_mm, int8_scaled_mm
from cute_kernels.bench import graph_time_us, int8_operand_sets
from cute_kernels.formats import quantize_fp8_blockwise, quantize_fp8_per_token_group, to_tma_aligned_mn_major
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.ops import fp8_blockwise_scaled_mm as fp8_op
from cute_kernels.ops import int8_scaled_mm as int8_op
from cute_kernels.reference import (awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref,
                                    quantized_mm_ref)
from cute_kernels.weight_only import awq_gemm, quantized_mm, wgmma

wo_config = importlib.import_module("cute_kernels.weight_only.config")
awq_mod = importlib.import_module("cute_kernels.weight_only.awq")
_decode_tile = wo_config.decode_tile  # the modules, not the functions of that name
qmm_mod = importlib.import_module("cute_kernels.weight_only.quantized_mm")

OUT = os.environ.get("OUT", ".")
FAMS = os.environ.get("WP_FAMS", "int8,fp8,awq,int4,int1").split(",")
# K-tiles (stages) preloaded; "rule" = the shipped choice (configs.WEIGHT_PRELOAD, weight_only.wgmma.stage_options);
# "P/W" = P stages preloaded with the weight-only path's L2 warm-up at W stages; "d0" / "d1" = the rule with the
# decode path's (mma.sync, <= 16 tokens) first weight loads after / before the PDL wait; "ring" = the rule with the
# decode path's cp.async ring forced (where the preload takes effect)
VARIANTS = tuple(v if not v.isdigit() else int(v) for v in os.environ.get("WP_VARIANTS", "0,4,16").split(","))
_stage_options = wgmma.stage_options
ROUNDS = int(os.environ.get("WP_ROUNDS", "3"))
# 1: a one-element torch kernel (no PDL) between the calls, as when another op runs between two GEMMs
ISOLATED = tuple(bool(int(v)) for v in os.environ.get("WP_ISOLATED", "0").split(","))
CHECK_ONLY = bool(int(os.environ.get("WP_CHECK_ONLY", "0")))  # compile and check every variant, no timing
L2_MARGIN = 150 << 20
LAYERS = {"int8": ((4096, 4096), (14336, 4096), (4096, 14336)), "int2": ((4096, 4096), (8192, 8192)),
          "fp8": ((2112, 7168), (4096, 7168), (7168, 16384), (7168, 2048), (24576, 1536)),
          "awq": ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)),
          "int4": ((4096, 4096), (8192, 8192)), "int1": ((4096, 4096), (8192, 8192)),
          "wo8": ((4096, 4096), (14336, 4096), (8192, 8192))}
MS = {"int8": (1, 16, 64, 128), "fp8": (1, 64, 128), "awq": (16, 32, 64), "int4": (16, 64), "int2": (16, 64), "int1": (16, 64), "wo8": (1, 4, 16)}
if os.environ.get("WP_LAYERS"):  # e.g. "4096x4096,8192x8192" (N x K), for every family
    LAYERS = {f: tuple(tuple(int(v) for v in layer.split("x")) for layer in os.environ["WP_LAYERS"].split(","))
              for f in LAYERS}
if os.environ.get("WP_MS"):
    MS = {f: tuple(int(m) for m in os.environ["WP_MS"].split(",")) for f in MS}


def set_variant(p):
    wo_config.DECODE_PRELOAD = None  # "d0" / "d1": the decode path's TileShape.preload_weights forced off / on
    wo_config.decode_tile = _decode_tile
    if p == "ring":  # the rule with the decode path's cp.async ring forced
        wo_config.decode_tile = lambda *a, **kw: _decode_tile(*a, **{**kw, "ring": True})
        p = "rule"
    if isinstance(p, str) and p[0] == "d" and p[1:].isdigit():
        wo_config.DECODE_PRELOAD, p = bool(int(p[1:])), "rule"
    warmup = None
    if isinstance(p, str) and "/" in p:
        p, warmup = (int(v) for v in p.split("/"))
    wgmma.stage_options = _stage_options if warmup is None else (
        lambda *a: tuple(sorted(dict(_stage_options(*a), l2_warmup=warmup).items())))
    p = None if p == "rule" else p
    int8_op.WEIGHT_PRELOAD_KTILES = p
    fp8_op.WEIGHT_PRELOAD_KTILES = p
    wgmma.WEIGHT_PRELOAD_STAGES = p
    for plans in (int8_op._validated, fp8_op._validated, awq_mod._plans, qmm_mod._plans):
        plans.clear()


def rel_err(out, ref):
    if bool(out.isnan().any()):
        return float("nan")
    return ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()


def case(fam, m, n, k):
    """(list of calls over rotated weights, check() -> relative error, weight bytes)."""
    dev = "cuda"
    if fam == "int8":
        sets = int8_operand_sets(m, n, k, max(2, -(-L2_MARGIN // (n * k))))
        out = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
        calls = [lambda s=s: int8_scaled_mm(*s, out=out) for s in sets]

        def check():
            out.fill_(float("nan"))
            calls[0]()
            return rel_err(out, int8_scaled_mm_ref(*(t.cpu() for t in sets[0])))

        check.out = out  # the output check() wrote (session 28: split_cluster.py compares variants)
        return calls, check, n * k
    if fam == "fp8":
        a, sa = quantize_fp8_per_token_group(torch.randn(m, k, device=dev), 128)
        sa = to_tma_aligned_mn_major(sa)
        ws = [quantize_fp8_blockwise(torch.randn(n, k, device=dev), 128)
              for _ in range(max(2, -(-L2_MARGIN // (n * k))))]
        out = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
        calls = [lambda w=w: fp8_blockwise_scaled_mm(a, w[0], sa, w[1], out=out) for w in ws]

        def check():
            out.fill_(float("nan"))
            calls[0]()
            return rel_err(out, fp8_blockwise_scaled_mm_ref(a.cpu(), ws[0][0].cpu(), sa.cpu(), ws[0][1].cpu()))

        check.out = out  # the output check() wrote (session 28: split_cluster.py compares variants)
        return calls, check, n * k
    x = torch.randn(m, k, device=dev).half()
    out = torch.empty((m, n), dtype=torch.float16, device=dev)
    if fam == "awq":
        nbytes = n * k // 2
        ws = []
        for _ in range(max(2, -(-L2_MARGIN // nbytes))):
            qweight = torch.randint(-2**31, 2**31 - 1, (k, n // 8), dtype=torch.int32, device=dev)
            qzeros = torch.randint(-2**31, 2**31 - 1, (k // 128, n // 8), dtype=torch.int32, device=dev)
            scales = (torch.rand(k // 128, n, device=dev) * 0.01 + 0.001).half()
            ws.append((qweight, scales, qzeros))
        calls = [lambda w=w: awq_gemm(x, *w, out=out) for w in ws]

        def check():
            out.fill_(float("nan"))
            calls[0]()
            return rel_err(out, awq_gemm_ref(x.cpu(), *(t.cpu() for t in ws[0])))

        check.out = out  # the output check() wrote (session 28: split_cluster.py compares variants)
        return calls, check, nbytes
    bits = int(fam[2:]) if fam.startswith("wo") else int(fam[3:])  # "wo8": 8-bit weights (int8 is int8_scaled_mm)
    nbytes = n * k * bits // 8
    ws = [quantize_weights(torch.randn(n, k, device=dev), bits, None)[:2]
          for _ in range(max(2, -(-L2_MARGIN // nbytes)))]
    calls = [lambda w=w: quantized_mm(x, w[0], float(w[1]), bits, out=out) for w in ws]

    def check():
        out.fill_(float("nan"))
        calls[0]()
        return rel_err(out, quantized_mm_ref(x.cpu(), ws[0][0].cpu(), float(ws[0][1]), bits))

    check.out = out  # the output check() wrote (session 28: split_cluster.py compares variants)
    return calls, check, nbytes


def main():
    torch.manual_seed(0)
    rows = []
    for fam in FAMS:
        for n, k in LAYERS[fam]:
            for m in MS[fam]:
                calls, check, nbytes = case(fam, m, n, k)
                errs = {}
                for p in VARIANTS:
                    set_variant(p)
                    errs[p] = check()
                    assert errs[p] < 2e-2, (fam, m, n, k, p, errs[p])
                if CHECK_ONLY:
                    print(fam, m, n, k, errs, flush=True)
                    continue
                pad = torch.zeros(1, device="cuda")
                for iso in ISOLATED:
                    timed = [lambda c=c: (pad.add_(1.0), c()) for c in calls] if iso else calls
                    times = {p: [] for p in VARIANTS}
                    for _ in range(ROUNDS):
                        for p in VARIANTS:
                            set_variant(p)
                            times[p].append(graph_time_us(timed)[0])
                    row = dict(fam=fam, m=m, n=n, k=k, isolated=iso, weight_MB=nbytes / 1e6,
                               max_err=max(errs.values()),
                               **{f"p{p}": round(statistics.median(times[p]), 2) for p in VARIANTS},
                               **{f"p{p}_all": [round(t, 2) for t in times[p]] for p in VARIANTS})
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                del calls
                torch.cuda.empty_cache()
    set_variant("rule")
    if CHECK_ONLY:
        return
    with open(os.path.join(OUT, "weight_preload.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "variants": VARIANTS, "rows": rows}, f, indent=1)
    base = VARIANTS[0]
    print(f"\n{torch.cuda.get_device_name()}: µs (CUDA-graph medians of {ROUNDS} interleaved rounds), "
          f"and each variant / p{base}")
    print("| op | M | N | K | iso | " + " | ".join(f"p{p}" for p in VARIANTS) + " |")
    print("|---|---:|---:|---:|---|" + "---:|" * len(VARIANTS))
    for r in rows:
        cells = [f"{r[f'p{p}']}" + ("" if p == base else f" ({r[f'p{p}'] / r[f'p{base}']:.3f})") for p in VARIANTS]
        print(f"| {r['fam']} | {r['m']} | {r['n']} | {r['k']} | {int(r['isolated'])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
