"""Session 50: the decode tiles of grouped signed formats (int1/2/4/8 with group-128 scales) capped at 2 CTAs per SM
or not, after kernel.group_of lowered their registers (some tiles went from > 80 to <= 80, i.e. from 2 to 3 CTAs of
256 threads per SM). Each point: the dispatch's decode tile, forced through quantized_mm(tile=...), uncapped and
capped (where its shared memory allows), CUDA-graph medians of interleaved rounds over rotating weight sets beyond
L2; outputs compared first.

    python benchmarks/experiments/wo_cap50.py OUT_JSON [--layers 4096x14336,4096x4096] [--bits 1,2,4,8] [--ms 1,4,8]
"""

import argparse
import json
import statistics
from dataclasses import replace

import torch

from cute_kernels import arch
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import config
from cute_kernels.weight_only.kernel import TileShape
from cute_kernels.weight_only.quantized_mm import quantized_mm

CALLS = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", default="4096x14336,4096x4096")
    ap.add_argument("--bits", default="1,2,4,8")
    ap.add_argument("--ms", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sms = arch.sm_count(0)
    rows = []
    for layer in args.layers.split(","):
        n, k = map(int, layer.split("x"))
        for bits in map(int, args.bits.split(",")):
            row_bytes = k * bits // 8
            sets = [(torch.randint(0, 256, (n, row_bytes), dtype=torch.uint8, device="cuda"),
                     (torch.rand(n, k // 128, device="cuda") * 0.02 + 0.001).half())
                    for _ in range(max(2, min(16, -(-240 * 2**20 // (n * row_bytes)))))]
            for m in map(int, args.ms.split(",")):
                path, tile = config.select_tile(bits, m, n, sms, None, scaled=True, k=k, wgmma=False)
                if path != "decode":
                    continue
                tiles = {"ship": tile}
                if tile.ring_bytes + tile.reduction_bytes <= TileShape.cap_smem_bytes(2):
                    tiles["cap2"] = replace(tile, max_ctas_per_sm=2)
                    tiles["nocap"] = replace(tile, max_ctas_per_sm=0)
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                outs = {v: quantized_mm(x, sets[0][0], 1.0, bits, sets[0][1], tile=t) for v, t in tiles.items()}
                same = {v: bool(torch.equal(o, outs["ship"])) for v, o in outs.items()}
                times = {v: [] for v in tiles}
                for _ in range(args.rounds):
                    for v, t in tiles.items():
                        calls = [lambda w=w, s=s, t=t: quantized_mm(x, w, 1.0, bits, s, tile=t) for w, s in sets]
                        times[v].append(graph_time_us(calls, min_calls=CALLS)[0])
                med = {v: round(statistics.median(ts), 3) for v, ts in times.items()}
                rows.append(dict(n=n, k=k, bits=bits, m=m, tile=str(tile), equal=same, median=med, rounds=times))
                print(f"{n}x{k} int{bits} g128 M={m} nt{tile.nt} wn{tile.warps_n} st{tile.stages} "
                      f"cap{tile.max_ctas_per_sm} equal {same} " + "  ".join(f"{v} {t:.2f}" for v, t in med.items()),
                      flush=True)
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
