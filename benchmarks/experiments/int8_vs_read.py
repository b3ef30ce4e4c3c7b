"""int8_scaled_mm at decode-size M against a bare read of the same weight bytes, session 13.

Issue #2 asks the M <= 32 rows to read their weights at >= 80% of the copy bandwidth. On the 16.8 MB weight of
N = K = 4096 a kernel lasts ~9 µs, and a fixed cost of a few µs (launch, ramp, tail) sits in every kernel of that
length. This measures how long the fastest read kernel we have (copy_bandwidth.py's Triton read, best block size)
takes for exactly those bytes, rotated through more than L2 like the GEMM's weights, next to the GEMM itself
(bf16 out, per-token / per-channel scales + bias; CUDA-graph medians, weight copies rotated, output checked against
the float64 reference first). ``python benchmarks/experiments/int8_vs_read.py`` prints a table and writes
$OUT/int8_vs_read.json.
"""
import json
import os
import sys

sys.path[:0] = ["benchmarks"]
import torch

from copy_bandwidth import read_sized
from cute_kernels import int8_scaled_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.reference import int8_scaled_mm_ref

LAYERS = [(4096, 4096), (14336, 4096), (4096, 14336)]  # (N, K)
MS = [1, 16, 32]


def gemm_us(m, n, k, check=True, config=None):
    copies = max(2, -(-200_000_000 // (n * k)))
    ws = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda") for _ in range(copies)]
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    int8_scaled_mm(a, ws[0].t(), sa, sb, bias, out=out, config=config)
    if check:
        ref = int8_scaled_mm_ref(a, ws[0].t(), sa, sb, bias)
        err = ((out.double() - ref).abs() / (ref.abs() + 1)).max().item()
        assert err < 1e-2, (m, n, k, err)
    t, _ = graph_time_us([lambda w=w: int8_scaled_mm(a, w.t(), sa, sb, bias, out=out, config=config) for w in ws])
    return t


def main():
    rows = []
    for n, k in LAYERS:
        read = read_sized(n * k / 1e6)
        for m in MS:
            t = gemm_us(m, n, k)
            rows.append({"M": m, "N": n, "K": k, "gemm_us": t, "read_us": read["us"], "read": read})
            print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "int8_vs_read.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    print(f"device: {torch.cuda.get_device_name()}")
    print("| M | N | K | int8 µs | bare read µs | GEMM / read |")
    for r in rows:
        print(f"| {r['M']} | {r['N']} | {r['K']} | {r['gemm_us']:.2f} | {r['read_us']:.2f} | "
              f"{r['gemm_us'] / r['read_us']:.2f} |")


if __name__ == "__main__":
    main()
