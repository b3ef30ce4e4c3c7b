"""Session 5: the decode path's register pipeline with swapping buffers (``TileShape.swap_registers``: K loop
unrolled by two, no copy of the next step's registers) against the copy it replaced, per decode plan that uses the
register pipeline: quantized_mm int8/int4/int2/int1 (no group scales) and awq_gemm, M in {1, 4, 16}, three shapes.

Each variant is checked against the float64 reference first (corner of the output); times are CUDA-graph medians
over weight sets rotated through more than L2, three interleaved repeats (median kept), with the bf16 / fp16
torch.matmul time of the same problem. Writes wo_swap.json to $OUT and prints a table.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.formats.bitpack import dequantize_weights, quantize_weights  # noqa: E402
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config, quantized_mm  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
out_dir = os.environ.get("OUT", ".")
rows = []


ABBA = "--abba" in sys.argv  # time copy, swap, swap, copy per repeat (the recorded first run: copy then swap)
BITS = (1, 2) if "--low-bits" in sys.argv else (8, 4, 2, 1)


def timed(variants, base):
    order = ["copy", "swap", "swap", "copy"] if ABBA else list(variants)
    reps = {name: [] for name in variants}
    reps["dense"] = []
    for _ in range(3):
        for name in order:
            reps[name].append(bwo.graph_time_us(variants[name])[0])
        reps["dense"].append(bwo.graph_time_us(base)[0])
    return {name: statistics.median(ts) for name, ts in reps.items()}


for n, k in [(8192, 8192), (14336, 4096), (4096, 14336)]:
    for bits in BITS:
        per_set = n * k * bits // 8
        sets = [quantize_weights(torch.randn(n, k, device="cuda"), bits) for _ in range(bwo.n_sets(per_set, 16))]
        dense = [dequantize_weights(w, bits, k, s, None).to(torch.bfloat16) for w, s, _ in sets[:2]]
        for m in (1, 4, 16):
            plan_tile = config.decode_tile(bits, m, n, SMS)
            if plan_tile.stages:
                continue  # the ring pipeline: no register buffers to swap
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            variants, errs = {}, {}
            for swap in (False, True):
                tile = config.decode_tile(bits, m, n, SMS, swap_registers=swap)
                w, s, _ = sets[0]
                errs[swap] = bwo._check(quantized_mm(x, w, s, bits, tile=tile), x, w, s, bits)
                variants["swap" if swap else "copy"] = [lambda z=z, tile=tile: quantized_mm(x, z[0], z[1], bits,
                                                                                            tile=tile) for z in sets]
            t = timed(variants, [lambda d=d: torch.matmul(x, d.t()) for d in dense])
            rows.append(dict(fmt=f"int{bits}", n=n, k=k, m=m, tile=str(plan_tile.key), copy_us=t["copy"],
                             swap_us=t["swap"], dense_us=t["dense"], err_copy=errs[False], err_swap=errs[True],
                             weight_tbs_swap=per_set / t["swap"] / 1e6))
            print(json.dumps(rows[-1]), flush=True)
        del sets, dense
for oc, ic in ([] if "--low-bits" in sys.argv else bench_awq.SHAPES):
    per_set = ic * oc // 2 + (ic // 128) * oc * 2 + (ic // 128) * oc // 2
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(per_set, 16))]
    dense = [awq_dequantize(*z) for z in sets[:2]]
    for m in (1, 4, 16):
        plan_tile = config.decode_tile("awq", m, oc, SMS)
        if plan_tile.stages:
            continue
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        variants, errs = {}, {}
        for swap in (False, True):
            tile = config.decode_tile("awq", m, oc, SMS, swap_registers=swap)
            errs[swap] = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0])
            variants["swap" if swap else "copy"] = [lambda z=z, tile=tile: awq_gemm(x, *z, tile=tile) for z in sets]
        t = timed(variants, [lambda d=d: torch.matmul(x, d) for d in dense])
        rows.append(dict(fmt="awq", n=oc, k=ic, m=m, tile=str(plan_tile.key), copy_us=t["copy"], swap_us=t["swap"],
                         dense_us=t["dense"], err_copy=errs[False], err_swap=errs[True],
                         weight_tbs_swap=per_set / t["swap"] / 1e6))
        print(json.dumps(rows[-1]), flush=True)
    del sets, dense
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), open(os.path.join(out_dir, "wo_swap.json"), "w"),
          indent=1)
print("| fmt | N | K | M | copy µs | swap µs | dense µs | speedup vs dense (swap) | weight TB/s (swap) |")
for r in rows:
    print(f"| {r['fmt']} | {r['n']} | {r['k']} | {r['m']} | {r['copy_us']:.2f} | {r['swap_us']:.2f} | "
          f"{r['dense_us']:.2f} | {r['dense_us'] / r['swap_us']:.2f}x | {r['weight_tbs_swap']:.2f} |")
