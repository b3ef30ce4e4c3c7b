"""Session 21: 1x2 clusters on the WGMMA weight-only path - the two token tiles of a row block as one cluster, the
weight tile multicast to both (each CTA loads half of it), against the shipped choice (``wgmma.select_config``:
one CTA per tile; at the time, two unsplit token tiles with a nearly empty second ran on padded x and out - the
run's "ship" column; the patch also kept the clustered launches unpadded. Since then only x is padded,
``wgmma.x_rows``, and the patch holds just the kernel's part).

For 8-bit ``quantized_mm`` (bf16 x) and AWQ g128 (fp16 x) on four layers at token counts with >= 2 token tiles:
both launched through the path's entry points with the config forced, each checked against float64 on a corner of
the output (and the clustered one on the last token rows, where a phantom tile of an odd tile count sits), then CUDA-graph
medians of three interleaved rounds over three weight copies, beside torch.matmul. Writes wo_cluster_tokens.json.

    git apply wo_cluster_tokens.patch (from the data archive's dropped/patches/)   (the kernel on main refuses clusters)
    python benchmarks/experiments/wo_cluster_tokens.py        (env: WC_LAYERS, WC_MS, WC_FAMS)

Result (H100, data/session21_h100/wo_cluster_tokens.json): correct everywhere, no faster (c2 / ship median 1.012
over 56 points, 0.93-1.33); unpadded nearly empty second tiles stay slow as clusters. Not shipped.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from wo_large_m_rule import call_for, error, weights  # noqa: E402

from cute_kernels import arch as _arch  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import wgmma  # noqa: E402

FAMS = os.environ.get("WC_FAMS", "int8,awq").split(",")
LAYERS = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WC_LAYERS", "8192x8192,14336x4096,4096x14336,4096x4096").split(",")]
MS = [int(v) for v in os.environ.get("WC_MS", "129,192,256,300,512,600,1024,2048,4096").split(",")]


def tail_error(fam, out, x, w):
    """Relative error on the last 3 token rows x the first 128 output columns."""
    rows = slice(x.shape[0] - 3, x.shape[0])
    if fam == "awq":
        ref = awq_gemm_ref(x[rows].cpu(), w[0][:, :16].cpu(), w[1][:, :128].cpu(), w[2][:, :16].cpu())
    else:
        ref = quantized_mm_ref(x[rows].cpu(), w[:128].cpu(), 0.01, 8)
    err = ((out[rows, :128].double().cpu() - ref).abs().max() / ref.abs().max()).item()
    return err if err < 1e-2 and not out.isnan().any() else float("nan")


def main():
    sms = _arch.sm_count(0)
    rows = []
    for fam in FAMS:
        dtype = torch.float16 if fam == "awq" else torch.bfloat16
        for n, k in LAYERS:
            sets, dense = weights(fam, n, k)
            for m in MS:
                ship = wgmma.select_config(m, n, k, sms)
                if -(-m // ship.tile_n) < 2:
                    continue
                c2 = replace(ship, cluster_n=2)
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                errs = {}
                for name, cfg in (("ship", ship), ("c2", c2)):
                    out.fill_(float("nan"))
                    call_for(fam, cfg, x, sets[0], out, sms)()
                    errs[name] = (error(fam, out, x, sets[0]), tail_error(fam, out, x, sets[0]))
                calls = {name: [call_for(fam, cfg, x, w, out, sms) for w in sets]
                         for name, cfg in (("ship", ship), ("c2", c2))}
                calls["matmul"] = [lambda: torch.matmul(x, dense.t(), out=out)]
                times = {name: [] for name in calls}
                for _ in range(3):
                    for name, c in calls.items():
                        times[name].append(graph_time_us(c)[0])
                med = {name: statistics.median(v) for name, v in times.items()}
                rows.append(dict(fam=fam, n=n, k=k, m=m, tile_n=ship.tile_n, split=ship.split_k, us=med,
                                 rounds=times, err=errs))
                print(f"{fam} {n}x{k} M={m:5d} {ship.tile_n}/s{ship.split_k}: ship {med['ship']:8.2f}  c2 "
                      f"{med['c2']:8.2f} ({med['c2'] / med['ship']:.3f})  matmul {med['matmul']:8.2f}  err {errs}",
                      flush=True)
                with open(os.path.join(os.environ.get("OUT", "."), "wo_cluster_tokens.json"), "w") as f:
                    json.dump(dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), rows=rows),
                              f, indent=1)
            del sets, dense
            torch.cuda.empty_cache()
    ratios = [r["us"]["c2"] / r["us"]["ship"] for r in rows]
    if ratios:
        print(f"{len(ratios)} points: c2/ship median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
