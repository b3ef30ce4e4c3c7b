"""Session 21: the WGMMA weight-only path's tile width and K split above 128 tokens, old rule against new.

Old rule (sessions 14-20): 256-token tiles and the weight-streaming wave model's K split (``configs.best_split``).
New rule: ``wgmma.large_m_config`` (256- or 128-token tiles and the split with the lowest modelled time, a split
charged for its fix-up). For every (layer, M) where the two differ: both configs launched through the path's own
entry points (``quantized_mm_wgmma`` 8-bit bf16 x; ``awq_gemm_wgmma`` AWQ g128 fp16 x), each checked against float64
on a corner of the output, then timed as CUDA-graph medians in ``ROUNDS`` interleaved rounds (weights rotated over a
few copies), beside torch.matmul on the dense weight. Writes wo_large_m_rule.json to $OUT.

    python benchmarks/experiments/wo_large_m_rule.py       (env: WL_FAMS, WL_LAYERS, WL_MS, WL_ROUNDS)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cute_kernels import arch as _arch  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import TileConfig, best_split  # noqa: E402
from cute_kernels.formats.awq import awq_dequantize_float, awq_quantize  # noqa: E402
from cute_kernels.formats.bitpack import unpack_weights  # noqa: E402
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import awq_repack, wgmma  # noqa: E402

FAMS = os.environ.get("WL_FAMS", "int8,awq").split(",")
LAYERS = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WL_LAYERS", "4096x4096,14336x4096,4096x14336,8192x8192,6144x4096,1024x4096,28672x4096,11008x4096").split(",")]
MS = [int(v) for v in os.environ.get("WL_MS", "129,192,256,384,512,768,1024,1536,2048,3072").split(",")]
ROUNDS = int(os.environ.get("WL_ROUNDS", "3"))
COPIES = 3


def old_config(m, n, k, sms):
    tile_n = 256
    tiles = -(-n // 128) * -(-m // tile_n)
    s = best_split(tiles, 128, wgmma.MAX_SPLIT_K, -(-k // wgmma.K_TILE), sms)
    return TileConfig(tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1, split_k=s)


def weights(fam, n, k):
    if fam == "awq":
        sets = []
        for _ in range(COPIES):
            q, z, s = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, torch.float16)
            sets.append((q, s, z, awq_repack.kernel_weights(q, s, z, 128)))
        dense = awq_dequantize_float(*sets[0][:3]).to(torch.float16).t().contiguous()
        return sets, dense
    sets = [torch.randint(0, 256, (n, k), dtype=torch.uint8, device="cuda") for _ in range(COPIES)]
    return sets, (unpack_weights(sets[0], 8, k).to(torch.bfloat16) * 0.01)


def call_for(fam, cfg, x, w, out, sms):
    if fam == "awq":
        return lambda: wgmma.awq_gemm_wgmma(x, w[3], out, sms, cfg=cfg)
    return lambda: wgmma.quantized_mm_wgmma(x, w, out, 0.01, 8, None, wgmma.NO_GROUP, sms, cfg=cfg)


def error(fam, out, x, w):
    rows, cols = 4, 256
    if fam == "awq":
        ref = awq_gemm_ref(x[:rows].cpu(), w[0][:, :cols // 8].cpu(), w[1][:, :cols].cpu(), w[2][:, :cols // 8].cpu())
    else:
        ref = quantized_mm_ref(x[:rows].cpu(), w[:cols].cpu(), 0.01, 8)
    err = ((out[:rows, :cols].double().cpu() - ref).abs().max() / ref.abs().max()).item()
    return err if err < 1e-2 and not out.isnan().any() else float("nan")


def main():
    sms = _arch.sm_count(0)
    out_dir = os.environ.get("OUT", ".")
    rows = []
    for fam in FAMS:
        dtype = torch.float16 if fam == "awq" else torch.bfloat16
        for n, k in LAYERS:
            points = [(m, old_config(m, n, k, sms), wgmma.select_config(m, n, k, sms)) for m in MS]
            points = [p for p in points if (p[1].tile_n, p[1].split_k) != (p[2].tile_n, p[2].split_k)]
            if not points:
                continue
            sets, dense = weights(fam, n, k)
            for m, old, new in points:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                errs = {}
                for name, cfg in (("old", old), ("new", new)):
                    out.fill_(float("nan"))
                    call_for(fam, cfg, x, sets[0], out, sms)()
                    errs[name] = error(fam, out, x, sets[0])
                calls = {name: [call_for(fam, cfg, x, w, out, sms) for w in sets]
                         for name, cfg in (("old", old), ("new", new))}
                calls["matmul"] = [lambda: torch.matmul(x, dense.t(), out=out)]
                times = {name: [] for name in calls}
                for _ in range(ROUNDS):
                    for name, c in calls.items():
                        times[name].append(graph_time_us(c)[0])
                med = {name: statistics.median(v) for name, v in times.items()}
                row = dict(fam=fam, n=n, k=k, m=m, old=[old.tile_n, old.split_k], new=[new.tile_n, new.split_k],
                           us=med, rounds=times, err=errs)
                rows.append(row)
                print(f"{fam} {n}x{k} M={m:5d} old {old.tile_n}/s{old.split_k} {med['old']:8.2f}  new "
                      f"{new.tile_n}/s{new.split_k} {med['new']:8.2f}  new/old {med['new'] / med['old']:.3f}  "
                      f"matmul {med['matmul']:8.2f}", flush=True)
                with open(os.path.join(out_dir, "wo_large_m_rule.json"), "w") as f:
                    json.dump(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), rows=rows),
                              f, indent=1)
            del sets, dense
            torch.cuda.empty_cache()
    ratios = [r["us"]["new"] / r["us"]["old"] for r in rows]
    if ratios:
        print(f"{len(ratios)} points: new/old median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}; faster on {sum(q < 0.98 for q in ratios)}, slower on "
              f"{sum(q > 1.02 for q in ratios)}")


if __name__ == "__main__":
    main()
