"""Session 16: int8_scaled_mm at decode-size M with each work tile's K loop rotated (``Sm90GemmKernel.rotate_k``,
``ops.int8_scaled_mm.ROTATE_K``) against the shipped order, in one process.

The hypothesis (docs/weight_only.md, session 16): at a few tokens every CTA streams the same activation K-tile from
L2 at the same moment, so one L2 slice serves ~one request per CTA per line and K-tile. Here the swapped decode
tiles read 16-KB weight K-tiles next to a 2-4 KB activation K-tile, so less is expected than for 1-bit weights.
Per problem: both variants checked against float64 (NaN-poisoned output), then CUDA-graph medians over weight copies
rotated past L2, interleaved over ROUNDS rounds. Writes int8_rotate_k.json to $OUT; one JSON line per problem.
Run from the project root at commit 57604e7 (rotate_k was measured there and then removed again):
git checkout 57604e7 && python benchmarks/experiments/int8_rotate_k.py
"""
import json
import os

import torch

from cute_kernels import int8_scaled_mm
from cute_kernels.bench import graph_time_us, int8_operand_sets
from cute_kernels.ops import int8_scaled_mm as op
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
L2_MARGIN = 240 << 20
VARIANTS = (False, True)
ROUNDS = 3


def use(rotate):
    op.ROTATE_K = rotate
    op._validated.clear()


def problem(m, n, k):
    sets = int8_operand_sets(m, n, k, max(2, min(16, -(-L2_MARGIN // (n * k)))))
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    ref = int8_scaled_mm_ref(*sets[0])
    res = dict(M=m, N=n, K=k)
    times = {v: [] for v in VARIANTS}
    for v in VARIANTS:
        use(v)
        out.fill_(float("nan"))
        int8_scaled_mm(*sets[0], out=out)
        err = ((out.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
        assert err < 1e-2 and not torch.isnan(out).any(), (v, err)
    for _ in range(ROUNDS):
        for v in VARIANTS:
            use(v)
            times[v].append(graph_time_us([lambda s=s: int8_scaled_mm(*s) for s in sets])[0])
    for v in VARIANTS:
        res["rot" if v else "ship"] = round(sorted(times[v])[len(times[v]) // 2], 2)
    res["TBps_ship"] = round(n * k / res["ship"] / 1e6, 2)
    res["TBps_rot"] = round(n * k / res["rot"] / 1e6, 2)
    return res


def main():
    rows = []
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)):
        for m in (1, 16, 32):
            rows.append(problem(m, n, k))
            print(json.dumps(rows[-1]), flush=True)
    use(False)
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows},
              open(os.path.join(OUT, "int8_rotate_k.json"), "w"))
    print("\n| M | N | K | ship µs | rot µs | TB/s ship -> rot |")
    for r in rows:
        print(f"| {r['M']} | {r['N']} | {r['K']} | {r['ship']} | {r['rot']} | {r['TBps_ship']} -> {r['TBps_rot']} |")


if __name__ == "__main__":
    main()
