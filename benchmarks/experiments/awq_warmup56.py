"""Session 56: does a measurement depend on what ran before it? bench_awq.py against the experiment harnesses.

bench_awq.py times awq_gemm right after the previous round's four graphs (fp16 matmul, dequantize + matmul: HBM-bound
kernels at ~4 TB/s) and read 4096^2 at 4 / 16 tokens at 4.70 / 6.50 µs in session 55, where awq_ablate44.py and
awq_wgmma16_56.py, which time awq_gemm after other awq_gemm-sized kernels, read 4.50 / 6.22 for the same call. The
graphs are the same (16 calls over the same 16 rotating weight sets); only the warm-up differs - one graph replay,
well under a millisecond, while triton's do_bench warms up for 25 ms. Here, per layer and token count, interleaved
rounds of: awq_gemm and fp16 torch.matmul on the dequantized weight, each timed as bench_awq.py does (``cold``: one
replay of warm-up, right after the other's graph) and after ``--warmup-ms`` of its own replays (``warm``), plus
awq_gemm right after a dequantize + matmul graph (``after_dmm``, bench_awq.py's order); the SM clock (NVML, where
torch can read it) after each.

    python benchmarks/experiments/awq_warmup56.py OUT_JSON [--layers 4096x4096,...] [--ms 1,4,16] [--warmup-ms 25]
"""

import argparse
import json
import statistics

import torch

from bench_awq import GRAPH_CALLS, _awq_set
from bench_weight_only import n_sets
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq_dequantize, awq_gemm, awq_repack


def sm_clock_mhz():
    try:
        return torch.cuda.clock_rate()
    except Exception:  # noqa: BLE001 - pynvml missing: no clock column
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", default="4096x4096,14336x4096,4096x14336,8192x8192")
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--repack-first", action="store_true",
                    help="repack every weight set (awq_gemm at one token) before the dense copies, in bench_awq.py's "
                    "order (default: the repacks happen in the first timed graph's warm-up, after the dense copies)")
    args = ap.parse_args()
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        awq_bytes = ic * oc // 2 + (ic // 128) * oc * 2 + (ic // 128) * oc // 2
        sets = [_awq_set(ic, oc, torch.float16) for _ in range(n_sets(awq_bytes, 16))]
        if args.repack_first:
            for s in sets:
                awq_gemm(torch.randn(1, ic, device="cuda", dtype=torch.float16), *s)
        dense = [awq_dequantize(*s) for s in sets[:n_sets(ic * oc * 2, len(sets))]]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            print(f"  M={m}: x at {x.data_ptr() % 2**21} past a 2 MB boundary", flush=True)
            ref = x.double() @ dense[0].double()
            out = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
            awq_gemm(x, *sets[0], out=out)
            err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            fused = [lambda s=s: awq_gemm(x, *s) for s in sets]
            fp16 = [lambda w=w: torch.matmul(x, w) for w in dense]
            dmm = [lambda s=s: torch.matmul(x, awq_dequantize(*s)) for s in sets]
            t = {k: [] for k in ("fused_cold", "fp16_cold", "fused_warm", "fp16_warm", "fused_after_dmm")}
            clk = {k: [] for k in t}
            for _ in range(args.rounds):
                for key, calls, warm in (("fused_cold", fused, 0.0), ("fp16_cold", fp16, 0.0),
                                         ("fused_warm", fused, args.warmup_ms), ("fp16_warm", fp16, args.warmup_ms)):
                    t[key].append(graph_time_us(calls, min_calls=GRAPH_CALLS, warmup_ms=warm)[0])
                    clk[key].append(sm_clock_mhz())
                graph_time_us(dmm, min_calls=GRAPH_CALLS)
                t["fused_after_dmm"].append(graph_time_us(fused, min_calls=GRAPH_CALLS)[0])
                clk["fused_after_dmm"].append(sm_clock_mhz())
            med = {k: statistics.median(v) for k, v in t.items()}
            row = dict(oc=oc, ic=ic, m=m, err_vs_float64=err, rounds=t, median=med, sm_clock_mhz=clk,
                       speedup_cold=med["fp16_cold"] / med["fused_cold"],
                       speedup_warm=med["fp16_warm"] / med["fused_warm"])
            rows.append(row)
            print(f"{oc}x{ic} M={m} err {err:.1e} " + "  ".join(f"{k} {v:.2f}" for k, v in med.items())
                  + f"  x cold {row['speedup_cold']:.2f} warm {row['speedup_warm']:.2f}"
                  + f"  clk {[c for c in clk['fused_warm'] if c][:1]} / {[c for c in clk['fused_after_dmm'] if c][:1]}",
                  flush=True)
        del sets, dense
        awq_repack.clear_cache()
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
