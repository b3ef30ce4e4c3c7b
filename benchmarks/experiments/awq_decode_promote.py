"""AWQ at 1-8 tokens on the H100: the shipped decode tile with its group scales folded (shipped) or promoted onto the
fp32 partial sums, two other promoted tiles, and the WGMMA path forced; fp16 torch.matmul alongside.

Session 4 measured promotion on an H200 (awq_promote.py) and shipped the fold everywhere; there, promotion won on
14336 x 4096 at M = 1 / 4 (15.5 vs 17.0 us) and lost on the other layers. This re-asks the question on the H100, on
today's tiles (side-by-side warps, L2 prefetch), where 14336 x 4096 at M = 1 sits at 2.90x of fp16.

Every variant is checked against the float64 reference (a corner) before it is timed; CUDA-graph medians with the
weights rotated through more than L2; three rounds, variants interleaved within each. Writes awq_decode_promote.json.
"""
import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, "benchmarks")
import torch

import bench_awq
from bench_weight_only import graph_time_us, n_sets
from cute_kernels import arch as _arch
from cute_kernels.weight_only import awq_dequantize, awq_gemm, awq_repack, config
from cute_kernels.weight_only.compile import compile_weight_only

OUT = os.environ.get("OUT", ".")
MS = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,2,4,8").split(",")]
ROUNDS = 3


def variants(m, oc, ic, sms, kws, sets, x):
    tile = config.decode_tile("awq", m, oc, sms, scaled=True, k=ic)
    out = {}

    def kernel(t, promote):
        fn = compile_weight_only("awq", torch.float16, torch.float16, torch.float16, t, promote_scales=promote)
        res = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
        return [lambda k=k: fn(x, k.w, res, 1.0, k.scales, k.zeros, 128) for k in kws], res

    out["shipped"] = ([lambda s=s: awq_gemm(x, *s) for s in sets], None)
    out["decode folded"] = kernel(tile, False)
    out["decode promoted"] = kernel(tile, True)
    out["nt2 ring promoted"] = kernel(replace(tile, nt=2, stages=4, x_ahead=False, swap_registers=False), True)
    out["nt2 reg xa promoted"] = kernel(replace(tile, nt=2, stages=0, x_ahead=True), True)
    out["wgmma"] = ([lambda s=s: awq_gemm(x, *s, path="wgmma") for s in sets], None)
    return tile, out


def run(variants_of, json_name, ms):
    """Time ``variants_of(m, oc, ic, sms, kws, sets, x) -> (tile, {name: (calls, result tensor or None)})`` with fp16
    torch.matmul alongside on the four layers of bench_awq at ``ms`` tokens: each variant checked against the float64
    reference first, then ROUNDS interleaved rounds of CUDA-graph medians; writes $OUT/``json_name`` and prints the
    best of the rounds as a table. Shared with awq_decode_sweep.py."""
    sms = _arch.sm_count(0)
    rows = []
    for oc, ic in bench_awq.SHAPES:
        awq_bytes = ic * oc // 2 + (ic // 128) * oc * 2.5
        sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(n_sets(int(awq_bytes), 16))]
        kws = [awq_repack.kernel_weights(q, s, z, 128) for q, s, z in sets]
        dense = [awq_dequantize(*s) for s in sets[:2]]
        for m in ms:
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            tile, vs = variants_of(m, oc, ic, sms, kws, sets, x)
            row = dict(n=oc, k=ic, m=m, tile=str(tile), err={}, us={})
            for name, (fns, res) in vs.items():
                r = fns[0]() if res is None else (fns[0](), res)[1]
                row["err"][name] = bench_awq._check(r, x, *sets[0])
            fp16 = [lambda w=w: torch.matmul(x, w) for w in dense]
            for _ in range(ROUNDS):
                row["us"].setdefault("fp16", []).append(graph_time_us(fp16)[0])
                for name, (fns, _res) in vs.items():
                    row["us"].setdefault(name, []).append(graph_time_us(fns)[0])
            rows.append(row)
            best = {k: min(v) for k, v in row["us"].items()}
            print(f"{oc}x{ic} M={m}: " + " ".join(f"{k}={v:.2f}" for k, v in best.items()), flush=True)
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
                      open(os.path.join(OUT, json_name), "w"))
        del sets, kws, dense
        awq_repack.clear_cache()
    names = list(dict.fromkeys(name for r in rows for name in r["us"]))  # rows may have different variant sets
    print("\n| OC x IC | M | " + " | ".join(names) + " |")
    for r in rows:
        b = {k: min(v) for k, v in r["us"].items()}
        print(f"| {r['n']}x{r['k']} | {r['m']} | " + " | ".join(
            "-" if k not in b else f"{b[k]:.2f}" + ("" if k == "fp16" else f" ({b['fp16'] / b[k]:.2f}x)")
            for k in names) + " |")


def main():
    run(variants, "awq_decode_promote.json", MS)

if __name__ == "__main__":
    main()
