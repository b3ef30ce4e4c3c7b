"""Session 4 refresh: awq_gemm / awq_linear on every benchmark row (bench_awq) and quantized_mm int4 with group-128
scales (promoted onto the partial sums, the scaled decode plan) at M in {1, 4, 16} on three shapes, vs bf16 matmul."""
import json
import os
import sys

sys.path.insert(0, "benchmarks")
import torch

import bench_awq
from bench_weight_only import graph_time_us, n_sets
from cute_kernels.formats.bitpack import dequantize_weights, quantize_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import quantized_mm

out_dir = os.environ.get("OUT", ".")
dev = torch.cuda.get_device_name()
rows = []
for n, k in [(8192, 8192), (14336, 4096), (4096, 14336)]:
    per_set = n * k // 2 + n * (k // 128) * 4
    sets = [quantize_weights(torch.randn(n, k, device="cuda"), 4, 128) for _ in range(n_sets(per_set, 16))]
    dense = [dequantize_weights(w, 4, k, s, gs).to(torch.bfloat16) for w, s, gs in sets[:2]]
    for m in (1, 4, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w, s, gs = sets[0]
        o = quantized_mm(x, w, s, 4, gs)
        ref = quantized_mm_ref(x.cpu(), w[:256].cpu(), s, 4, gs[:256].cpu())
        err = ((o[:, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        t, _ = graph_time_us([lambda z=z: quantized_mm(x, z[0], z[1], 4, z[2]) for z in sets])
        tb, _ = graph_time_us([lambda d=d: torch.matmul(x, d.t()) for d in dense])
        rows.append(dict(n=n, k=k, m=m, us=t, bf16_us=tb, speedup=tb / t, err=err,
                         weight_tbs=per_set / t / 1e6))
        print(f"int4 g128 N={n} K={k} M={m}: {t:.2f} us, bf16 {tb:.2f} us, x{tb / t:.2f}, err {err:.1e}", flush=True)
    del sets, dense
awq = bench_awq.bench(bench_awq.SHAPES, bench_awq.MS)
json.dump(dict(device=dev, int4_g128=rows, awq=awq), open(os.path.join(out_dir, "wo_session4.json"), "w"), indent=1)
print(bench_awq.markdown(awq, dev))
