"""Benchmark: the op's two transports (NCCL reduce-scatter vs p2p copy-engine pulls) against their parts (issue 6).

    torchrun --nproc_per_node=2 benchmarks/bench_reduce_scatter_transports.py --out $OUT [--m 512,1024,2048,4096,8192]

Per M (N = K = 8192 per rank unless given), µs per call, max over ranks, CUDA events over --iters back-to-back calls
after --warmup (a fixed count on every rank: collectives must match):
    compute         our int8 GEMM over the rank's whole [M, K] x [K, N], bf16 out (one launch)
    comm_fp32/bf16  reduce_scatter_tensor of an [M, N] partial alone
    nccl_*          the op with transport="nccl", chunks=1 (GEMM then reduce-scatter; chunking never won, see docs)
    p2p_*           the op with transport="p2p" (p2p_transport.py)
    *_graph         the same op call captured in a CUDA graph and replayed (what a serving engine's graphs see)
    host_p2p_bf16   host µs per p2p call (issue rate with no synchronization): the eager op's floor
The op runs with validate_across_ranks=False (its cost is reported once, p2p_bf16_validated). A float64 check of both
transports (with bias, both reduce dtypes, NaN-poisoned outputs) runs first. Writes transports.json / .md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

from cute_kernels.distributed import Int8ScaledMmChunkGemm, p2p_transport, release_workspaces  # noqa: E402
from cute_kernels.distributed import quantized_matmul_reduce_scatter as op  # noqa: E402
from cute_kernels.distributed.rank_agreement import reduce_scatter_single  # noqa: E402

from bench_reduce_scatter import operands  # noqa: E402 - same operands as the NCCL-pipeline benchmark


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t0) / iters * 1e6
    end.record()
    end.synchronize()
    v = torch.tensor([start.elapsed_time(end) / iters * 1e3, host], device="cuda")
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return v[0].item(), v[1].item()


def graphed(fn):
    """fn captured once in a CUDA graph (warm-up on the capture stream first); returns the replay, or None when
    capture fails on any rank (then every rank skips the variant)."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            fn()
        ok = torch.ones(1, device="cuda")
    except Exception as error:  # noqa: BLE001 - reported, the sweep goes on
        print(f"graph capture failed: {type(error).__name__}: {str(error)[:200]}", file=sys.stderr, flush=True)
        torch.cuda.synchronize()
        graph, ok = None, torch.zeros(1, device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return graph.replay if ok.item() else None


def check(world, rank, m, n, k):
    shards = [operands(m, n, k, 1000 + r) for r in range(world)]
    x1, x2, s1, s2, _ = shards[rank]
    bias = shards[0][4]
    rows = slice(rank * (m // world), (rank + 1) * (m // world))
    ref = torch.zeros(m // world, n, dtype=torch.float64, device="cuda")
    for a, b, sa, sb, _ in shards:
        ref += (a[rows].double() @ b.double()) * sa[rows].double()[:, None] * sb.double()
    ref += bias.double() * shards[0][2][rows].double()[:, None] * shards[0][3].double()
    lines = []
    for transport in ("nccl", "p2p"):
        for rd in (torch.float32, torch.bfloat16):
            out = torch.full((m // world, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            op(x1, x2, s1, s2, bias, out=out, transport=transport, reduce_dtype=rd, chunks=1 if transport == "nccl" else None)
            e = torch.stack([(out.double() - ref).norm() / ref.norm(), torch.isnan(out).any().double()])
            dist.all_reduce(e, op=dist.ReduceOp.MAX)
            ok = e[0].item() < 5e-3 and not e[1].item()
            lines.append(f"{transport} reduce {str(rd)[6:]}: rel err {e[0].item():.2e}, NaN {bool(e[1].item())} "
                         f"-> {'PASS' if ok else 'FAIL'}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--m", default="512,1024,2048,4096,8192")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    gemm = Int8ScaledMmChunkGemm()
    n, k = args.n, args.k
    checks = check(world, rank, 2048, n, k)
    rows = []
    for m in (int(v) for v in args.m.split(",")):
        x1, x2, s1, s2, _ = operands(m, n, k, rank)
        out = torch.empty(m // world, n, dtype=torch.bfloat16, device="cuda")
        part = torch.empty(m, n, dtype=torch.float32, device="cuda")
        red = torch.empty(m // world, n, dtype=torch.float32, device="cuda")
        part_bf16 = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        t = lambda fn: timed(fn, args.iters, args.warmup)  # noqa: E731
        r = dict(M=m)
        r["compute"], _ = t(lambda: gemm(x1[None], x2, s1[None], s2, None, part_bf16[None]))
        r["comm_fp32"], _ = t(lambda: reduce_scatter_single(red, part))
        r["comm_bf16"], _ = t(lambda: reduce_scatter_single(out, part_bf16))
        part = red = part_bf16 = None  # free before the op's own buffers
        for rd, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            r[f"nccl_{name}"], _ = t(lambda: op(x1, x2, s1, s2, out=out, chunks=1, transport="nccl", reduce_dtype=rd,
                                                validate_across_ranks=False))
            r[f"p2p_{name}"], r[f"host_p2p_{name}"] = t(lambda: op(x1, x2, s1, s2, out=out, transport="p2p",
                                                                   reduce_dtype=rd, validate_across_ranks=False))
        for rd, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for transport in ("nccl", "p2p"):
                replay = graphed(lambda: op(x1, x2, s1, s2, out=out, chunks=1 if transport == "nccl" else None,
                                            transport=transport, reduce_dtype=rd, validate_across_ranks=False))
                r[f"{transport}_{name}_graph"] = t(replay)[0] if replay else float("nan")
        r["p2p_bf16_validated"], _ = t(lambda: op(x1, x2, s1, s2, out=out, transport="p2p",
                                                  reduce_dtype=torch.bfloat16))
        rows.append(r)
        if rank == 0:
            print(json.dumps(r), flush=True)
        x1 = x2 = out = None
        release_workspaces()
        p2p_transport.release()
        torch.cuda.empty_cache()
    if rank == 0:
        dev = torch.cuda.get_device_name()
        md = [f"{world} x {dev}, {time.strftime('%Y-%m-%d')}; N = {n}, K = {k} per rank; µs per call, max over ranks.",
              "", *checks, "",
              "| M | compute | comm fp32 | comm bf16 | nccl fp32 | nccl bf16 | p2p fp32 | p2p bf16 | p2p bf16 / max(compute, comm bf16) "
              "| p2p fp32 / max(compute, comm fp32) | nccl bf16 / p2p bf16 | nccl fp32 / p2p fp32 | host µs / p2p call |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            md.append(f"| {r['M']} | {r['compute']:.0f} | {r['comm_fp32']:.0f} | {r['comm_bf16']:.0f} | {r['nccl_fp32']:.0f} "
                      f"| {r['nccl_bf16']:.0f} | {r['p2p_fp32']:.0f} | {r['p2p_bf16']:.0f} "
                      f"| {r['p2p_bf16'] / max(r['compute'], r['comm_bf16']):.2f} "
                      f"| {r['p2p_fp32'] / max(r['compute'], r['comm_fp32']):.2f} | {r['nccl_bf16'] / r['p2p_bf16']:.2f} "
                      f"| {r['nccl_fp32'] / r['p2p_fp32']:.2f} | {r['host_p2p_bf16']:.0f} |")
        md += ["", "Under a CUDA graph (the op captured once, replayed; no host cost per call):", "",
               "| M | compute | nccl fp32 | nccl bf16 | p2p fp32 | p2p bf16 | p2p bf16 / max(compute, comm bf16) "
               "| p2p fp32 / max(compute, comm fp32) | nccl bf16 / p2p bf16 | nccl fp32 / p2p fp32 |",
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            md.append(f"| {r['M']} | {r['compute']:.0f} | {r['nccl_fp32_graph']:.0f} | {r['nccl_bf16_graph']:.0f} "
                      f"| {r['p2p_fp32_graph']:.0f} | {r['p2p_bf16_graph']:.0f} "
                      f"| {r['p2p_bf16_graph'] / max(r['compute'], r['comm_bf16']):.2f} "
                      f"| {r['p2p_fp32_graph'] / max(r['compute'], r['comm_fp32']):.2f} "
                      f"| {r['nccl_bf16_graph'] / r['p2p_bf16_graph']:.2f} | {r['nccl_fp32_graph'] / r['p2p_fp32_graph']:.2f} |")
        md.append("")
        md.append("validate_across_ranks=True (p2p bf16): " + ", ".join(f"M={r['M']} {r['p2p_bf16_validated']:.0f}" for r in rows))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "transports.md").write_text("\n".join(md) + "\n")
        (Path(args.out) / "transports.json").write_text(json.dumps(dict(device=dev, world=world, rows=rows, checks=checks), indent=1))
        print("\n".join(md), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
