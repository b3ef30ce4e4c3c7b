"""p2p transport: pull (copy-engine pulls, the session-3 schedule) vs push (peer-block GEMMs store into the peers'
symmetric buffers over NVLink), plus the pieces: one peer-block GEMM into local vs peer memory, one copy-engine pull.

    torchrun --nproc_per_node=2 benchmarks/experiments/rs_push.py   (via a runpy wrapper: torchrun eats --m)

Float64 check of both modes first (bias on, both reduce dtypes, NaN-poisoned outputs); then CUDA-graph replays timed
with CUDA events over a fixed count, max over ranks. Writes rs_push.json to $OUT.
"""
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench_reduce_scatter_transports as brt  # noqa: E402
from bench_reduce_scatter import operands  # noqa: E402
from cute_kernels.distributed import Int8ScaledMmChunkGemm, p2p_transport, release_workspaces  # noqa: E402
from cute_kernels.distributed import quantized_matmul_reduce_scatter as op  # noqa: E402

MS = [int(v) for v in os.environ.get("RS_M", "2048,4096,8192").split(",")]


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    gemm = Int8ScaledMmChunkGemm()
    n = k = 8192
    lines = []
    for mode in ("pull", "push"):
        p2p_transport.MODE = mode
        lines += [f"{mode}: {line}" for line in brt.check(world, rank, 2048, n, k) if line.startswith("p2p")]
    if rank == 0:
        print("\n".join(lines), flush=True)
    t = lambda fn: brt.timed(fn, 20, 5)[0]  # noqa: E731
    rows = []
    for m in MS:
        x1, x2, s1, s2, _ = operands(m, n, k, rank)
        rows_r = m // world
        out = torch.empty(rows_r, n, dtype=torch.bfloat16, device="cuda")
        r = dict(M=m)
        part = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        r["compute"] = t(lambda: gemm(x1[None], x2, s1[None], s2, None, part[None]))
        part = None
        # pieces: a peer block's GEMM into local memory vs into the peer's symmetric buffer; one pull of that block
        from torch.distributed import _symmetric_memory as symm_mem
        buf = symm_mem.empty(world * rows_r * n, dtype=torch.float32, device="cuda")
        h = symm_mem.rendezvous(buf, dist.group.WORLD)
        peer = 1 - rank
        local = h.get_buffer(rank, (world, rows_r, n), torch.float32)
        remote = h.get_buffer(peer, (world, rows_r, n), torch.float32)
        a = x1.unflatten(0, (world, rows_r))
        sa = s1.unflatten(0, (world, rows_r))
        dst = torch.empty(rows_r, n, dtype=torch.float32, device="cuda")
        r["block_gemm_local_fp32"] = t(lambda: gemm(a[peer:peer + 1], x2, sa[peer:peer + 1], s2, None, local[peer][None]))
        r["block_gemm_remote_fp32"] = t(lambda: gemm(a[peer:peer + 1], x2, sa[peer:peer + 1], s2, None,
                                                     remote[rank][None]))
        r["pull_fp32"] = t(lambda: dst.copy_(remote[rank]))
        r["own_gemm_fused_c_fp32"] = t(lambda: gemm(a[rank:rank + 1], x2, sa[rank:rank + 1], s2, None, out[None],
                                                    c=local[peer][None]))
        dist.barrier()
        torch.cuda.synchronize()
        buf = h = local = remote = dst = None  # free now (closures above still name them)
        for rd, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for mode in ("pull", "push"):
                p2p_transport.MODE = mode
                replay = brt.graphed(lambda: op(x1, x2, s1, s2, out=out, transport="p2p", reduce_dtype=rd,
                                                validate_across_ranks=False))
                r[f"{mode}_{name}_graph"] = t(replay) if replay else float("nan")
                r[f"{mode}_{name}_eager"] = t(lambda: op(x1, x2, s1, s2, out=out, transport="p2p", reduce_dtype=rd,
                                                        validate_across_ranks=False))
                replay = None
        p2p_transport.MODE = "pull"
        rows.append(r)
        if rank == 0:
            print(json.dumps({kk: round(v, 1) if isinstance(v, float) else v for kk, v in r.items()}), flush=True)
        x1 = x2 = out = None
        release_workspaces()
        p2p_transport.release()
        torch.cuda.empty_cache()
    if rank == 0:
        Path(os.environ.get("OUT", ".")).mkdir(parents=True, exist_ok=True)
        (Path(os.environ.get("OUT", ".")) / "rs_push.json").write_text(json.dumps(dict(
            device=torch.cuda.get_device_name(), checks=lines, rows=rows), indent=1))
        print("| M | compute | pull fp32 | push fp32 | pull bf16 | push bf16 | (graph; eager: pull/push fp32, bf16) |")
        for r in rows:
            print(f"| {r['M']} | {r['compute']:.0f} | {r['pull_fp32_graph']:.0f} | {r['push_fp32_graph']:.0f} | "
                  f"{r['pull_bf16_graph']:.0f} | {r['push_bf16_graph']:.0f} | {r['pull_fp32_eager']:.0f}/"
                  f"{r['push_fp32_eager']:.0f}, {r['pull_bf16_eager']:.0f}/{r['push_bf16_eager']:.0f} |")
        print("pieces (fp32 block of M/W rows): " + "; ".join(
            f"M={r['M']} gemm local {r['block_gemm_local_fp32']:.0f} remote {r['block_gemm_remote_fp32']:.0f} "
            f"pull {r['pull_fp32']:.0f} own+c {r['own_gemm_fused_c_fp32']:.0f}" for r in rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
