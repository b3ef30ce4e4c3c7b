"""Benchmark: int8 matmul + reduce-scatter, overlapped, against its parts and the sequential baselines (issue 6).

One command on a machine with W GPUs (recorded on nvidia-h200-x2):

    torchrun --nproc_per_node=2 benchmarks/bench_reduce_scatter.py --out $OUT
    (or: python3 -m torch.distributed.run --nproc_per_node=2 benchmarks/bench_reduce_scatter.py --out $OUT)

Every rank holds x1 int8 [M, K] (its K shard; K is per rank), x2 = w.t() of an int8 [N, K] weight shard, per-token
and per-channel fp32 scales; the result is [M / W, N] bf16 per rank. Variants, side by side in one run:
    compute       our int8 GEMM on the whole [M, K] x [K, N], fp32 out (what the op computes, one launch)
    compute_chunk the op's chunk GEMMs alone, no communication (the cost of cutting the GEMM up)
    comm          reduce_scatter of the fp32 [M, N] partial alone (comm_bf16: of a bf16 one)
    seq_ours      our GEMM, then reduce_scatter, then the cast to bf16 (what a user writes without the op)
    seq_int_mm    torch._int_mm, dequantize in torch, reduce_scatter, cast
    op_*          quantized_matmul_reduce_scatter: auto chunks, fixed chunks, bf16 reduce, a high-priority NCCL
                  stream, fewer NCCL CTAs, fewer GEMM SMs, with bias
    async_tp      torch's symmetric-memory pipelined matmul-reduce-scatter (copy engines) driving our GEMM
Timing: CUDA events around a fixed number of back-to-back iterations after warm-up (no do_bench: collectives must
run the same number of times on every rank), reported as the max over ranks of the mean per iteration.
A correctness check of the op against the float64 reference runs first. Writes results.json, results.md,
bench_reduce_scatter.png, and (rank 0, largest M) timeline.png + trace_rank0.json to --out; prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# NVLink multicast stays off: the device machines' rule (it can take a shared host's GPUs down), kept even if the
# launcher's environment lost it; torch's symmetric memory (async_tp) and NCCL NVLS would otherwise use it.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

from cute_kernels.bench import save_plot  # noqa: E402
from cute_kernels.distributed import (  # noqa: E402
    Int8ScaledMmChunkGemm,
    TorchIntMmChunkGemm,
    auto_num_chunks,
    plan_chunks,
    quantized_matmul_reduce_scatter,
)
from cute_kernels.distributed.rank_agreement import reduce_scatter_single  # noqa: E402

RANK = 0
WORLD = 1


def log(*args):
    if RANK == 0:
        print(*args, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default="512,1024,2048,4096,8192", help="comma-separated total M values")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--k", type=int, default=8192, help="K per rank")
    p.add_argument("--chunks", default="1,2,4,8", help="fixed chunk counts timed besides the automatic plan")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--gemm", choices=("auto", "cute", "torch"), default="auto",
                   help="chunk GEMM: cute = int8_scaled_mm (needs fp32 output), torch = torch._int_mm + epilogue")
    p.add_argument("--no-knobs", action="store_true", help="skip the NCCL-CTA / GEMM-SM / priority sweep")
    p.add_argument("--no-timeline", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", "out/bench_reduce_scatter"))
    return p.parse_args()


# ---------------------------------------------------------------------------------------------------------------
# timing


def time_ms(fn, iters, warmup):
    """Mean ms per iteration over `iters` back-to-back calls, max over ranks; an exception becomes a string."""
    try:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        ms = torch.tensor([start.elapsed_time(end) / iters], device="cuda")
        failed = torch.zeros(1, device="cuda")
    except Exception as error:  # noqa: BLE001 - a variant that cannot run is reported, the sweep goes on
        ms, failed = torch.zeros(1, device="cuda"), torch.ones(1, device="cuda")
        message = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        print(f"[rank {RANK}] {message}", file=sys.stderr, flush=True)
    # Every rank reaches these collectives whether or not its variant failed. (A variant that failed on some ranks
    # only, after posting collectives, would desynchronize the group; the group timeout then ends the run.)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    return "error" if failed.item() else ms.item()


# ---------------------------------------------------------------------------------------------------------------
# operands and variants


def operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
    s1 = torch.rand(m, device="cuda", generator=g) * 1e-3 + 5e-4
    s2 = torch.rand(n, device="cuda", generator=g) * 1e-3 + 5e-4
    bias = torch.randint(-2**16, 2**16, (n,), dtype=torch.int32, device="cuda", generator=g)
    return x1, w.t(), s1, s2, bias


def pick_gemm(kind):
    """The chunk GEMM to benchmark, and why when the library's is not usable (it needs fp32 partial output)."""
    if kind in ("auto", "cute"):
        try:
            gemm = Int8ScaledMmChunkGemm()
            a = torch.randint(-128, 128, (2, 128, 64), dtype=torch.int8, device="cuda")
            b = torch.randint(-128, 128, (128, 64), dtype=torch.int8, device="cuda").t()
            sa, sb = torch.rand(2, 128, device="cuda"), torch.rand(128, device="cuda")
            out = torch.full((2, 128, 128), float("nan"), device="cuda")
            gemm(a, b, sa, sb, None, out)
            ref = (a.double() @ b.double()) * sa.double()[..., None] * sb.double()
            if not torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-6):
                raise RuntimeError("int8_scaled_mm fp32 output differs from the reference")
            return gemm, "cute_kernels.int8_scaled_mm"
        except Exception as error:  # noqa: BLE001
            if kind == "cute":
                raise
            note = f"torch._int_mm + torch epilogue (int8_scaled_mm unusable here: {type(error).__name__}: " \
                   f"{str(error).splitlines()[0][:120]})"
            return TorchIntMmChunkGemm(), note
    return TorchIntMmChunkGemm(), "torch._int_mm + torch epilogue"


def chunk_gemms_only(gemm, x1, x2, s1, s2, partial, plan):
    """The op's chunk GEMMs without the communication."""
    a_blocks = x1.unflatten(0, (WORLD, plan.rows_per_rank))
    s_blocks = s1.unflatten(0, (WORLD, plan.rows_per_rank))
    n = x2.shape[1]
    for r0, r1 in plan.bounds:
        rows = r1 - r0
        gemm(a_blocks[:, r0:r1], x2, s_blocks[:, r0:r1], s2, None, partial[: WORLD * rows * n].view(WORLD, rows, n))


def async_tp(gemm, x1, x2, s1, s2, group):
    """torch's symmetric-memory pipeline (chunk per destination rank, copy-engine transfers, local sum) + our GEMM."""
    from torch.distributed import _symmetric_memory as symm_mem

    k = x1.shape[1]

    def mm_out(a, b, out):
        row0 = (a.data_ptr() - x1.data_ptr()) // k
        gemm(a[None], b, s1[row0:row0 + a.shape[0]][None], s2, None, out[None])

    reduced = symm_mem._fused_matmul_reduce_scatter_impl(mm_out, x1, x2, {}, torch.float32, "sum", 0,
                                                          group.group_name)
    return reduced.to(torch.bfloat16)


def nccl_group(high_priority=False, max_ctas=None):
    """A new NCCL group with its own stream priority / CTA cap; None where this torch cannot set the option."""
    opts = dist.ProcessGroupNCCL.Options()
    opts.is_high_priority_stream = high_priority
    if max_ctas is not None:
        try:
            opts.config.max_ctas = max_ctas
        except AttributeError:
            return None
    return dist.new_group(backend="nccl", pg_options=opts)


def check_correctness(gemm, n, k, m):
    """The op on real shapes against the float64 reference built from every rank's operands (regenerated here)."""
    shards = [operands(m, n, k, seed=1000 + r) for r in range(WORLD)]
    x1, x2, s1, s2, bias = shards[RANK]
    bias = shards[0][4]
    out = torch.full((m // WORLD, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    quantized_matmul_reduce_scatter(x1, x2, s1, s2, bias, out=out, gemm=gemm)
    rows = slice(RANK * (m // WORLD), (RANK + 1) * (m // WORLD))
    ref = torch.zeros(m // WORLD, n, dtype=torch.float64, device="cuda")
    for a, b, sa, sb, _ in shards:
        ref += (a[rows].double() @ b.double()) * sa[rows].double()[:, None] * sb.double()
    ref += bias.double() * shards[0][2][rows].double()[:, None] * shards[0][3].double()
    worst = torch.stack([(out.double() - ref).norm() / ref.norm(), torch.isnan(out).any().double()])
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    del shards
    torch.cuda.empty_cache()
    return worst[0].item(), bool(worst[1].item())


# ---------------------------------------------------------------------------------------------------------------
# the sweep


def sweep_m(m, args, gemm, groups, chunk_list):
    n, k = args.n, args.k
    x1, x2, s1, s2, bias = operands(m, n, k, seed=RANK)
    rows = m // WORLD
    part = torch.empty(m, n, dtype=torch.float32, device="cuda")
    part_bf16 = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    red = torch.empty(rows, n, dtype=torch.float32, device="cuda")
    red_bf16 = torch.empty(rows, n, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(rows, n, dtype=torch.bfloat16, device="cuda")
    auto = auto_num_chunks(rows, n, WORLD, gemm.row_align)
    plan = plan_chunks(rows, auto, gemm.row_align)
    t = lambda fn: "n/a" if fn is None else time_ms(fn, args.iters, args.warmup)  # noqa: E731

    def op(with_bias=False, **kw):
        if kw.get("group", dist.group.WORLD) is None or kw.get("gemm", gemm) is None:
            return None  # a knob this torch / kernel does not offer
        kw.setdefault("validate_across_ranks", False)
        kw.setdefault("gemm", gemm)
        b = bias if with_bias else None
        return lambda: quantized_matmul_reduce_scatter(x1, x2, s1, s2, b, out=out, **kw)

    def seq_ours():
        gemm(x1[None], x2, s1[None], s2, None, part[None])
        reduce_scatter_single(red, part)
        out.copy_(red)

    def seq_int_mm():
        acc = torch._int_mm(x1, x2)
        torch.mul(acc * s1[:, None], s2, out=part)
        reduce_scatter_single(red, part)
        out.copy_(red)

    r = {"M": m, "auto_chunks": plan.num_chunks}
    r["compute"] = t(lambda: gemm(x1[None], x2, s1[None], s2, None, part[None]))
    r["compute_chunk"] = t(lambda: chunk_gemms_only(gemm, x1, x2, s1, s2, part.view(-1), plan))
    r["comm"] = t(lambda: reduce_scatter_single(red, part))
    r["comm_bf16"] = t(lambda: reduce_scatter_single(red_bf16, part_bf16))
    r["seq_ours"] = t(seq_ours)
    r["seq_int_mm"] = t(seq_int_mm)
    r["op_auto"] = t(op())
    r["op_auto_validated"] = t(op(validate_across_ranks=True))
    for c in chunk_list:
        r[f"op_c{c}"] = t(op(chunks=c))
    r["op_auto_hp"] = t(op(group=groups["hp"]))
    r["op_auto_bf16"] = t(op(reduce_dtype=torch.bfloat16))
    if not args.no_knobs and m == max(int(v) for v in args.m.split(",")):
        r["op_auto_bias"] = t(op(with_bias=True))
        for ctas in (8, 16, 32):
            r[f"op_auto_hp_ctas{ctas}"] = t(op(group=groups[f"hp{ctas}"]))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for reserve in (8, 16, 24):
            # Needs int8_scaled_mm(sm_count=): reported as an error until the kernel takes it.
            reserved = Int8ScaledMmChunkGemm(sm_count=sms - reserve) if isinstance(gemm, Int8ScaledMmChunkGemm) \
                else None
            r[f"op_auto_hp_gemm{sms - reserve}sms"] = t(op(group=groups["hp"], gemm=reserved))
        for c in (4, 8, 16):
            r[f"op_c{c}_hp"] = t(op(group=groups["hp"], chunks=c))
    # Last: a private torch API; if it fails on one rank only it may leave the group unusable.
    r["async_tp"] = t(lambda: async_tp(gemm, x1, x2, s1, s2, dist.group.WORLD))
    x1 = x2 = part = part_bf16 = red = red_bf16 = None  # free before the next M (closures above hold them)
    torch.cuda.empty_cache()
    return r


def timeline(m, args, gemm, group, out_dir):
    """Profile rank 0 over two overlapped calls; save the trace and a picture of the GEMM and NCCL streams."""
    from torch.profiler import ProfilerActivity, profile

    x1, x2, s1, s2, _ = operands(m, args.n, args.k, seed=RANK)
    out = torch.empty(m // WORLD, args.n, dtype=torch.bfloat16, device="cuda")
    call = lambda: quantized_matmul_reduce_scatter(x1, x2, s1, s2, out=out, gemm=gemm, group=group,  # noqa: E731
                                                   validate_across_ranks=False)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA], record_shapes=False) as prof:
        for _ in range(2):
            call()
        torch.cuda.synchronize()
    dist.barrier()
    if RANK != 0:
        return None
    trace = out_dir / "trace_rank0.json"
    prof.export_chrome_trace(str(trace))
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("cat") in ("kernel", "gpu_memcpy") and "dur" in e]
    title = f"rank 0, two calls at M={m}, N={args.n}, K={args.k}/rank: GEMM (blue), NCCL (orange), other (gray)"
    return draw_timeline(events, title, out_dir / "timeline.png") if events else None


def draw_timeline(events, title, path):
    """One row per CUDA stream, one bar per kernel (chrome-trace events: name, tid = stream, ts, dur in µs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(e["ts"] for e in events)
    streams = sorted({e["tid"] for e in events}, key=str)
    fig, ax = plt.subplots(figsize=(12, 1 + 0.6 * len(streams)))
    for row, sid in enumerate(streams):
        for e in (e for e in events if e["tid"] == sid):
            name = e["name"].lower()
            color = "tab:orange" if "nccl" in name else \
                "tab:blue" if any(s in name for s in ("cutlass", "gemm", "xmma", "int_mm")) else "tab:gray"
            ax.broken_barh([(e["ts"] - t0, e["dur"])], (row - 0.4, 0.8), color=color)
    ax.set_yticks(range(len(streams)), [f"stream {s}" for s in streams])
    ax.set_xlabel("µs")
    ax.set_title(title)
    fig.tight_layout()
    save_plot(fig, path, dpi=120)
    return path.name


def ratio(a, b):
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else None


def fmt(ms):
    """A time in ms as whole µs; anything else (an error, n/a) as is."""
    return f"{ms * 1000:.0f}" if isinstance(ms, float) else str(ms)


def report(results, meta, out_dir):
    lines = [f"# int8 matmul + reduce-scatter, {meta['world']} x {meta['device']}",
             "",
             f"N = {meta['n']}, K = {meta['k']} per rank, bf16 out, fp32 reduce and the default NCCL group unless "
             f"noted, no bias; GEMM: {meta['gemm']}; "
             f"µs per call, max over ranks, {meta['iters']} iterations after {meta['warmup']} warm-up.",
             f"Correctness (M = {meta['check_m']}, auto chunks, with bias, worst rank): ‖out − ref‖ / ‖ref‖ = "
             f"{meta['check_rel']:.2e}, NaN: {meta['check_nan']} -> "
             f"{'PASS' if meta['check_rel'] < 1e-2 and not meta['check_nan'] else 'FAIL'}",
             "",
             "| M | compute | comm | seq ours | seq _int_mm | op auto (chunks) | op / max(compute, comm) "
             "| seq ours / op | op bf16-reduce | async-TP |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        bound = max(r["compute"], r["comm"]) if all(isinstance(r[x], float) for x in ("compute", "comm")) else None
        over = ratio(r["op_auto"], bound)
        speed = ratio(r["seq_ours"], r["op_auto"])
        over_s = f"{over:.2f} {'✓' if over <= 1.15 else '✗'}" if over else "-"
        speed_s = f"{speed:.2f} {'✓' if speed >= 1.25 else '✗'}" if speed else "-"
        lines.append(
            f"| {r['M']} | {fmt(r['compute'])} | {fmt(r['comm'])} | {fmt(r['seq_ours'])} | {fmt(r['seq_int_mm'])} "
            f"| {fmt(r['op_auto'])} ({r['auto_chunks']}) | {over_s} | {speed_s} | {fmt(r['op_auto_bf16'])} "
            f"| {fmt(r['async_tp'])} |")
    lines += ["", "Chunk sweep, default NCCL group (µs):", ""]
    lines.append("| M | " + " | ".join(k for k in results[0] if k.startswith("op_c")) + " | best | compute_chunk "
                 "| op_auto_hp | op_auto_validated |")
    lines.append("|---" * (5 + sum(k.startswith("op_c") for k in results[0])) + "|")
    for r in results:
        chunk_keys = [k for k in r if k.startswith("op_c") and not k.endswith("_hp")]
        timed = {k: r[k] for k in chunk_keys if isinstance(r[k], float)}
        best = min(timed, key=timed.get) if timed else "-"
        lines.append(f"| {r['M']} | " + " | ".join(fmt(r[k]) for k in chunk_keys) + f" | {best} | "
                     f"{fmt(r['compute_chunk'])} | {fmt(r['op_auto_hp'])} | {fmt(r['op_auto_validated'])} |")
    knobs = {k: v for r in results for k, v in r.items() if k.startswith(("op_auto_hp_", "op_auto_bias"))
             or (k.startswith("op_c") and k.endswith("_hp"))}
    if knobs:
        lines += ["", f"Knobs at M = {results[-1]['M']} (µs): "
                  + ", ".join(f"{k} {fmt(v)}" for k, v in knobs.items())]
    crossover = [r["M"] for r in results if isinstance(r.get("op_c1"), float)
                 and any(isinstance(r[k], float) and r[k] < r["op_c1"] for k in r if k.startswith("op_c")
                         and k != "op_c1" and not k.endswith("_hp"))]
    lines += ["", f"Overlap (some chunks > 1) beats the sequential path (chunks = 1) at M in {crossover}; the "
              f"automatic plan runs sequentially below M = "
              f"{min((r['M'] for r in results if r['auto_chunks'] > 1), default='-')}."]
    text = "\n".join(lines)
    (out_dir / "results.md").write_text(text + "\n")
    return text


def plot(results, meta, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [r["M"] for r in results]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    for key, style in (("compute", "b--"), ("comm", "r--"), ("seq_ours", "k-o"), ("seq_int_mm", "m-s"),
                       ("op_auto", "g-o"), ("op_auto_bf16", "c-^"), ("async_tp", "y-d")):
        ys = [r[key] * 1000 if isinstance(r[key], float) else None for r in results]
        pts = [(x, y) for x, y in zip(ms, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), style, label=key)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M (total rows)")
    ax.set_ylabel("µs per call")
    ax.legend()
    ax.set_title(f"{meta['world']} x {meta['device']}, N={meta['n']}, K={meta['k']}/rank")
    for key, comm in (("op_auto", "comm"), ("op_auto_bf16", "comm_bf16"), ("async_tp", "comm")):
        ys = [ratio(r[key], max(r["compute"], r[comm])) if isinstance(r["compute"], float)
              and isinstance(r[comm], float) else None for r in results]
        pts = [(x, y) for x, y in zip(ms, ys) if y is not None]
        if pts:
            ax2.plot(*zip(*pts), "-o", label=f"{key} / max(compute, {comm})")
    ax2.axhline(1.15, color="gray", ls=":", label="target 1.15")
    ax2.axhline(1.0, color="black", lw=0.5)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("M (total rows)")
    ax2.legend()
    fig.tight_layout()
    save_plot(fig, out_dir / "bench_reduce_scatter.png", dpi=120)


def main():
    global RANK, WORLD
    args = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank),
                            timeout=datetime.timedelta(seconds=120))
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    out_dir = Path(args.out)
    if RANK == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
    groups = {"hp": nccl_group(high_priority=True)}
    for ctas in (8, 16, 32):
        groups[f"hp{ctas}"] = nccl_group(high_priority=True, max_ctas=ctas)
    try:
        from torch.distributed import _symmetric_memory as symm_mem

        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
    except Exception as error:  # noqa: BLE001
        log(f"symmetric memory unavailable ({error}); async_tp will report errors")

    gemm, gemm_name = pick_gemm(args.gemm)
    log(f"{WORLD} x {torch.cuda.get_device_name()}; chunk GEMM: {gemm_name}")
    check_m = min(2048, max(int(v) for v in args.m.split(",")))
    t0 = time.time()
    rel, nan = check_correctness(gemm, args.n, args.k, check_m)
    log(f"correctness at M={check_m}: rel err {rel:.2e}, NaN {nan} ({time.time() - t0:.1f} s)")
    chunk_list = [int(c) for c in args.chunks.split(",")]
    results = []
    for m in (int(v) for v in args.m.split(",")):
        t0 = time.time()
        results.append(sweep_m(m, args, gemm, groups, chunk_list))
        log(f"M={m}: " + ", ".join(f"{k}={fmt(v)}" for k, v in results[-1].items() if k != "M")
            + f" ({time.time() - t0:.1f} s)")
        if RANK == 0:  # kept if a later variant hangs the group
            (out_dir / "results_partial.json").write_text(json.dumps(results, indent=1))
    meta = dict(world=WORLD, device=torch.cuda.get_device_name(), n=args.n, k=args.k, gemm=gemm_name,
                iters=args.iters, warmup=args.warmup, check_m=check_m, check_rel=rel, check_nan=nan)
    timeline_file = None
    if not args.no_timeline:
        try:
            timeline_file = timeline(results[-1]["M"], args, gemm, dist.group.WORLD, out_dir)
        except Exception:  # noqa: BLE001
            log("timeline failed:\n" + traceback.format_exc())
    if RANK == 0:
        (out_dir / "results.json").write_text(json.dumps(dict(meta=meta, results=results,
                                                              timeline=timeline_file), indent=1))
        try:
            plot(results, meta, out_dir)
        except Exception:  # noqa: BLE001
            log("plot failed:\n" + traceback.format_exc())
        print(report(results, meta, out_dir), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
