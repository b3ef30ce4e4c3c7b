"""Session 20: two persistent CTAs per SM (``TileConfig.ctas_per_sm``) for the decode-size rows of int8_scaled_mm
and fp8_blockwise_scaled_mm, whose tiles have one consumer warpgroup (64 weight rows): does a second CTA on the SM,
with its own pipeline, fill the gaps of the first (split-K fix-up, epilogue, FP8's promotion between WGMMA groups)?

Per problem: the shipped config ("ship"), the same with two CTAs per SM ("c2", the wave model then counts 264 slots
and picks its K split for them); for int8 also the 64-row swapped tile with two CTAs ("m64c2") where the shipped one
is 128 rows. Each variant checked against the float64 reference first (NaN-poisoned output); CUDA-graph medians with
weights rotated past L2; two rounds, interleaved. Writes $OUT/two_ctas_per_sm.json.
"""
import json
import os
import sys
from dataclasses import replace

sys.path[:0] = ["benchmarks"]
import torch

from cute_kernels import fp8_blockwise_scaled_mm, int8_scaled_mm
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.bench import graph_time_us
from cute_kernels.configs import select_sm90_int8
from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config as fp8_select
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref

ROUNDS = 2


def int8_rows():
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        ws = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
              for _ in range(max(2, -(-200_000_000 // (n * k))))]
        for m in (1, 16, 32):
            a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
            bias = torch.randn(n, device="cuda").bfloat16()
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            cfg = select_sm90_int8(m, n, k)
            vs = {"ship": cfg, "c2": replace(cfg, ctas_per_sm=2)}
            if cfg.tile_m == 128:
                vs["m64c2"] = replace(cfg, tile_m=64, ctas_per_sm=2)
            ref = int8_scaled_mm_ref(a, ws[0].t(), sa, sb, bias)
            fns, err = {}, {}
            for name, c in vs.items():
                out.fill_(float("nan"))
                int8_scaled_mm(a, ws[0].t(), sa, sb, bias, out=out, config=c)
                err[name] = ((out.double() - ref).abs() / (ref.abs() + 1)).max().item()
                fns[name] = [lambda w=w, c=c: int8_scaled_mm(a, w.t(), sa, sb, bias, out=out, config=c) for w in ws]
            yield dict(op="int8", m=m, n=n, k=k, cfg={v: c.describe() for v, c in vs.items()}, err=err), fns
        del ws


def fp8_rows():
    for n, k in ((2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)):
        copies = max(2, -(-200_000_000 // (n * k)))
        ws = [quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128) for _ in range(copies)]
        ws = [(q, to_mn_major(s)) for q, s in ws]  # the DeepSeek-V3 / vLLM layout, as bench_fp8_blockwise
        for m in (1, 64, 128):
            x = torch.randn(m, k, device="cuda")
            qa, sa = quantize_fp8_per_token_group(x, 128)
            sa = to_mn_major(sa)
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            cfg = fp8_select(m, n, k)
            vs = {"ship": cfg}
            if cfg.tile_m == 64:  # one consumer warpgroup: two CTAs fit (a 128-row tile's stages do not)
                vs["c2"] = replace(cfg, ctas_per_sm=2)
            ref = fp8_blockwise_scaled_mm_ref(qa, ws[0][0], sa, ws[0][1])
            fns, err = {}, {}
            for name, c in vs.items():
                out.fill_(float("nan"))
                fp8_blockwise_scaled_mm(qa, ws[0][0], sa, ws[0][1], out=out, config=c)
                err[name] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
                fns[name] = [lambda w=w, c=c: fp8_blockwise_scaled_mm(qa, w[0], sa, w[1], out=out, config=c)
                             for w in ws]
            yield dict(op="fp8", m=m, n=n, k=k, cfg={v: c.describe() for v, c in vs.items()}, err=err), fns
        del ws


def main():
    rows = []
    ops = os.environ.get("TWO_CTAS_OPS", "int8,fp8").split(",")
    for gen in [g() for name, g in (("int8", int8_rows), ("fp8", fp8_rows)) if name in ops]:
        for row, fns in gen:
            bad = {v: e for v, e in row["err"].items() if not e < 1e-2}
            if bad:
                print("WRONG RESULT", row, flush=True)
            row["us"] = {}
            for _ in range(ROUNDS):
                for name, f in fns.items():
                    row["us"].setdefault(name, []).append(graph_time_us(f)[0])
            rows.append(row)
            best = {v: min(t) for v, t in row["us"].items()}
            print(f"{row['op']} M={row['m']} {row['n']}x{row['k']}: "
                  + " ".join(f"{v}={t:.2f}" for v, t in best.items()) + f"  ({row['cfg']['ship']})", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "two_ctas_per_sm.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
