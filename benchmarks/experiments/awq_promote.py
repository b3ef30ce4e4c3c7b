"""Group scales promoted onto the fp32 partial sums vs folded into the weights, AWQ (fp16 x, G = 128) and int4 with
group 128 scales (bf16 x), decode tiles at M in {1, 4, 16}, several tiles each; fp16/bf16 torch.matmul alongside.

Every variant is checked against the float64 reference (a slice) before it is timed; CUDA-graph medians with the
weights rotated through more than L2 (bench_awq / bench_weight_only machinery). Writes awq_promote.json to $OUT.
"""
import json
import os
import sys

sys.path.insert(0, "benchmarks")
import torch

import bench_awq
from bench_weight_only import graph_time_us, n_sets
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import awq_dequantize, awq_repack, quantized_mm
from cute_kernels.weight_only.compile import compile_weight_only
from cute_kernels.weight_only.kernel import TileShape

OUT = os.environ.get("OUT", ".")


def tiles(m):
    if m <= 8:
        return {"nt1 reg xa": TileShape(1, 1, 1, 8, 0, True), "nt2 reg xa": TileShape(2, 1, 1, 8, 0, True),
                "nt2 ring": TileShape(2, 1, 1, 8, 4, False), "nt4 reg": TileShape(4, 1, 1, 8, 0, False)}
    return {"nt2 ring": TileShape(2, 2, 1, 8, 4, False), "nt2 reg": TileShape(2, 2, 1, 8, 0, False),
            "nt1 reg xa": TileShape(1, 2, 1, 8, 0, True), "nt2 reg xa": TileShape(2, 2, 1, 8, 0, True)}


def awq_rows(shapes, ms):
    rows = []
    for oc, ic in shapes:
        awq_bytes = ic * oc // 2 + (ic // 128) * oc * 2.5
        sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(n_sets(int(awq_bytes), 16))]
        kws = [awq_repack.kernel_weights(q, s, z, 128) for q, s, z in sets]
        dense = [awq_dequantize(*s) for s in sets[:2]]
        for m in ms:
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            t_fp16, _ = graph_time_us([lambda w=w: torch.matmul(x, w) for w in dense])
            t_ship, _ = graph_time_us([lambda s=s: bench_awq_gemm(x, s) for s in sets])
            row = dict(n=oc, k=ic, m=m, fp16_us=t_fp16, shipped_us=t_ship, variants={})
            for name, tile in tiles(m).items():
                for promote in (False, True):
                    fn = compile_weight_only("awq", torch.float16, torch.float16, torch.float16, tile,
                                             promote_scales=promote)
                    out = torch.full((m, oc), float("nan"), device="cuda", dtype=torch.float16)
                    fn(x, kws[0].w, out, 1.0, kws[0].scales, kws[0].zeros, 128)
                    err = bench_awq._check(out, x, *sets[0])
                    t, _ = graph_time_us([lambda k=k: fn(x, k.w, out, 1.0, k.scales, k.zeros, 128) for k in kws])
                    row["variants"][f"{name} {'promoted' if promote else 'folded'}"] = dict(us=t, err=err)
            rows.append(row)
            best = min(row["variants"].items(), key=lambda kv: kv[1]["us"])
            print(f"AWQ OC={oc} IC={ic} M={m}: fp16 {t_fp16:.2f} shipped {t_ship:.2f} (x{t_fp16 / t_ship:.2f}) "
                  f"best {best[0]} {best[1]['us']:.2f} (x{t_fp16 / best[1]['us']:.2f})", flush=True)
        del sets, kws, dense
        awq_repack.clear_cache()
    return rows


def bench_awq_gemm(x, s):
    from cute_kernels.weight_only import awq_gemm

    return awq_gemm(x, *s)


def int4_rows(n, k, ms):
    rows = []
    per_set = n * k // 2 + n * (k // 128) * 4
    sets = [quantize_weights(torch.randn(n, k, device="cuda"), 4, 128) for _ in range(n_sets(per_set, 16))]
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        row = dict(n=n, k=k, m=m, variants={})
        for name, tile in tiles(m).items():
            for promote in (False, True):
                fn = compile_weight_only("int4", torch.bfloat16, torch.bfloat16, torch.float32, tile,
                                         promote_scales=promote)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                w, sc, gs = sets[0]
                fn(x, w, out, sc, gs, None, 128)
                ref = quantized_mm_ref(x[:, :].cpu(), w[:256].cpu(), sc, 4, gs[:256].cpu())
                err = ((out[:, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
                t, _ = graph_time_us([lambda s=s: fn(x, s[0], out, s[1], s[2], None, 128) for s in sets])
                row["variants"][f"{name} {'promoted' if promote else 'folded'}"] = dict(us=t, err=err)
        t_ship, _ = graph_time_us([lambda s=s: quantized_mm(x, s[0], s[1], 4, s[2]) for s in sets])
        row["shipped_us"] = t_ship
        rows.append(row)
        print(f"int4 g128 N={n} K={k} M={m}: shipped {t_ship:.2f} " +
              " ".join(f"{kk}={v['us']:.2f}" for kk, v in row["variants"].items()), flush=True)
    return rows


if __name__ == "__main__":
    awq = awq_rows(bench_awq.SHAPES, [1, 4, 16])
    json.dump(dict(device=torch.cuda.get_device_name(), awq=awq), open(os.path.join(OUT, "awq_promote.json"), "w"),
              indent=1)
    i4 = int4_rows(8192, 8192, [1, 16])
    json.dump(dict(device=torch.cuda.get_device_name(), awq=awq, int4=i4),
              open(os.path.join(OUT, "awq_promote.json"), "w"), indent=1)
    print("| OC | IC | M | fp16 | shipped | x | " + " | ".join(tiles(1)) + " |")
    for r in awq:
        v = r["variants"]
        print(f"| {r['n']} | {r['k']} | {r['m']} | {r['fp16_us']:.2f} | {r['shipped_us']:.2f} | "
              f"{r['fp16_us'] / r['shipped_us']:.2f} | " +
              " | ".join(f"{v[kk + ' folded']['us']:.1f}/{v[kk + ' promoted']['us']:.1f}" for kk in tiles(r['m'])) + " |")
