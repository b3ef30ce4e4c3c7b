"""Weight-only 1/2/4/8-bit packed weights (the format of the templated ``quantized_mm<BITS>`` seed).

Layout
------
``w_packed`` is uint8 ``[N, K * bits / 8]``: row ``n`` holds weight row ``n`` (output channel ``n``; the GEMM is
``out = x @ W.T`` with ``x [M, K]``). Each byte holds ``8 / bits`` consecutive values of that row, LSB first:
value ``k`` lives in byte ``k // (8 / bits)`` at bits ``[bits * (k % (8/bits)), bits * (k % (8/bits)) + bits)``.

Decode of one ``bits``-wide code ``c`` (the seed's ``QuantizedTraits<BITS>::decode``):

====  ==============================  ==================================================
bits  code -> value                   range
====  ==============================  ==================================================
8     ``int8(c)`` (two's complement)  -128 .. 127
4     sign-extended nibble            -8 .. 7; the low nibble is the even index
2     ``c - 2`` (offset binary)       00 = -2, 01 = -1, 10 = 0, 11 = 1
1     ``+1`` if set else ``-1``       {-1, +1}; there is no zero
====  ==============================  ==================================================

Example (K = 8, one row): the 4-bit values ``[1, -2, 7, -8, 0, -1, 3, 4]`` pack to the bytes
``[0xE1, 0x87, 0xF0, 0x43]`` (byte 0 = low nibble 1 = 0x1, high nibble -2 = 0xE). The 2-bit values
``[-2, -1, 0, 1]`` pack to ``0b11_10_01_00 = 0xE4``; the 1-bit values ``[+1, -1, -1, -1, -1, -1, -1, +1]`` pack to
``0b1000_0001 = 0x81``.

Quantization scheme (``quantize_weights``), symmetric, round-to-nearest:

* 8, 4 and 2 bits: ``scale = amax(|w|) / qmax`` with ``qmax = 2**(bits-1) - 1`` (127, 7, 1) and
  ``q = clamp(round(w / scale), -qmax-1, qmax)``. Because ``|w / scale| <= qmax`` the most negative code is never
  produced: 2-bit is thus ternary ``{-1, 0, +1} * scale`` (BitNet b1.58 style); ``00 = -2`` still decodes, so
  packed weights from elsewhere that use it work in every kernel.
* 1 bit: ``q = +1 if w >= 0 else -1`` and ``scale = mean(|w|)``, the scale that minimises ``||w - q * scale||_2``
  for those signs (XNOR-Net / BitNet).
* ``group=None``: one per-tensor scale (a Python float, exactly a float32 value, as the seed's
  ``QuantizedConfig.scale``) and ``group_scales=None``.
  ``group=g`` (a multiple of 32 that divides K): ``group_scales`` float32 ``[N, K / g]`` holds the scale of each
  run of ``g`` values along K, and the per-tensor ``scale`` is 1.0. A group of 32 always covers whole bytes.
* An all-zero tensor/group gets scale 0.0, so it dequantizes to exact zeros at every width (1-bit included, which
  has no zero code); the quantizer divides by 1.0 there instead.

The weight a kernel multiplies with is ``decode(code) * scale * group_scales[n, k // g]`` (``dequantize_weights``).
"""

from __future__ import annotations

import torch

from ..checks import check_dtype, check_ndim, check_tensor

SUPPORTED_BITS = (1, 2, 4, 8)
_SIGNED_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def int32_bits(words: torch.Tensor) -> torch.Tensor:
    """int64 tensor of 32-bit patterns (0 .. 2^32 - 1) -> int32 tensor of the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def values_per_byte(bits: int) -> int:
    return 8 // bits


def value_range(bits: int) -> tuple[int, int]:
    """(lowest, highest) value a code of this width decodes to."""
    check_bits(bits)
    if bits == 1:
        return -1, 1
    if bits == 2:
        return -2, 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def check_bits(bits: object) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}; got {bits!r}")
    return bits


def _check_k(name: str, K: int, bits: int) -> None:
    vpb = values_per_byte(bits)
    if K <= 0 or K % vpb != 0:
        raise ValueError(f"{name} = {K} must be a positive multiple of {vpb} "
                         f"({bits}-bit weights pack {vpb} values per byte, and a byte never spans two rows)")


def group_size_of(K: int, group_scales: torch.Tensor, N: int) -> int:
    """The group length g implied by group_scales [N, K / g]; g must be a multiple of 32."""
    check_dtype("group_scales", group_scales, (torch.float32,))
    check_ndim("group_scales", group_scales, (2,))
    n_groups = group_scales.shape[1]
    if group_scales.shape[0] != N or n_groups == 0 or K % n_groups != 0 or (K // n_groups) % 32 != 0:
        raise ValueError(f"group_scales must have shape [N, K / group] = [{N}, K / group] with group a multiple of 32 "
                         f"that divides K = {K}; got {tuple(group_scales.shape)}")
    return K // n_groups


def _codes(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Signed values -> unsigned bits-wide codes (int32), the inverse of _decode."""
    if bits == 1:
        return (w > 0).to(torch.int32)
    if bits == 2:
        return w.to(torch.int32) + 2
    return w.to(torch.int32) & ((1 << bits) - 1)


def _decode(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned bits-wide codes (int32) -> signed values (int32)."""
    if bits == 1:
        return codes * 2 - 1
    if bits == 2:
        return codes - 2
    sign = 1 << (bits - 1)
    return (codes ^ sign) - sign  # two's-complement sign extension


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 8, bits, dtype=torch.int32, device=device)


def pack_weights(w_int: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack signed integer weights ``[N, K]`` into uint8 ``[N, K * bits / 8]`` (layout in the module docstring).

    ``w_int`` must hold values in the width's range (8: -128..127, 4: -8..7, 2: -2..1, 1: exactly -1 or +1).
    """
    w_int = check_tensor("w_int", w_int)
    bits = check_bits(bits)
    check_dtype("w_int", w_int, _SIGNED_INT_DTYPES)
    check_ndim("w_int", w_int, (2,))
    N, K = w_int.shape
    _check_k("K (w_int.shape[1])", K, bits)
    lo, hi = value_range(bits)
    if bits == 1:
        bad = (w_int != 1) & (w_int != -1)
        rule = "exactly -1 or +1 (1-bit weights have no zero)"
    else:
        bad = (w_int < lo) | (w_int > hi)
        rule = f"in [{lo}, {hi}]"
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"w_int values must be {rule} for bits={bits}; got {int(w_int[idx])} at index {idx}")
    vpb = values_per_byte(bits)
    codes = _codes(w_int, bits).reshape(N, K // vpb, vpb)
    packed = (codes << _shifts(bits, w_int.device)).sum(dim=-1)  # disjoint bit fields: sum == bitwise or
    return packed.to(torch.uint8).contiguous()


def unpack_weights(packed: torch.Tensor, bits: int, K: int) -> torch.Tensor:
    """Decode uint8 ``[N, K * bits / 8]`` packed weights into int8 ``[N, K]``."""
    packed = check_tensor("packed", packed)
    bits = check_bits(bits)
    check_dtype("packed", packed, (torch.uint8,))
    check_ndim("packed", packed, (2,))
    _check_k("K", K, bits)
    N = packed.shape[0]
    if packed.shape[1] * values_per_byte(bits) != K:
        raise ValueError(f"packed must have shape [N, K * bits / 8] = [{N}, {K * bits // 8}] for K = {K}, "
                         f"bits = {bits}; got {tuple(packed.shape)}")
    codes = (packed.to(torch.int32).unsqueeze(-1) >> _shifts(bits, packed.device)) & ((1 << bits) - 1)
    return _decode(codes, bits).reshape(N, K).to(torch.int8)


def _symmetric_scale(w: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """float32 scale over `dim` (kept); 0.0 for all-zero slices."""
    if bits == 1:
        s = w.abs().mean(dim=dim, keepdim=True)
    else:
        s = w.abs().amax(dim=dim, keepdim=True) / ((1 << (bits - 1)) - 1)
    return s.to(torch.float32)


def _round_to_codes(w: torch.Tensor, scale: torch.Tensor, bits: int) -> torch.Tensor:
    if bits == 1:
        return torch.where(w >= 0, 1, -1).to(torch.int8)
    lo, hi = value_range(bits)
    divisor = torch.where(scale > 0, scale, torch.ones_like(scale))  # scale 0 <=> w == 0 there: any divisor works
    return torch.clamp(torch.round(w / divisor), lo, hi).to(torch.int8)


def quantize_weights(w_float: torch.Tensor, bits: int, group: int | None = None):
    """Symmetric quantization of float weights ``[N, K]`` (scheme in the module docstring).

    Returns ``(w_packed uint8 [N, K*bits/8], scale: float, group_scales float32 [N, K/group] or None)``.
    """
    w_float = check_tensor("w_float", w_float)
    bits = check_bits(bits)
    check_dtype("w_float", w_float, _FLOAT_DTYPES)
    check_ndim("w_float", w_float, (2,))
    N, K = w_float.shape
    _check_k("K (w_float.shape[1])", K, bits)
    if not bool(torch.isfinite(w_float).all()):
        raise ValueError("w_float must be finite (it holds inf or nan)")
    w = w_float.to(torch.float32)
    if group is None:
        s = _symmetric_scale(w.reshape(1, -1), bits, dim=1)  # [1, 1]
        q = _round_to_codes(w, s, bits)
        return pack_weights(q, bits), float(s.item()), None
    if isinstance(group, bool) or not isinstance(group, int) or group <= 0 or group % 32 != 0 or K % group != 0:
        raise ValueError(f"group must be None or a positive multiple of 32 that divides K = {K}; got {group!r}")
    wg = w.reshape(N, K // group, group)
    s = _symmetric_scale(wg, bits, dim=2)  # [N, K/group, 1]
    q = _round_to_codes(wg, s, bits).reshape(N, K)
    return pack_weights(q, bits), 1.0, s.squeeze(-1).contiguous()


def dequantize_weights(packed: torch.Tensor, bits: int, K: int, scale: float,
                       group_scales: torch.Tensor | None = None) -> torch.Tensor:
    """float32 ``[N, K]`` = ``decode(packed) * scale * group_scales[n, k // group]`` (computed in float32)."""
    q = unpack_weights(packed, bits, K).to(torch.float32)
    w = q * float(scale)
    if group_scales is not None:
        group_scales = check_tensor("group_scales", group_scales)
        g = group_size_of(K, group_scales, q.shape[0])
        w = w * group_scales.to(w.device).repeat_interleave(g, dim=1)
    return w
