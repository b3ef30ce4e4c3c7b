"""AWQ's decode tiles on #5's small layer re-swept with the one-fma decode (session 36).

Sessions 6-12 chose the decode path's tile options on an H200 with the exact AWQ decode; session 34 replaced it by one
fma per weight pair (fewer instructions, other register pressure). This forces each nearby decode tile through
``awq_gemm(..., path="decode", tile=...)`` on 4096^2 at 1 / 4 tokens (and 4096 x 14336 at 4), fp16 x, group 128:
the shipped tile (``config.decode_tile``) and one-option changes of it. Each variant is checked against float64
first (NaN-poisoned output), then timed as CUDA-graph medians over weight copies rotated past L2, in ``ROUNDS``
interleaved rounds. Prints a table (time / shipped) and writes $OUT/awq_decode_tiles36.json.
"""
import json
import os
import statistics
import sys
from dataclasses import replace

sys.path[:0] = ["benchmarks"]
import torch

from bench_weight_only import n_sets
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_gemm, config

ROUNDS = int(os.environ.get("ROUNDS", "3"))
CASES = [(4096, 4096, 1), (4096, 4096, 4), (4096, 14336, 4)]  # (OC, IC, M)


def variants(shipped):
    out = {"shipped": shipped}
    out["x_ahead off"] = replace(shipped, x_ahead=not shipped.x_ahead)
    out["swap_registers"] = replace(shipped, swap_registers=True)
    out["ring 3 + preload"] = replace(shipped, stages=3, preload_weights=True, swap_registers=False)
    out["ring 4 + preload"] = replace(shipped, stages=4, preload_weights=True, swap_registers=False)
    out["prefetch 0"] = replace(shipped, l2_prefetch_mb=0)
    out["prefetch 8"] = replace(shipped, l2_prefetch_mb=8)
    out["2 x 4 warps"] = replace(shipped, warps_n=2, warps_k=4)
    out["nt 2"] = replace(shipped, nt=2)
    out["cap 2 per SM"] = replace(shipped, max_ctas_per_sm=2)
    return out


def main():
    rows = []
    for oc, ic, m in CASES:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        shipped = config.decode_tile("awq", m, oc, sms, scaled=True, k=ic)
        sets = [awq_quantize(torch.randn(ic, oc, device="cuda"), 128)
                for _ in range(n_sets(ic * oc // 2 + ic // 128 * oc * 3, 16))]
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        ref = awq_gemm_ref(x, sets[0][0], sets[0][2], sets[0][1])
        times = {}
        for name, tile in variants(shipped).items():
            out = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
            try:
                awq_gemm(x, sets[0][0], sets[0][2], sets[0][1], out=out, path="decode", tile=tile)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a variant the kernel refuses is reported, not timed
                print(f"{oc}x{ic} M={m} {name}: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-3:
                print(f"{oc}x{ic} M={m} {name}: WRONG, error {err:.2e}")
                continue
            times[name] = []
        for _ in range(ROUNDS):
            for name in times:
                tile = variants(shipped)[name]
                calls = [lambda q=q, s=s, z=z, t=tile: awq_gemm(x, q, s, z, path="decode", tile=t) for q, z, s in sets]
                times[name].append(graph_time_us(calls)[0])
        base = statistics.median(times["shipped"])
        for name, ts in times.items():
            t = statistics.median(ts)
            rows.append(dict(oc=oc, ic=ic, m=m, variant=name, us=t, ratio=t / base, rounds=ts))
            print(f"{oc}x{ic} M={m} {name:18s} {t:7.2f} us  {t / base:.3f}x", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "awq_decode_tiles36.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
