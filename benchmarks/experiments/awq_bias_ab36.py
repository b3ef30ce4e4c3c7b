"""awq_gemm with the bias in the epilogue against the plain call and the plain call plus a torch add, session 36:
CUDA-graph medians of 3 interleaved rounds, weight copies rotated past L2, fp16 x, group 128; prints one line per
layer and token count."""
import statistics, torch, sys
sys.path[:0] = ["benchmarks"]
from bench_weight_only import n_sets
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.weight_only import awq_gemm
for oc, ic in ((4096, 4096), (8192, 8192)):
    sets = [awq_quantize(torch.randn(ic, oc, device="cuda") * 0.05, 128) for _ in range(n_sets(ic * oc // 2, 16))]
    bias = torch.randn(oc, device="cuda").half()
    for m in (1, 16):
        x = torch.randn(m, ic, device="cuda").half()
        v = {"plain": [lambda q=q, s=s, z=z: awq_gemm(x, q, s, z) for q, z, s in sets],
             "bias fused": [lambda q=q, s=s, z=z: awq_gemm(x, q, s, z, bias=bias) for q, z, s in sets],
             "plain + add": [lambda q=q, s=s, z=z: awq_gemm(x, q, s, z).add_(bias) for q, z, s in sets]}
        t = {k: [] for k in v}
        for _ in range(3):
            for k, calls in v.items():
                t[k].append(graph_time_us(calls)[0])
        print(f"{oc}x{ic} M={m} " + "  ".join(f"{k} {statistics.median(ts):.2f}" for k, ts in t.items()), flush=True)
