"""AWQ int4 checkpoints in AutoAWQ's GEMM layout (what vLLM / SGLang ``awq_gemm`` and ``awq_dequantize`` read).

Tensors (IC = in_features = the GEMM's K, OC = out_features = N, G = group size along IC):

* ``qweight`` int32 ``[IC, OC / 8]``: row ``i`` holds input channel ``i``; int32 ``j`` packs the unsigned 4-bit
  weights of output columns ``8j .. 8j+7``.
* ``qzeros``  int32 ``[IC / G, OC / 8]``: the unsigned 4-bit zero points, packed exactly like ``qweight``.
* ``scales``  fp16/bf16 ``[IC / G, OC]``: one scale per (group, output column), not packed.

The weight is ``W[i, o] = (q[i, o] - z[i // G, o]) * s[i // G, o]`` and ``out = x @ W`` (``x [M, IC]``), i.e. W is
stored IC x OC ("K x N"), unlike the 1/2/4/8-bit format whose rows are output channels.

Nibble order inside one int32 (AutoAWQ ``WQLinear_GEMM.from_linear``)::

    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    nibble slot p (bits 4p .. 4p+3) holds column 8j + order_map[p]

so the even columns fill the low half-word and the odd columns the high half-word. Unpacking (vLLM's
``AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]``, the inverse permutation): column ``8j + c`` is in slot
``reverse[c]``, i.e. ``(packed >> shift[c]) & 0xF`` with ``shift = [0, 16, 4, 20, 8, 24, 12, 28]``. Checked against
AutoAWQ ``awq/modules/linear/gemm.py`` (packing loop) and vLLM ``awq_triton.py`` (``reverse_awq_order_tensor``,
``shifts = reverse * 4``).

Hand-computed example: columns 0..7 with values ``[0, 1, 2, 3, 4, 5, 6, 7]`` -> slots (low to high)
``[v0, v2, v4, v6, v1, v3, v5, v7] = [0, 2, 4, 6, 1, 3, 5, 7]`` -> int32 ``0x75316420``; values ``[15, 0, 0, 0, 0,
0, 0, 1]`` -> slot 0 = 15, slot 7 = 1 -> ``0x1000000F``. An int32 whose slot 7 is >= 8 is negative in two's
complement (``0xF...`` -> ``int32`` < 0); that is how the checkpoint stores it.

``awq_quantize`` is AutoAWQ's asymmetric min/max quantizer (``pseudo_quantize_tensor`` with ``zero_point=True``,
without the activation-aware search): per (group, column) ``s = max(max - min, 1e-5) / 15`` (then rounded to the
scale dtype), ``z = clamp(-round(min / s), 0, 15)``, ``q = clamp(round(w / s) + z, 0, 15)``.
"""

from __future__ import annotations

import torch

from ..checks import check_dtype, check_ndim, check_shape, check_tensor

PACK = 8  # int4 values per int32
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble slot p holds column order[p]
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column c sits in nibble slot reverse[c]
SCALE_DTYPES = (torch.float16, torch.bfloat16)
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _check_oc(OC: int, what: str) -> None:
    if OC <= 0 or OC % PACK != 0:
        raise ValueError(f"OC = {OC} ({what}) must be a positive multiple of 8 (8 int4 values per int32)")


def _check_group(IC: int, group_size: object) -> int:
    """AutoAWQ's -1 means one group over all of IC."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or (group_size <= 0 and group_size != -1):
        raise ValueError(f"group_size must be a positive int or -1 (= IC); got {group_size!r}")
    if group_size == -1:
        return IC
    if IC % group_size != 0:
        raise ValueError(f"IC = {IC} must be a multiple of group_size = {group_size}")
    return group_size


def _check_nibbles(name: str, t: torch.Tensor) -> None:
    if bool(((t < 0) | (t > 15)).any()):
        raise ValueError(f"{name} values must be unsigned 4-bit (0..15); got min {int(t.min())}, max {int(t.max())}")


def pack_int4(u: torch.Tensor) -> torch.Tensor:
    """[R, OC] values 0..15 -> int32 [R, OC/8] in AutoAWQ order."""
    R, OC = u.shape
    slots = u.to(torch.int64).reshape(R, OC // PACK, PACK)[:, :, list(AWQ_ORDER)]
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=u.device)
    word = (slots << shifts).sum(dim=-1)  # 0 .. 2^32-1, disjoint nibbles
    word = torch.where(word >= 2**31, word - 2**32, word)  # reinterpret as int32 bit pattern
    return word.to(torch.int32).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, OC/8] in AutoAWQ order -> int32 [R, OC] values 0..15 (``unpack_int4_bytes``, widened)."""
    return unpack_int4_bytes(packed).to(torch.int32)


def unpack_int4_bytes(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, OC/8] in AutoAWQ order -> uint8 [R, OC] values 0..15, with temporaries of 1 byte per value (the
    words read as their 4 little-endian bytes: nibble slot 2b is byte b's low nibble, slot 2b + 1 its high nibble;
    column c of a word sits in slot ``AWQ_REVERSE_ORDER[c]``)."""
    R, W = packed.shape
    b = packed.contiguous().view(torch.uint8).view(R, W, 4)
    slots = torch.stack([b & 0xF, b >> 4], dim=-1).view(R, W, PACK)
    return slots[:, :, list(AWQ_REVERSE_ORDER)].reshape(R, W * PACK)


def _check_packed(name: str, t: torch.Tensor) -> None:
    check_dtype(name, t, (torch.int32,))
    check_ndim(name, t, (2,))
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major [rows, OC/8] int32); got strides {tuple(t.stride())} "
                         f"for shape {tuple(t.shape)}; call .contiguous() first")


def check_awq_tensors(qweight, scales, qzeros) -> tuple[int, int, int]:
    """Validate an AWQ triple; returns (IC, OC, group_size). Shared by the reference and the kernels' host side."""
    qweight = check_tensor("qweight", qweight)
    scales = check_tensor("scales", scales)
    qzeros = check_tensor("qzeros", qzeros)
    _check_packed("qweight", qweight)
    _check_packed("qzeros", qzeros)
    check_dtype("scales", scales, SCALE_DTYPES)
    check_ndim("scales", scales, (2,))
    IC, OC = qweight.shape[0], qweight.shape[1] * PACK
    n_groups = scales.shape[0]
    if scales.shape[1] != OC:
        raise ValueError(f"scales must have shape [IC / G, OC] with OC = 8 * qweight.shape[1] = {OC}; "
                         f"got {tuple(scales.shape)}")
    if n_groups == 0 or IC % n_groups != 0:
        raise ValueError(f"scales.shape[0] = {n_groups} (IC / G) must divide IC = qweight.shape[0] = {IC}")
    check_shape("qzeros", qzeros, (n_groups, OC // PACK), "[IC / G, OC / 8], matching scales and qweight")
    return IC, OC, IC // n_groups


def awq_pack(int_weight: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group_size: int):
    """Pack unsigned int4 weights ``[IC, OC]`` and zeros ``[IC / G, OC]`` into AutoAWQ's int32 layout.

    Returns ``(qweight int32 [IC, OC/8], qzeros int32 [IC/G, OC/8], scales)`` (scales passed through, contiguous).
    """
    int_weight = check_tensor("int_weight", int_weight)
    zeros = check_tensor("zeros", zeros)
    scales = check_tensor("scales", scales)
    check_dtype("int_weight", int_weight, _INT_DTYPES)
    check_dtype("zeros", zeros, _INT_DTYPES)
    check_dtype("scales", scales, SCALE_DTYPES)
    check_ndim("int_weight", int_weight, (2,))
    IC, OC = int_weight.shape
    _check_oc(OC, "int_weight.shape[1]")
    G = _check_group(IC, group_size)
    check_shape("zeros", zeros, (IC // G, OC), "[IC / group_size, OC]")
    check_shape("scales", scales, (IC // G, OC), "[IC / group_size, OC]")
    _check_nibbles("int_weight", int_weight)
    _check_nibbles("zeros", zeros)
    return pack_int4(int_weight), pack_int4(zeros), scales.contiguous()


def awq_unpack(qweight: torch.Tensor, qzeros: torch.Tensor):
    """Inverse of ``awq_pack``: ``(int_weight int32 [IC, OC], zeros int32 [IC/G, OC])``, values 0..15."""
    qweight = check_tensor("qweight", qweight)
    qzeros = check_tensor("qzeros", qzeros)
    _check_packed("qweight", qweight)
    _check_packed("qzeros", qzeros)
    if qzeros.shape[1] != qweight.shape[1]:
        raise ValueError(f"qzeros must have OC / 8 = qweight.shape[1] = {qweight.shape[1]} columns; "
                         f"got {tuple(qzeros.shape)}")
    if qzeros.shape[0] == 0 or qweight.shape[0] % qzeros.shape[0] != 0:
        raise ValueError(f"qzeros.shape[0] = {qzeros.shape[0]} (IC / G) must divide IC = {qweight.shape[0]}")
    return unpack_int4(qweight), unpack_int4(qzeros)


def awq_dequantize_float(qweight, scales, qzeros) -> torch.Tensor:
    """``(q - z) * s`` in float32, ``[IC, OC]``; exact (a 5-bit integer times an fp16/bf16 scale)."""
    IC, OC, G = check_awq_tensors(qweight, scales, qzeros)
    q, z = awq_unpack(qweight, qzeros)
    zf = z.to(torch.float32).repeat_interleave(G, dim=0)
    sf = scales.to(torch.float32).repeat_interleave(G, dim=0)
    return (q.to(torch.float32) - zf) * sf


def awq_dequantize_reference(qweight, scales, qzeros) -> torch.Tensor:
    """``[IC, OC]`` in scales' dtype: ``(q - z) * s`` computed exactly in float32, then rounded once.

    Same role as vLLM's ``awq_dequantize(qweight, scales, qzeros, 0, 0, 0)``; that kernel computes in fp16 and may
    differ from this in the last bit.
    """
    return awq_dequantize_float(qweight, scales, qzeros).to(scales.dtype)


def awq_quantize(w_float: torch.Tensor, group_size: int, scale_dtype: torch.dtype = torch.float16):
    """Asymmetric int4 quantization of ``w_float [IC, OC]`` (AutoAWQ min/max rule, see module docstring).

    Returns ``(qweight int32 [IC, OC/8], qzeros int32 [IC/G, OC/8], scales scale_dtype [IC/G, OC])``.
    """
    w_float = check_tensor("w_float", w_float)
    check_dtype("w_float", w_float, (torch.float32, torch.float16, torch.bfloat16, torch.float64))
    check_ndim("w_float", w_float, (2,))
    if scale_dtype not in SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be float16 or bfloat16; got {scale_dtype}")
    IC, OC = w_float.shape
    _check_oc(OC, "w_float.shape[1]")
    G = _check_group(IC, group_size)
    if not bool(torch.isfinite(w_float).all()):
        raise ValueError("w_float must be finite (it holds inf or nan)")
    w = w_float.to(torch.float32).reshape(IC // G, G, OC)
    w_max = w.amax(dim=1)
    w_min = w.amin(dim=1)
    # Round the scale to its storage dtype first, so q and z are chosen for the scale a kernel will actually use.
    s = ((w_max - w_min).clamp(min=1e-5) / 15).to(scale_dtype)
    sf = s.to(torch.float32)
    z = torch.clamp(-torch.round(w_min / sf), 0, 15)
    q = torch.clamp(torch.round(w / sf.unsqueeze(1)) + z.unsqueeze(1), 0, 15)
    return awq_pack(q.reshape(IC, OC).to(torch.int32), z.to(torch.int32), s, G)
