"""2-rank sweep: GEMM SM reservation x NCCL CTA cap x chunks x reduce dtype (N = K = 8192 per rank). torchrun."""
import os, json
import torch, torch.distributed as dist
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
from cute_kernels.distributed import quantized_matmul_reduce_scatter as op, release_workspaces
from cute_kernels.distributed.chunk_gemm import Int8ScaledMmChunkGemm
N = K = 8192
sms = torch.cuda.get_device_properties(0).multi_processor_count
def group(max_ctas=None, hp=False):
    o = dist.ProcessGroupNCCL.Options(); o.is_high_priority_stream = hp
    if max_ctas: o.config.max_ctas = max_ctas
    return dist.new_group(backend="nccl", pg_options=o)
groups = {"dflt": None, "c8": group(8), "c16": group(16), "hp16": group(16, True)}
gemms = {r: Int8ScaledMmChunkGemm(sm_count=sms - r) if r else Int8ScaledMmChunkGemm() for r in (0, 8, 16, 24)}
def timed(fn, iters=20, warm=4):
    for _ in range(warm): fn()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters): fn()
    e.record(); e.synchronize()
    v = torch.tensor([s.elapsed_time(e) / iters * 1e3], device="cuda")
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return v.item()
res = []
for M in (8192, 4096, 2048):
    x1 = torch.randint(-128, 127, (M, K), dtype=torch.int8, device="cuda")
    x2 = torch.randint(-128, 127, (N, K), dtype=torch.int8, device="cuda").t()
    s1 = torch.rand(M, device="cuda") * 1e-3; s2 = torch.rand(N, device="cuda") * 1e-3
    out = torch.empty(M // world, N, dtype=torch.bfloat16, device="cuda")
    for rd in (torch.bfloat16, torch.float32):
        line = f"M={M} {str(rd)[6:]:8s}"
        for c in (1, 2, 4):
            for r in (0, 8, 16, 24):
                for gname, grp in groups.items():
                    if c == 1 and (r or gname != "dflt"): continue
                    if r == 24 and gname != "dflt": continue
                    t = timed(lambda: op(x1, x2, s1, s2, out=out, chunks=c, group=grp, gemm=gemms[r], reduce_dtype=rd,
                                         validate_across_ranks=False))
                    res.append(dict(M=M, rd=str(rd), chunks=c, reserve=r, group=gname, us=t))
                    line += f" c{c}r{r}{gname}={t:.0f}"
        if rank == 0: print(line, flush=True)
    if rank == 0:
        best = {}
        for x in res:
            if x["M"] == M:
                k = x["rd"]; best[k] = min(best.get(k, (1e9,)), (x["us"], x["chunks"], x["reserve"], x["group"]))
        print("   best", best, flush=True)
    x1 = x2 = None  # free now (closures above still name them)
    release_workspaces(); torch.cuda.empty_cache()
if rank == 0:
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "rs_sweep.json"), "w"), indent=1)
dist.destroy_process_group()
