"""Session 7: the new decode dispatch (9-16-token plans of 4/8-bit and AWQ; side-by-side warps on multi-wave grids,
``config.side_by_side_warps``) against the session-6 dispatch, on the layers it was tuned on and on others
(Llama-2-13B 13824 x 5120 / 5120 x 13824, 11008 x 4096, 6144 x 4096, 28672 x 4096 / 8192).

The session-6 tiles come from data/wo_session6_tiles.json (written by running the session-6 ``config.decode_tile``
on these problems). Each problem whose tile changed: old and new timed in ABBA order over two rounds (CUDA-graph
medians, weights rotated beyond L2), both checked against float64 first (all tokens); AWQ rows also time fp16
torch.matmul on the dequantized weight. Writes wo_dispatch7.json to $OUT.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config, quantized_mm  # noqa: E402
from cute_kernels.weight_only.kernel import TileShape  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count
OUT = os.environ.get("OUT", ".")
DATA = json.load(open(os.path.join(os.path.dirname(__file__), "data", "wo_session6_tiles.json")))
OLD = {k: TileShape(**v) for k, v in DATA["old_tiles"].items()}
rows = []


def timed(label, calls, errs, extra=None):
    reps = {name: [] for name in calls}
    for _ in range(2):
        for name in ("old", "new", "new", "old"):
            reps[name].append(bwo.graph_time_us(calls[name])[0])
    for name, c in (extra or {}).items():
        reps[name] = [bwo.graph_time_us(c)[0] for _ in range(2)]
    us = {name: statistics.median(ts) for name, ts in reps.items()}
    tail = f" fp16 {us['fp16 matmul']:.2f} -> {us['fp16 matmul'] / us['new']:.2f}x" if extra else ""
    print(f"{label}: old {us['old']:.2f} new {us['new']:.2f} ({us['old'] / us['new']:.2f}x){tail}", flush=True)
    return {"label": label, "us": us, "errs": errs}


def dump():
    json.dump(rows, open(os.path.join(OUT, "wo_dispatch7.json"), "w"), indent=1)


for oc, ic in DATA["awq_shapes"]:
    sets = None
    for m in (1, 4, 8, 12, 16):
        old, new = OLD[f"awq {oc} {ic} {m}"], config.decode_tile("awq", m, oc, SMS, k=ic)
        if old == new:
            continue
        if sets is None:
            sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(ic * oc // 2, 16))]
            dense = [awq_dequantize(*z) for z in sets[:2]]
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        calls, errs = {}, {}
        for name, tile in (("old", old), ("new", new)):
            errs[name] = bench_awq._check(awq_gemm(x, *sets[0], tile=tile), x, *sets[0], rows=16)
            calls[name] = [lambda z=z, tile=tile: awq_gemm(x, *z, tile=tile) for z in sets]
        fp16 = {"fp16 matmul": [lambda d=d: torch.matmul(x, d) for d in dense]}
        row = timed(f"awq OC={oc} IC={ic} M={m} {old.key} -> {new.key}", calls, errs, fp16)
        row.update(fmt="awq", n=oc, k=ic, m=m, old=old.key, new=new.key)
        rows.append(row)
        dump()
    del sets

for n, k in DATA["int_shapes"]:
    for fmt, bits, group in (("int4", 4, None), ("int4 g128", 4, 128), ("int8", 8, None)):
        ws = None
        for m in (1, 8, 16):
            old = OLD[f"{fmt} {n} {k} {m}"]
            new = config.decode_tile(bits, m, n, SMS, scaled=group is not None, k=k)
            if old == new:
                continue
            if ws is None:
                per_set = n * k * bits // 8
                ws = [torch.randint(0, 256, (n, per_set // n), dtype=torch.uint8, device="cuda")
                      for _ in range(bwo.n_sets(per_set, 16))]
                gs = None if group is None else (torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(
                    torch.bfloat16)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            calls, errs = {}, {}
            for name, tile in (("old", old), ("new", new)):
                out = quantized_mm(x, ws[0], 0.01, bits, gs, tile=tile)
                ref = quantized_mm_ref(x[:16].cpu(), ws[0][:256].cpu(), 0.01, bits,
                                       None if gs is None else gs[:256].float().cpu())
                err = ((out[:16, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
                if not err < 1e-2 or bool(out.isnan().any()):
                    print(f"  WRONG RESULT {fmt} {n}x{k} M={m} {name}: {err:.3e}")
                    err = float("nan")
                errs[name] = err
                calls[name] = [lambda w=w, tile=tile: quantized_mm(x, w, 0.01, bits, gs, tile=tile) for w in ws]
            row = timed(f"{fmt} N={n} K={k} M={m} {old.key} -> {new.key}", calls, errs)
            row.update(fmt=fmt, n=n, k=k, m=m, old=old.key, new=new.key)
            rows.append(row)
            dump()
        del ws
