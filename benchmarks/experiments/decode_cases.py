"""Shared by the session-12 decode experiments (wo_cta_cap.py, wo_warps_n16.py): rotating weight sets of one format
and layer, and the (call, check) pair that runs a forced tile on them.

Formats: "1" / "2" / "4" / "8" (quantized_mm, bf16 x, per-tensor scale 0.01), "4g" (4-bit with group-128 bf16
scales) and "awq" (awq_gemm, fp16 x, G = 128, bench_awq's random checkpoint tensors).
"""

from __future__ import annotations

import torch

import bench_awq
import bench_weight_only as bwo


def bits_of(fmt: str) -> int:
    return 4 if fmt in ("4g", "awq") else int(fmt)


def weight_sets(fmt: str, n: int, k: int) -> list:
    """Enough independent weights of one layer to rotate through more than L2 (bench_weight_only.n_sets)."""
    from cute_kernels.formats.bitpack import pack_weights

    if fmt == "awq":
        nbytes = n * k // 2 + (k // 128) * n * 2.5
        return [bench_awq._awq_set(k, n, torch.float16) for _ in range(bwo.n_sets(int(nbytes), 16))]
    bits = bits_of(fmt)
    lo, hi = (-1, 2) if bits == 1 else (-(1 << (bits - 1)), 1 << (bits - 1))
    sets = []
    for _ in range(bwo.n_sets(n * k * bits // 8, 16)):
        w = torch.randint(lo, hi, (n, k), device="cuda")
        if bits == 1:
            w = torch.where(w > 0, 1, -1)
        gs = (torch.rand(n, k // 128, device="cuda") + 0.5).to(torch.bfloat16) if fmt == "4g" else None
        sets.append((pack_weights(w, bits), gs))
    return sets


def call_and_check(fmt: str, sets: list, m: int, k: int):
    """(call(set, tile), check(tile)): ``check`` runs the tile on sets[0] and returns its relative error against the
    float64 reference on an [8, 256] corner (NaN, after printing, when it exceeds 1e-2 or the output has NaNs)."""
    from cute_kernels.reference import quantized_mm_ref
    from cute_kernels.weight_only import awq_gemm, quantized_mm

    if fmt == "awq":
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)

        def call(s, tl):
            return awq_gemm(x, *s, tile=tl)

        return call, lambda tl: bench_awq._check(call(sets[0], tl), x, *sets[0])

    bits = bits_of(fmt)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)

    def call(s, tl):
        return quantized_mm(x, s[0], 0.01, bits, group_scales=s[1], tile=tl)

    def check(tl):
        out = call(sets[0], tl)
        w, gs = sets[0]
        if gs is None:
            return bwo._check(out, x, w, 0.01, bits)
        ref = quantized_mm_ref(x[:8].cpu(), w[:256].cpu(), 0.01, bits, group_scales=gs[:256].float().cpu())
        err = ((out[:8, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        if not err < 1e-2 or bool(out.isnan().any()):
            print(f"  WRONG RESULT before timing: error {err:.3e}")
            return float("nan")
        return err

    return call, check
