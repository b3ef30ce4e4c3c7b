"""Session 11: the op with an int32 bias against the op without, p2p transport, 2 ranks (N = K = 8192 per rank).

    torchrun --nproc_per_node=2 benchmarks/experiments/rs_bias.py        (RS_M=2048,4096,8192; RS_TAG=label)

Run once per code version (PYTHONPATH picks it): before session 11 the bias rank added its bias as an fp32 rank-1
update after its GEMM and kept the unfused sum; since, the int32 bias goes into the GEMM's epilogue and that rank
takes the fused sum too. µs per call over a fixed 30 calls after 5 warm-up (CUDA events, max over ranks);
the first call with bias is checked against float64 (64 rows of each rank's block, worst rank's relative error).
"""
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

# cute_kernels first, from PYTHONPATH (an older copy may be put first there): bench_reduce_scatter puts the
# repository root at the head of sys.path when it is imported.
import cute_kernels  # noqa: E402
from cute_kernels.distributed import quantized_matmul_reduce_scatter as op  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_reduce_scatter import operands  # noqa: E402


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    tag = os.environ.get("RS_TAG", "")
    if rank == 0:
        print(f"code: {os.path.dirname(cute_kernels.__file__)} {tag}", flush=True)
    rows = []
    for m in [int(v) for v in os.environ.get("RS_M", "2048,4096,8192").split(",")]:
        x1, x2, s1, s2, bias = operands(m, 8192, 8192, rank)
        # float64 reference of the first 64 output rows of every rank's block: partials summed over ranks
        chk, rows_per = 64, m // world
        idx = torch.cat([torch.arange(w * rows_per, w * rows_per + chk) for w in range(world)]).cuda()
        scale = s1[idx].double()[:, None] * s2.double()
        part = torch.matmul(x1[idx].double(), x2.double()) * scale
        if rank == 0:
            part += bias.double() * scale  # the bias rank's rule: (acc + bias) * s1 * s2
        dist.all_reduce(part)
        ref = part[rank * chk:(rank + 1) * chk].cpu()
        part = None
        out = torch.empty(m // world, 8192, dtype=torch.bfloat16, device="cuda")
        row = {"M": m}
        for rd, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for with_bias in (False, True):
                call = lambda: op(x1, x2, s1, s2, bias if with_bias else None, out=out, transport="p2p",  # noqa
                                  reduce_dtype=rd, validate_across_ranks=False)
                call()
                torch.cuda.synchronize()
                if with_bias:
                    got = out[:chk].double().cpu()
                    err = ((got - ref).norm() / ref.norm()).item()
                    errs = [None] * world
                    dist.all_gather_object(errs, err)
                    row[f"err_{name}"] = max(errs)
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
                dist.barrier()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(30):
                    call()
                e1.record()
                torch.cuda.synchronize()
                t = torch.tensor([e0.elapsed_time(e1) / 30 * 1e3], device="cuda")
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                row[f"{name}_{'bias' if with_bias else 'none'}"] = t.item()
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0:
        print(f"| M | fp32: no bias / bias µs | bf16: no bias / bias µs | rel err with bias fp32 / bf16 | {tag}")
        print("|---:|---|---|---|")
        for r in rows:
            print(f"| {r['M']} | {r['fp32_none']:.1f} / {r['fp32_bias']:.1f} | {r['bf16_none']:.1f} / "
                  f"{r['bf16_bias']:.1f} | {r['err_fp32']:.2e} / {r['err_bf16']:.2e} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
