"""Session 24: the SM90 kernels on our own persistent tile schedule (``sm90.tile_schedule``) against the DSL's
deprecated ``StaticPersistentTileScheduler`` they used before - same tile order, so the times should match.

Times a fixed list of problems (int8, FP8, AWQ on the WGMMA path; swizzled, clustered, split-K, batched; and the
session's FP8 65-128-token dispatch change, which differs between the two packages) with the
``cute_kernels`` found first on sys.path: run it once per package, alternating, e.g.

    SAB_PKG=.device/old python benchmarks/experiments/sched_ab.py old   # a copy of the previous commit's package
    python benchmarks/experiments/sched_ab.py new

Each problem: output NaN-poisoned and checked against float64 first, then CUDA-graph medians (weights rotated over
three copies). Appends JSON lines to $OUT/sched_ab.jsonl. SAB_ONLY: comma-separated problem names to run.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("SAB_PKG") or os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402

import cute_kernels  # noqa: E402
from cute_kernels import int8_scaled_mm  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402

LABEL = sys.argv[1] if len(sys.argv) > 1 else "run"
GW = (1, 128, 128)


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def int8_problem(m, n, k, batch=None):
    lead = () if batch is None else (batch,)
    a = torch.randint(-128, 128, (*lead, m, k), dtype=torch.int8, device="cuda")
    ws = [torch.randint(-128, 128, (*lead, n, k), dtype=torch.int8, device="cuda").transpose(-1, -2)
          for _ in range(3)]
    sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    out = torch.full((*lead, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, ws[0], sa, sb, bias, out=out)
    rows = slice(0, min(m, 256))
    a0, o0, w0 = (a, out, ws[0]) if batch is None else (a[-1], out[-1], ws[0][-1])
    err = rel(o0[rows], int8_scaled_mm_ref(a0[rows], w0, sa[rows], sb, bias))
    return err, [lambda w=w: int8_scaled_mm(a, w, sa, sb, bias, out=out) for w in ws]


def fp8_problem(m, n, k, stride4=False):
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    sa = a_s.t().contiguous().t()
    if stride4:  # MN-major with a 4-row-aligned column stride (vLLM's padded layout): TMA-stageable at any M
        store = torch.zeros(k // 128, -(-m // 4) * 4, device="cuda")
        store[:, :m] = a_s.t()
        sa = store.t()[:m]
    bs = []
    for _ in range(3):
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
        bs.append((b, b_s.t().contiguous().t()))
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, bs[0][0], sa, bs[0][1], scale_granularity=GW, out=out)
    rows = slice(0, min(m, 256))
    err = rel(out[rows], fp8_blockwise_scaled_mm_ref(a[rows], bs[0][0], a_s[rows], bs[0][1].contiguous(), GW))
    return err, [lambda b=b: fp8_blockwise_scaled_mm(a, b[0], sa, b[1], scale_granularity=GW, out=out) for b in bs]


def awq_problem(m, oc, ic):
    from cute_kernels.formats.awq import awq_dequantize_float, awq_pack
    from cute_kernels.weight_only import awq_gemm

    g = 128
    packs = []
    for _ in range(3):
        q = torch.randint(0, 16, (ic, oc), dtype=torch.int32, device="cuda")
        z = torch.randint(0, 16, (ic // g, oc), dtype=torch.int32, device="cuda")
        s = (torch.rand(ic // g, oc, device="cuda") * 0.02 + 0.005).half()
        packs.append(awq_pack(q, z, s, g))  # (qweight, qzeros, scales)
    x = torch.randn(m, ic, device="cuda").half()
    out = awq_gemm(x, packs[0][0], packs[0][2], packs[0][1])
    w = awq_dequantize_float(packs[0][0], packs[0][2], packs[0][1]).double()
    err = rel(out, x.double() @ w)
    return err, [lambda p=p: awq_gemm(x, p[0], p[2], p[1]) for p in packs]


PROBLEMS = {
    "int8 8192^3": lambda: int8_problem(8192, 8192, 8192),
    "int8 M=1 4096^2": lambda: int8_problem(1, 4096, 4096),
    "int8 M=256 4096x14336": lambda: int8_problem(256, 4096, 14336),
    "int8 M=1024 14336x4096": lambda: int8_problem(1024, 14336, 4096),
    "int8 batched 4x1024x4096x4096": lambda: int8_problem(1024, 4096, 4096, batch=4),
    "fp8 8192^3": lambda: fp8_problem(8192, 8192, 8192),
    "fp8 M=64 7168x16384": lambda: fp8_problem(64, 7168, 16384),
    "fp8 M=1024 2112x7168": lambda: fp8_problem(1024, 2112, 7168),
    "awq M=64 4096^2": lambda: awq_problem(64, 4096, 4096),
    # the session's FP8 dispatch change (MID_M_64_ROWS_LONG_K): 128-row (old) -> 64-row tiles (new)
    "fp8 M=97 7168x16384 sa4": lambda: fp8_problem(97, 7168, 16384, stride4=True),
    "fp8 M=97 4096x14336 sa4": lambda: fp8_problem(97, 4096, 14336, stride4=True),
    "fp8 M=128 2048x16384": lambda: fp8_problem(128, 2048, 16384),
}


def main():
    path = os.path.join(os.environ.get("OUT", "."), "sched_ab.jsonl")
    dev = torch.cuda.get_device_name()
    only = [o for o in os.environ.get("SAB_ONLY", "").split(",") if o]
    for name, make in PROBLEMS.items():
        if only and not any(o == name for o in only):
            continue
        err, calls = make()
        assert err < 1e-2, (name, err)
        times = [graph_time_us(calls)[0] for _ in range(3)]
        row = dict(label=LABEL, pkg=os.path.dirname(cute_kernels.__file__), device=dev, problem=name, err=err,
                   us=statistics.median(times), rounds=times)
        print(f"{LABEL:4s} {name:32s} {row['us']:9.2f} us  err {err:.1e}", flush=True)
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
