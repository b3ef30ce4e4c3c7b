"""Session 26: #2's 8192^3 with 2x2 clusters (A and B both multicast) against the shipped 1x2 and 2x1.

A 2x2 cluster of 128x256 tiles reads each A and B panel from L2 once per two CTAs in both directions (1x2 and 2x1
share one operand only): 25% fewer operand bytes through L2 per FLOP. Four-CTA clusters must fit in one GPC, so
fewer of them can be resident than SMs / 4; the op's persistent grid is sized from ``sm_count``, which is set here
to 4 x the driver's maximum of active 4-CTA clusters (``cutlass.utils.HardwareInfo``) so that no cluster waits for
a second wave. Each variant is checked against float64 on a slice of rows, then timed interleaved over ROUNDS rounds:
*burst* = a CUDA graph of 2 calls after a 50 ms idle (median of 12), *sustained* = 15 replays of a 20-call graph
back to back (300 calls, one event pair), after 100 warm-up calls.

``python benchmarks/experiments/int8_cluster_shape.py``; writes $OUT/int8_cluster_shape.json.
"""
import json
import os
import statistics
import time

import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
M = N = K = 8192


def main():
    import cutlass.utils as cu

    dev = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.zeros(1, device=dev)  # a current CUDA context for the driver query below
    torch.cuda.synchronize()
    max4 = cu.HardwareInfo().get_max_active_clusters(4)
    max2 = cu.HardwareInfo().get_max_active_clusters(2)
    variants = {
        "1x2 (shipped)": (TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=2), sms),
        "2x1": (TileConfig(tile_m=128, tile_n=256, cluster_m=2, cluster_n=1), sms),
        "2x2": (TileConfig(tile_m=128, tile_n=256, cluster_m=2, cluster_n=2), 4 * max4),
    }
    torch.manual_seed(0)
    a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device=dev)
    b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device=dev).t()
    a_s, b_s = torch.rand(M, device=dev) + 0.5, torch.rand(N, device=dev) / 1000
    bias = torch.randn(N, device=dev).to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=dev)
    rows = slice(0, 256)
    ref = int8_scaled_mm_ref(a[rows].cpu(), b.cpu(), a_s[rows].cpu(), b_s.cpu(), bias.cpu()).double()
    graphs = {}
    for name, (cfg, sm_count) in variants.items():
        out.fill_(float("nan"))
        int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg, sm_count=sm_count)
        torch.cuda.synchronize()
        err = ((out[rows].cpu().double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (name, err)
        print(f"{name}: rel err {err:.2e}", flush=True)
        gs = []
        for calls in (2, 20):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg, sm_count=sm_count)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(calls):
                    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg, sm_count=sm_count)
            gs.append(g)
        graphs[name] = gs
    flops = 2 * M * N * K
    res = {name: {"burst": [], "sustained": []} for name in variants}
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(ROUNDS):
        for name, (burst_g, long_g) in graphs.items():
            ts = []
            for _ in range(12):
                torch.cuda.synchronize()
                time.sleep(0.05)
                e0.record()
                burst_g.replay()
                e1.record()
                torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e3 / 2)
            res[name]["burst"].append(flops / statistics.median(ts) / 1e6)
            for _ in range(5):
                long_g.replay()
            e0.record()
            for _ in range(15):
                long_g.replay()
            e1.record()
            torch.cuda.synchronize()
            res[name]["sustained"].append(flops / (e0.elapsed_time(e1) * 1e3 / 300) / 1e6)
            print(name, f"burst {res[name]['burst'][-1]:.0f} sustained {res[name]['sustained'][-1]:.0f} TOPS",
                  flush=True)
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "max_active_clusters": {"2": max2, "4": max4},
              "tops": res}
    with open(os.path.join(OUT, "int8_cluster_shape.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['device']}, {sms} SMs, max active clusters of 2 / 4 CTAs: {max2} / {max4}")
    print("| cluster | burst TOPS (rounds) | sustained TOPS (rounds) |\n|---|---|---|")
    for name, r in res.items():
        print(f"| {name} | {' / '.join(f'{v:.0f}' for v in r['burst'])} | "
              f"{' / '.join(f'{v:.0f}' for v in r['sustained'])} |")


if __name__ == "__main__":
    main()
