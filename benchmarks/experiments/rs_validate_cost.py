"""Session 11: what validate_across_ranks=True costs per eager call - the all-gather on the GPU + host read (shipped)
against the same check over the gloo mirror group (``EAGER_CHECK_OVER_GLOO``; shipped only while capturing) - and
that a CUDA graph captured with the default check replays correctly.

    torchrun --nproc_per_node=2 benchmarks/experiments/rs_validate_cost.py      (RS_M=512,2048,8192, RS_OUT=dir)

Per M (N = K = 8192 per rank, p2p transport, bf16 reduce): µs per call over a fixed 30 back-to-back calls after 5
warm-up calls (CUDA events, max over ranks), for validate off / gloo mirror / on the device; and host µs per call
(wall time of issuing the 30 calls, no sync inside): what the host needs before it can queue the next layer.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_reduce_scatter import operands  # noqa: E402

from cute_kernels.distributed import quantized_matmul_reduce_scatter as op  # noqa: E402
from cute_kernels.distributed import rank_agreement  # noqa: E402
from cute_kernels.distributed import matmul_reduce_scatter as mrs  # noqa: E402


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    shipped = mrs.metadata_group
    # The gloo exchange alone: a few int64 per rank, 200 calls each way, host µs per call.
    mirror, _ = shipped(None, dev)
    record = torch.arange(10, dtype=torch.int64)
    table = torch.empty(world * 10, dtype=torch.int64)
    parts = [torch.empty(10, dtype=torch.int64) for _ in range(world)]
    gloo = {}
    for name, fn in [("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(table, record, group=mirror)),
                     ("all_gather (list)", lambda: dist.all_gather(parts, record, group=mirror)),
                     ("all_reduce", lambda: dist.all_reduce(record, group=mirror)),
                     ("barrier", lambda: dist.barrier(group=mirror))]:
        for _ in range(20):
            fn()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        gloo[name] = (time.perf_counter() - t0) / 200 * 1e6
    if rank == 0:
        print("gloo host µs per call: " + ", ".join(f"{k} {v:.1f}" for k, v in gloo.items()), flush=True)
    rows = []
    for m in [int(v) for v in os.environ.get("RS_M", "512,2048,8192").split(",")]:
        x1, x2, s1, s2 = operands(m, 8192, 8192, rank)[:4]
        out = torch.empty(m // world, 8192, dtype=torch.bfloat16, device=dev)
        row = {"M": m}
        for name, validate, over_gloo in [("off", False, False), ("gloo", True, True), ("device", True, False)]:
            mrs.EAGER_CHECK_OVER_GLOO = over_gloo
            call = lambda: op(x1, x2, s1, s2, out=out, reduce_dtype=torch.bfloat16, transport="p2p",  # noqa: E731
                              validate_across_ranks=validate)
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(30):
                call()
            host = (time.perf_counter() - t0) / 30 * 1e6
            end.record()
            torch.cuda.synchronize()
            gpu = start.elapsed_time(end) / 30 * 1e3
            t = torch.tensor([gpu, host], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            row[name], row[name + "_host"] = t.tolist()
        mrs.EAGER_CHECK_OVER_GLOO = False
        # Captured with the default check (gloo): the capture must succeed and the replay match the eager call.
        call = lambda: op(x1, x2, s1, s2, out=out, reduce_dtype=torch.bfloat16, transport="p2p")  # noqa: E731
        call()
        torch.cuda.synchronize()
        ref = out.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        row["graph_replay_matches_eager"] = bool(torch.equal(out, ref))
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0:
        lines = ["| M | validate off µs | gloo mirror µs | on device µs | host µs off / gloo / "
                 "device | captured with check, replay == eager |", "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['M']} | {r['off']:.1f} | {r['gloo']:.1f} | {r['device']:.1f} | {r['off_host']:.1f} / "
                         f"{r['gloo_host']:.1f} / {r['device_host']:.1f} | {r['graph_replay_matches_eager']} |")
        print("\n".join(lines))
        out_dir = os.environ.get("RS_OUT")
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            (Path(out_dir) / "rs_validate_cost.json").write_text(json.dumps(rows, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
