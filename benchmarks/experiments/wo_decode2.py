"""Decode-size numbers after x prefetch: quantized_mm (3 shapes x 4 widths x M {1,4,16}) and awq_gemm (M {1,4,16})."""
import sys, json, os
sys.path.insert(0, "benchmarks")
import torch
from bench_weight_only import bench_quantized_mm, copy_bandwidth_gbs
import bench_awq
out = os.environ.get("OUT", ".")
copy_gbs, read_gbs = copy_bandwidth_gbs()
rows = bench_quantized_mm([(8192, 8192), (14336, 4096), (4096, 14336)], [1, 2, 4, 8], [1, 4, 16])
json.dump(dict(copy_gbs=copy_gbs, read_gbs=read_gbs, rows=rows), open(os.path.join(out, "wo_decode2.json"), "w"), indent=1, default=str)
awq = bench_awq.bench(bench_awq.SHAPES, [1, 4, 16])
json.dump(awq, open(os.path.join(out, "awq_decode2.json"), "w"), indent=1, default=str)
print(bench_awq.markdown(awq, torch.cuda.get_device_name()))
print(f"copy {copy_gbs:.0f} read {read_gbs:.0f}")
print("| N | K | bits | M | ours | bf16 | speedup | TB/s | % of 4.25 | ring | registers |")
for r in rows:
    p = r.get("pipelines", {})
    print(f"| {r['n']} | {r['k']} | {r['bits']} | {r['m']} | {r['us']:.2f} | {r['bf16_us']:.2f} | {r['speedup']:.2f} | "
          f"{r['weight_gbs']/1e3:.2f} | {r['weight_gbs']/42.5:.0f}% | {p.get('ring', {}).get('us', 0):.2f} | {p.get('registers', {}).get('us', 0):.2f} |")
