"""Tile shapes and the M dispatch of the weight-only GEMM (numbers and their measurements: docs/weight_only.md).

Three paths: two tile families of the one GEMM kernel template (kernel.py), and for fp16/bf16 activations at
M >= ``DENSE_MIN_M`` the dense path (dequantize_kernel.py writes the dense weight, then one cuBLAS GEMM):

* decode path (M <= ``DECODE_MAX_M``): 1 or 2 token tiles of 8, 8 warps of in-CTA split-K. Rows per warp (``nt``)
  trade activation reuse (each x register feeds ``nt`` tiles) against CTA count: the largest allowed ``nt`` that still
  launches >= 1.5 CTAs per SM, so the weight stream has enough loads in flight on every SM. The weight stream runs
  through a cp.async shared-memory ring (``DECODE_RING``) of up to 4 K steps.
* tensor-core path (larger M): 32 tokens x 64 rows per warp, two warps along N; each decoded weight fragment feeds 4
  MMAs and each activation fragment 4. Up to ``TENSOR_CORE_SPLIT_K_MAX_M`` tokens 4 warps also split K. Formats with
  group scales use 32-row warps (registers).
* dense path: no tile; the dequantize kernel is a flat elementwise map (its launch shape is fixed in its module).

``DECODE_MAX_M`` and ``awq_dense_min_tokens`` (awq_linear's switch to dequantize + torch.matmul) follow the
crossovers measured on the device (docs/weight_only.md), as does ``DENSE_MIN_M``. All can be overridden per call.
"""

from __future__ import annotations

from .kernel import TileShape

DECODE_MAX_M = 16
# fp16/bf16 x from this many tokens on: dequantize to a dense weight + cuBLAS (the mma.sync tiles run at ~1/3 of
# cuBLAS's WGMMA rate at large M). Measured on the H200 (N = K = 8192, bf16, docs/weight_only.md), tensor-core tiles
# vs dense: M = 64: 42 vs 85 us (4-bit), 56 vs 92 (8-bit); M = 128: 78 vs 86 (4-bit), 104 vs 94 (8-bit); M = 256:
# 133 vs 92, 168 vs 101. The crossover sits at M ~ 100-160 depending on the width; 128 splits it.
DENSE_MIN_M = 128
# awq_linear switches to dequantize + torch.matmul at this many tokens; narrow layers (OC <= AWQ_NARROW_OC) switch
# right after the decode path, because the tensor-core grid of a narrow layer is too small to beat cuBLAS there.
AWQ_DENSE_MIN_TOKENS = 256
AWQ_NARROW_OC = 4096

_MAX_NT = {8: 2, 4: 2, 2: 4, 1: 4}  # low widths: more x reuse per loaded activation (x bytes per weight byte = 8/bits)
# Weight pipeline of the decode tiles per width: True = cp.async shared-memory ring, False = register double buffer.
# Measured side by side on the H200 (docs/weight_only.md): the ring wins for 8-bit; registers for 4-bit (M = 1,
# N = K = 8192: 13.8 vs 16.2 us, same call order with programmatic dependent launch), 2 and 1 bit. AWQ (4-bit with
# zero points and group scales) measured the other way round: the ring wins at 10 of 12 (shape, M) points
# (OC = IC = 8192, M = 1: 16.1 vs 17.2 us), so AWQ keeps the ring.
DECODE_RING = {8: True, 4: False, 2: False, 1: False}
AWQ_DECODE_RING = True
RING_BYTES = 96 * 1024  # per CTA: 2 CTAs of 256 threads per SM still fit in 228 KB
TENSOR_CORE_TILE = TileShape(nt=4, mt=4, warps_n=2, warps_k=1)
# Up to this many tokens the tensor-core grid is too small to fill the GPU: split K over 4 warps of the CTA too
# (measured: 2.3x faster at M = 64, 14% slower at M = 256; the crossover in between is not measured).
TENSOR_CORE_SPLIT_K_MAX_M = 128
TENSOR_CORE_SPLIT_K_TILE = TileShape(nt=4, mt=4, warps_n=2, warps_k=4)
# With per-group scales (and AWQ zero points) the 4-tile warps need > 255 registers and spill (ptxas: 40-80
# local-memory ops); two tiles per warp fit (186-192 registers). Same CTA shape: 2 tiles x 4 warps along N.
SCALED_TENSOR_CORE_TILE = TileShape(nt=2, mt=4, warps_n=4, warps_k=1)
SCALED_TENSOR_CORE_SPLIT_K_TILE = TileShape(nt=2, mt=4, warps_n=4, warps_k=2)


def awq_dense_min_tokens(oc: int) -> int:
    return DECODE_MAX_M + 1 if oc <= AWQ_NARROW_OC else AWQ_DENSE_MIN_TOKENS


def ring_stages(nt: int, threads: int = 256) -> int:
    return max(2, min(4, RING_BYTES // (2 * nt * threads * 16)))


def decode_tile(bits: int, m: int, n: int, sm_count: int, ring: bool | None = None) -> TileShape:
    mt = 1 if m <= 8 else 2
    nt = _MAX_NT[bits]
    while nt > 1 and -(-n // (16 * nt)) < 1.5 * sm_count:
        nt //= 2
    ring = DECODE_RING[bits] if ring is None else ring
    return TileShape(nt=nt, mt=mt, warps_n=1, warps_k=8, stages=ring_stages(nt) if ring else 0)


def tensor_core_tile(m: int, scaled: bool = False) -> TileShape:
    """``scaled``: the weights carry per-group scales (the seed format with group_scales, or AWQ)."""
    if scaled:
        return SCALED_TENSOR_CORE_SPLIT_K_TILE if m <= TENSOR_CORE_SPLIT_K_MAX_M else SCALED_TENSOR_CORE_TILE
    return TENSOR_CORE_SPLIT_K_TILE if m <= TENSOR_CORE_SPLIT_K_MAX_M else TENSOR_CORE_TILE


def select_tile(bits: int, m: int, n: int, sm_count: int, path: str | None = None,
                decode_max_m: int | None = None, scaled: bool = False, dense: bool = False,
                dense_min_m: int | None = None, ring: bool | None = None) -> tuple[str, TileShape | None]:
    """(path name, tile) for a problem; ``path`` forces "decode", "tensor_core" or "dense"; ``scaled``: group
    scales; ``dense``: the caller can run the dense path (fp16/bf16 activations). The dense path has no tile.
    ``ring``: the decode tiles' weight pipeline (None = ``DECODE_RING[bits]``)."""
    if path is None:
        if dense and m >= (DENSE_MIN_M if dense_min_m is None else dense_min_m):
            path = "dense"
        else:
            path = "decode" if m <= (DECODE_MAX_M if decode_max_m is None else decode_max_m) else "tensor_core"
    if path == "decode":
        if m > 16:
            raise ValueError(f"the decode path handles M <= 16 tokens; got M = {m}")
        return path, decode_tile(bits, m, n, sm_count, ring=ring)
    if path == "tensor_core":
        return path, tensor_core_tile(m, scaled)
    if path == "dense":
        if not dense:
            raise ValueError("path='dense' is not available for this call (it needs fp16/bf16 activations and "
                             "the signed 1/2/4/8-bit formats of quantized_mm)")
        return path, None
    raise ValueError(f"path must be None, 'decode', 'tensor_core' or 'dense'; got {path!r}")


def shipped_tiles() -> list[TileShape]:
    """Every tile the dispatch can return (the CPU tests compile them)."""
    tiles = {decode_tile(b, m, n, 132) for b in _MAX_NT for m in (1, 16) for n in (64, 1 << 16)}
    tiles |= {decode_tile(4, m, n, 132, ring=AWQ_DECODE_RING) for m in (1, 16) for n in (64, 1 << 16)}
    tiles |= {TENSOR_CORE_TILE, TENSOR_CORE_SPLIT_K_TILE, SCALED_TENSOR_CORE_TILE, SCALED_TENSOR_CORE_SPLIT_K_TILE}
    return sorted(tiles, key=lambda t: t.key)
