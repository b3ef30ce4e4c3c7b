"""Session 14: tile choices of the weight-only WGMMA path at 17-128 tokens, and the 1/2-bit formats against the
current dispatch and the dense bf16 GEMM (wo_wgmma.py measured AWQ and 4-bit).

Per problem (int4 group 128, bf16 x; weights rotated beyond L2; CUDA-graph medians, cute_kernels.bench): the shipped
config (``wgmma.select_config``: 128 weight rows, K slices by the wave model), 64-row tiles (one consumer warpgroup,
twice the tiles, K slices by the same model), and the shipped tile with twice the model's K slices (at most 8).
Then 2-bit and 1-bit (per-tensor scale, no groups) with the shipped config vs ``quantized_mm`` with ``path=None``
and torch.matmul on the dense bf16 weight. Every variant is checked against float64 on its first problem.
``python benchmarks/experiments/wo_wgmma_tune.py`` prints tables; writes $OUT/wo_wgmma_tune.json.
"""
import json
import os
from dataclasses import replace

import torch

from cute_kernels import arch as _arch
from cute_kernels.bench import graph_time_us
from cute_kernels.configs import best_split
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import quantized_mm, wgmma

OUT = os.environ.get("OUT", ".")
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
L2_MARGIN = 150 << 20


def weights(bits, n, k, group, copies):
    out = []
    for _ in range(copies):
        w, s, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
        out.append((w, s, None if gs is None else gs.bfloat16()))
    return out


def variants(m, n, k, sms):
    base = wgmma.select_config(m, n, k, sms)
    k_tiles = -(-k // wgmma.K_TILE)
    row64 = replace(base, tile_m=64)
    tiles64 = -(-n // 64) * -(-m // base.tile_n)
    row64 = replace(row64, split_k=best_split(tiles64, 64, wgmma.MAX_SPLIT_K, k_tiles, sms))
    return {"shipped": base, "64 rows": row64,
            "2x slices": replace(base, split_k=min(wgmma.MAX_SPLIT_K, 2 * base.split_k))}


def main():
    sms = _arch.sm_count(0)
    rows = []
    checked = set()
    for n, k in LAYERS:
        copies = max(1, min(8, -(-L2_MARGIN // (n * k // 2))))
        ws = weights(4, n, k, 128, copies)
        for m in (17, 32, 64, 128):
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            row = {"family": "int4g128", "M": m, "N": n, "K": k}
            for name, cfg in variants(m, n, k, sms).items():
                if name not in checked:  # float64 check of each variant once (on its first problem)
                    w, s, gs = ws[0]
                    xs = x[:, :]
                    o = torch.full_like(out, float("nan"))
                    wgmma.quantized_mm_wgmma(xs, w, o, s, 4, gs, 128, sms, cfg)
                    ref = quantized_mm_ref(xs.cpu(), w.cpu(), s, 4, gs.float().cpu())
                    err = ((o.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    assert not o.isnan().any() and err < 8e-3, (name, err)
                    checked.add(name)
                calls = [lambda w=w, s=s, gs=gs, cfg=cfg: wgmma.quantized_mm_wgmma(x, w, out, s, 4, gs, 128, sms, cfg)
                         for w, s, gs in ws]
                row[name] = graph_time_us(calls)[0]
                row[name + " cfg"] = cfg.describe()
            rows.append(row)
            print(json.dumps(row), flush=True)
        del ws
        torch.cuda.empty_cache()
    low = []
    for bits in (2, 1):
        for n, k in LAYERS:
            copies = max(1, min(8, -(-L2_MARGIN // (n * k * bits // 8))))
            ws = weights(bits, n, k, None, copies)
            dense_copies = max(1, min(8, -(-L2_MARGIN // (n * k * 2))))
            dense = [unpack_weights(w, bits, k).to(torch.bfloat16) * s for w, s, _ in ws[:dense_copies]]
            for m in (17, 64, 128, 256):
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                if (bits, "check") not in checked:
                    w, s, _ = ws[0]
                    o = torch.full_like(out, float("nan"))
                    wgmma.quantized_mm_wgmma(x, w, o, s, bits, None, 64, sms)
                    ref = quantized_mm_ref(x.cpu(), w.cpu(), s, bits)
                    err = ((o.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                    assert not o.isnan().any() and err < 8e-3, (bits, err)
                    checked.add((bits, "check"))
                r = {"family": f"int{bits}", "M": m, "N": n, "K": k}
                r["wgmma"] = graph_time_us([lambda w=w, s=s: wgmma.quantized_mm_wgmma(x, w, out, s, bits, None, 64,
                                                                                      sms) for w, s, _ in ws])[0]
                r["current"] = graph_time_us([lambda w=w, s=s: quantized_mm(x, w, s, bits, out=out)
                                              for w, s, _ in ws])[0]
                r["dense"] = graph_time_us([lambda wd=wd: torch.matmul(x, wd.t(), out=out) for wd in dense])[0]
                r["cfg"] = wgmma.select_config(m, n, k, sms).describe()
                low.append(r)
                print(json.dumps(r), flush=True)
            del ws, dense
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_wgmma_tune.json"), "w") as f:
        json.dump({"device": dev, "tiles": rows, "low_bits": low}, f, indent=1)
    print(f"\n{dev}: int4 g128 bf16, us")
    print(f"{'M':>4s} {'N':>6s} {'K':>6s} {'shipped':>8s} {'64 rows':>8s} {'2x slices':>9s}  shipped cfg")
    for r in rows:
        print(f"{r['M']:4d} {r['N']:6d} {r['K']:6d} {r['shipped']:8.1f} {r['64 rows']:8.1f} {r['2x slices']:9.1f}  "
              f"{r['shipped cfg']}")
    print(f"\n{'fmt':5s} {'M':>4s} {'N':>6s} {'K':>6s} {'wgmma':>7s} {'current':>8s} {'dense':>7s} {'vs cur':>7s} "
          f"{'vs dense':>8s}")
    for r in low:
        print(f"{r['family']:5s} {r['M']:4d} {r['N']:6d} {r['K']:6d} {r['wgmma']:7.1f} {r['current']:8.1f} "
              f"{r['dense']:7.1f} {r['current'] / r['wgmma']:7.2f} {r['dense'] / r['wgmma']:8.2f}")


if __name__ == "__main__":
    main()
