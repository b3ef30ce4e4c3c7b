"""Session 10: the own-block GEMM of the p2p reduce-scatter with an added operand c gated by ready flags, on one GPU.

Questions: (1) what does reading c in the epilogue cost over the plain GEMM (fp32 / bf16 c), and what does the
flag check add when the flags are already set; (2) does the whole pattern work - a side stream fills c by 2-D
column-chunk copies and sets each chunk's flag with cuStreamWriteValue32 while the gated GEMM runs - eagerly and
captured in a CUDA graph, and what does it cost against the plain GEMM. Every variant is checked against float64
first. Times: CUDA-graph medians (cute_kernels.bench.graph_time_us), rows x 8192 x 8192, bf16 out.
Run from the project root: python benchmarks/experiments/gated_c.py
"""
import dataclasses
import json
import os

import torch

from cute_kernels import int8_scaled_mm
from cute_kernels.ops import int8_scaled_mm as op
from cute_kernels.bench import graph_time_us
from cute_kernels.epilogues import chunk_extent
from cute_kernels.reference import int8_scaled_mm_ref
from cute_kernels.streams import RawEvent, current_stream_id, memcpy_async, write_value32
from cute_kernels.configs import select_sm90_int8

OUT = os.environ.get("OUT", ".")
PART = os.environ.get("GATED_PART", "all")  # "timing" | "pipeline" | "all": a trapped pipeline kills its process
N = K = 8192
rows_out = []


def check(out, a, b, sa, sb, c, tag):
    r = slice(0, 256)
    ref = int8_scaled_mm_ref(a[r], b, sa[r], sb) + c[r].double()
    err = ((out[r].double() - ref).abs() / (ref.abs() + 1.0)).max().item()
    nan = torch.isnan(out).any().item()
    ok = err < 2e-2 and not nan
    print(f"  check {tag}: max rel err {err:.2e} nan {nan} -> {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def pipelined(a, b, sa, sb, out, c, src, flags, side, ev):
    """Side stream: F row chunks of src -> c (1-D copies), each followed by its flag; main: the gated GEMM; then
    the flags are reset in stream order."""
    main = current_stream_id(out.device)
    ev.record(main)
    ev.wait(side)
    f, m = flags.numel(), c.shape[0]
    chunk = chunk_extent(m, f)
    row_bytes = N * c.element_size()
    for i in range(f):
        r0, r1 = min(i * chunk, m), min((i + 1) * chunk, m)
        if r1 > r0:
            memcpy_async(c.data_ptr() + r0 * row_bytes, src.data_ptr() + r0 * row_bytes, (r1 - r0) * row_bytes,
                         side)
        write_value32(flags.data_ptr() + 4 * i, 1, side)
    int8_scaled_mm(a, b, sa, sb, out=out, c=c, c_ready=flags)
    flags.zero_()
    ev.record(side)  # join the side stream back (capture needs it; eagerly it orders the next call's copies)
    ev.wait(main)


def operands(m):
    a = torch.randint(-128, 128, (m, K), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda").t()
    sa, sb = torch.rand(m, device="cuda") * 1e-3, torch.rand(N, device="cuda") * 1e-3
    out = torch.full((m, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    return a, b, sa, sb, out


def timing(m, res):
    a, b, sa, sb, out = operands(m)
    res["plain"] = round(graph_time_us([lambda: int8_scaled_mm(a, b, sa, sb, out=out)])[0], 1)
    banded = dataclasses.replace(select_sm90_int8(m, N, K, 1, 132), row_bands=2)
    res["plain_banded"] = round(graph_time_us([lambda: int8_scaled_mm(a, b, sa, sb, out=out, config=banded)])[0], 1)
    for cd in (torch.float32, torch.bfloat16):
        c = (torch.randn(m, N, device="cuda") * 50).to(cd)
        for pf in (False, True):
            op.C_L2_PREFETCH = pf
            op._validated.clear()
            out.fill_(float("nan"))
            int8_scaled_mm(a, b, sa, sb, out=out, c=c)
            check(out, a, b, sa, sb, c, f"M={m} c {cd} l2 prefetch {pf}")
            res[f"c_{str(cd)[6:]}{'_l2pf' if pf else ''}"] = round(
                graph_time_us([lambda: int8_scaled_mm(a, b, sa, sb, out=out, c=c)])[0], 1)
        flags = torch.ones(8, dtype=torch.int32, device="cuda")
        out.fill_(float("nan"))
        int8_scaled_mm(a, b, sa, sb, out=out, c=c, c_ready=flags)
        check(out, a, b, sa, sb, c, f"M={m} c {cd} gated, flags set")
        res[f"gated_set_{str(cd)[6:]}"] = round(graph_time_us(
            [lambda: int8_scaled_mm(a, b, sa, sb, out=out, c=c, c_ready=flags)])[0], 1)


def pipeline(m, res):
    """The whole pattern with fp32 c copied from src by the copy engine on a side stream."""
    a, b, sa, sb, out = operands(m)
    side = torch.cuda.Stream().cuda_stream
    ev = RawEvent(a.device)
    src = torch.randn(m, N, device="cuda") * 50
    c = torch.full((m, N), float("nan"), device="cuda")
    for f in (4, 8):
        flags = torch.zeros(f, dtype=torch.int32, device="cuda")
        out.fill_(float("nan"))
        pipelined(a, b, sa, sb, out, c, src, flags, side, ev)
        torch.cuda.synchronize()
        check(out, a, b, sa, sb, src, f"M={m} pipelined eager F={f}")
        us, how = graph_time_us([lambda: pipelined(a, b, sa, sb, out, c, src, flags, side, ev)])
        torch.cuda.synchronize()
        check(out, a, b, sa, sb, src, f"M={m} pipelined after timing F={f}")
        res[f"pipelined_F{f}"] = f"{us:.1f} {how}"
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(10):
        memcpy_async(c.data_ptr(), src.data_ptr(), c.numel() * 4, current_stream_id(a.device))
    t1.record()
    torch.cuda.synchronize()
    res["copy_alone_us"] = round(t0.elapsed_time(t1) * 100, 1)


for m in (1024, 2048, 4096):
    res = {"M": m}
    if PART in ("timing", "all"):
        timing(m, res)
    if PART in ("pipeline", "all"):
        pipeline(m, res)
    rows_out.append(res)
    print(json.dumps(res), flush=True)
json.dump(rows_out, open(os.path.join(OUT, f"gated_c_{PART}.json"), "w"), indent=1)
