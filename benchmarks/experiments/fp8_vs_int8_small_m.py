"""Session 6 probe: decode-size FP8 blockwise vs our int8 kernel on the same weight bytes, and torch blockwise.

DeepSeek-V3 layers at M in {1, 16, 64, 128}; CUDA-graph medians of the shipped dispatch of each op (weights rotated
beyond L2, three repeats). Run before and after the session-6 FP8 changes (docs/fp8_blockwise.md). Timing only:
the ops' correctness is the GPU tier's job. Writes probe.json to $OUT.

    python benchmarks/experiments/fp8_vs_int8_small_m.py
"""
import sys, os, json, math, statistics, torch
sys.path.insert(0, os.getcwd())
import cute_kernels as ck
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config
NK = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]
rows = []
for n, k in NK:
    for m in (1, 16, 64, 128):
        x = torch.randn(m, k, device="cuda"); w = torch.randn(n, k, device="cuda")
        a, a_s = quantize_fp8_per_token_group(x, 128); b, b_s = quantize_fp8_blockwise(w, 128)
        sa, sb = to_mn_major(a_s), to_mn_major(b_s)
        copies = max(1, min(8, math.ceil(200e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        ai = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
        wi = [torch.randint(-128, 127, (n, k), device="cuda", dtype=torch.int8) for _ in range(copies)]
        s1 = torch.rand(m, device="cuda"); s2 = torch.rand(n, device="cuda")
        o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fns = {
            "fp8": [lambda j=j: ck.fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=o) for j in range(copies)],
            "int8": [lambda j=j: ck.int8_scaled_mm(ai, wi[j].t(), s1, s2, out=o) for j in range(copies)],
            "torch_bw": [lambda j=j: torch._scaled_mm(a, bs[j].t(), sa, b_s.t(), out_dtype=torch.bfloat16) for j in range(copies)],
        }
        r = {"M": m, "N": n, "K": k, "cfg": str(select_config(m, n, k))}
        for lab, calls in fns.items():
            try:
                calls[0](); torch.cuda.synchronize()
                r[lab] = statistics.median(graph_time_us(calls * max(1, 4 // copies))[0] for _ in range(3))
            except Exception:  # noqa: BLE001 - cuBLAS refuses M = 1: recorded as None
                r[lab] = None
        r["GB/s fp8"] = n * k / r["fp8"] / 1e3
        rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "probe.json"), "w"), indent=1)
print("| M | N | K | fp8 | int8 | torch bw | fp8 TB/s |")
for r in rows:
    f = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"| {r['M']} | {r['N']} | {r['K']} | {f(r['fp8'])} | {f(r['int8'])} | {f(r['torch_bw'])} | {r['GB/s fp8']/1e3:.2f} |")
