"""DeepSeek-style FP8 quantization with fine-grained scales (the blockwise / groupwise FP8 GEMM's operands).

* Activations, per-token groups of ``1 x group`` (group = 128): ``quantize_fp8_per_token_group(x [..., M, K])``
  returns ``q`` fp8 ``[..., M, K]`` and ``scale`` float32 ``[..., M, ceil(K / group)]``.
* Whole rows, one scale per token or per output channel (the per-token / per-channel FP8 of ``fp8_scaled_mm`` and
  ``Fp8RowwiseLinear``): ``quantize_fp8_rowwise(t [..., K])`` returns ``q`` fp8 ``[..., K]`` and ``scale`` float32
  ``[...]``.
* Weights, ``block x block`` tiles (128 x 128): ``quantize_fp8_blockwise(w [..., N, K])`` returns ``q`` fp8
  ``[..., N, K]`` and ``scale`` float32 ``[..., ceil(N / block), ceil(K / block)]``.

For every tile, ``scale = max(amax(|x|), eps) * fp32(1 / fp8_max)`` (``fp8_max`` = 448 for e4m3fn, 57344 for e5m2) and
``q = fp8(clamp(x / scale, -fp8_max, fp8_max))``; ``eps`` (1e-10) only keeps all-zero tiles from dividing by zero.
The dequantized value is ``q * scale`` (``dequantize_fp8_*``). vLLM's dynamic per-token quantizer
(``scaled_fp8_quant``) floors the scale at ``1 / (448 * 512)`` instead of ``eps / 448``, so rows whose amax is below
1/512 get other (finer) codes here; the values of the rest agree. A partial last tile (K or N not a multiple of the
tile) gets its own scale from the elements that exist. These are the scale granularities (gM, gN, gK) = (1, 128, 128)
("groupwise", DeepSeek-V3) and (128, 128, 128) ("blockwise") of the GEMM, whose reference is
``reference.fp8_blockwise_scaled_mm_ref``.

Scale layouts the kernels accept for ``a_scale [M, ceil(K/128)]``: K-major (the contiguous tensor these functions
return) or M-major, i.e. ``a_scale.t().contiguous().t()`` (strides ``(1, M)``): the DeepSeek-V3 / vLLM / DeepGEMM
convention and CUTLASS's default (``UMMA::Major::MN``), in which the ``M`` scales of one K-block are contiguous so a
CTA loads its tile's scales with one TMA box. ``scale_layouts.to_mn_major`` converts; ``scale_layouts`` describes
both as CuTe layouts.
"""

from __future__ import annotations

import torch

from ..checks import check_dtype, check_tensor

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
EPS = 1e-10


def fp8_max(dtype: torch.dtype) -> float:
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be float8_e4m3fn or float8_e5m2; got {dtype}")
    return float(torch.finfo(dtype).max)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_tile(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int; got {v!r}")
    return v


def _block_pair(block: object) -> tuple[int, int]:
    if isinstance(block, (tuple, list)):
        if len(block) != 2:
            raise ValueError(f"block must be an int or a (rows, cols) pair; got {block!r}")
        return _check_tile("block[0]", block[0]), _check_tile("block[1]", block[1])
    b = _check_tile("block", block)
    return b, b


def _expand_scale(scale: torch.Tensor, rows: int, cols: int, R: int, C: int) -> torch.Tensor:
    """[..., ceil(R/rows), ceil(C/cols)] -> [..., R, C]: every element gets its tile's scale."""
    return scale.repeat_interleave(rows, dim=-2)[..., :R, :].repeat_interleave(cols, dim=-1)[..., :C]


def _tile_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    *lead, R, C = x.shape
    RB, CB = _ceil_div(R, rows), _ceil_div(C, cols)
    # Zero padding never raises an amax, so a partial tile's scale comes from its real elements only.
    xp = torch.nn.functional.pad(x.abs(), (0, CB * cols - C, 0, RB * rows - R))
    return xp.reshape(*lead, RB, rows, CB, cols).amax(dim=(-3, -1))


def _quantize_tiles(x: torch.Tensor, rows: int, cols: int, dtype: torch.dtype, name: str, check_finite: bool = True):
    fmax = fp8_max(dtype)
    x = check_tensor(name, x)
    check_dtype(name, x, _IN_DTYPES)
    if x.dim() < 2:
        raise ValueError(f"{name} must be at least 2-D ([..., rows, K]); got shape {tuple(x.shape)}")
    if check_finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (it holds inf or nan)")
    xf = x.to(torch.float32)
    # times fp32(1 / fmax), not divided by fmax: what torch's CUDA division by a scalar computes, so that CPU and
    # GPU (and the quantizer kernel, cute_kernels.quantize) agree to the bit
    scale = _tile_amax(xf, rows, cols).clamp(min=EPS) * (1.0 / fmax)
    *_, R, C = x.shape
    q = (xf / _expand_scale(scale, rows, cols, R, C)).clamp(-fmax, fmax).to(dtype)
    return q, scale.contiguous()


def _dequantize_tiles(q: torch.Tensor, scale: torch.Tensor, rows: int, cols: int, what: str) -> torch.Tensor:
    q = check_tensor("q", q)
    scale = check_tensor("scale", scale)
    check_dtype("q", q, FP8_DTYPES)
    check_dtype("scale", scale, (torch.float32,))
    if q.dim() < 2:
        raise ValueError(f"q must be at least 2-D; got shape {tuple(q.shape)}")
    *lead, R, C = q.shape
    want = (*lead, _ceil_div(R, rows), _ceil_div(C, cols))
    if tuple(scale.shape) != want:
        raise ValueError(f"scale must have shape {want} ({what} for q of shape {tuple(q.shape)}); "
                         f"got {tuple(scale.shape)}")
    return q.to(torch.float32) * _expand_scale(scale, rows, cols, R, C)


def quantize_fp8_per_token_group(x: torch.Tensor, group: int = 128, dtype: torch.dtype = torch.float8_e4m3fn,
                                 check_finite: bool = True):
    """``x [..., M, K]`` -> ``(q dtype [..., M, K], scale float32 [..., M, ceil(K/group)])``, 1 x group tiles.
    ``check_finite=False`` skips the check that refuses inf / nan, which reads a flag back from the GPU (a host sync,
    and a graph break under torch.compile): what a layer quantizing its activations on every call wants; a non-finite
    element then makes its group's scale non-finite, and its token's outputs NaN or inf, as a float layer would."""
    return _quantize_tiles(x, 1, _check_tile("group", group), dtype, "x", check_finite)


def dequantize_fp8_per_token_group(q: torch.Tensor, scale: torch.Tensor, group: int = 128) -> torch.Tensor:
    """float32 ``[..., M, K]`` = ``q * scale[..., m, k // group]``."""
    return _dequantize_tiles(q, scale, 1, _check_tile("group", group), f"[..., M, ceil(K / {group})]")


def quantize_fp8_rowwise(t: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn, check_finite: bool = True):
    """``t [..., K]`` -> ``(q dtype [..., K], scale float32 [...])``: one scale per row (a token of an activation, an
    output channel of a [N, K] weight). ``check_finite`` as in ``quantize_fp8_per_token_group``."""
    t = check_tensor("t", t)
    if t.dim() < 1 or t.shape[-1] == 0:
        raise ValueError(f"t must have a last dimension of at least one element; got shape {tuple(t.shape)}")
    q, scale = _quantize_tiles(t.unsqueeze(0), 1, t.shape[-1], dtype, "t", check_finite)
    return q[0], scale[0, ..., 0]


def dequantize_fp8_rowwise(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., K]`` = ``q * scale[..., None]``."""
    q, scale = check_tensor("q", q), check_tensor("scale", scale)
    check_dtype("q", q, FP8_DTYPES)
    check_dtype("scale", scale, (torch.float32,))
    if q.dim() < 1 or tuple(scale.shape) != tuple(q.shape[:-1]):
        raise ValueError(f"scale must have shape q.shape[:-1] (one per row; q has shape {tuple(q.shape)}); got "
                         f"{tuple(scale.shape)}")
    return q.to(torch.float32) * scale.unsqueeze(-1)


def quantize_fp8_blockwise(w: torch.Tensor, block: int | tuple[int, int] = 128,
                           dtype: torch.dtype = torch.float8_e4m3fn):
    """``w [..., N, K]`` -> ``(q dtype [..., N, K], scale float32 [..., ceil(N/bn), ceil(K/bk)])``.

    ``block`` is an int (square tiles) or ``(bn, bk)``.
    """
    bn, bk = _block_pair(block)
    return _quantize_tiles(w, bn, bk, dtype, "w")


def dequantize_fp8_blockwise(q: torch.Tensor, scale: torch.Tensor, block: int | tuple[int, int] = 128) -> torch.Tensor:
    """float32 ``[..., N, K]`` = ``q * scale[..., n // bn, k // bk]``."""
    bn, bk = _block_pair(block)
    return _dequantize_tiles(q, scale, bn, bk, f"[..., ceil(N / {bn}), ceil(K / {bk})]")
