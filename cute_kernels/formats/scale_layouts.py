"""FP8 scale-factor layouts in CuTe notation (CUTLASS ``Sm90BlockwiseScaleConfig``, as in the blockwise-FP8 seed).

A scale-factor layout maps an *element* coordinate of the operand, ``(m, k, l)`` for A (``(n, k, l)`` for B), to the
offset of the scale that element is multiplied by. With granularities ``(gM, gN, gK)`` and for A::

    shape  = ((gM, ceil(M/gM)), (gK, ceil(K/gK)), L)
    stride = ((0, 1),           (0, ceil(M/gM)),  ceil(M/gM) * ceil(K/gK))      # MN-major (the default)
    stride = ((0, ceil(K/gK)),  (0, 1),           ceil(M/gM) * ceil(K/gK))      # K-major

Each of the M and K modes is split hierarchically into (position inside the granule, granule index): the inner mode
has the granule's extent and stride 0, because every element of one granule reuses the same scale; the outer mode
counts granules. MN-major puts the ``ceil(M/gM)`` scales of one K-block next to each other (stride 1), then K-blocks
(stride ``ceil(M/gM)``), then batches (stride = number of scales per batch, ``size(filter_zeros(layout))``). B is
the same with N, gN. In torch terms an MN-major ``a_scale`` is the ``[L, ceil(M/gM), ceil(K/gK)]`` tensor with strides
``(ceil(M/gM)*ceil(K/gK), 1, ceil(M/gM))`` (``to_mn_major``); the K-major one is the plain contiguous tensor.

Printing follows CuTe: compile-time constants carry a leading underscore (``_128``, ``_0``, ``_1``); extents that
depend on the problem size are runtime values and print bare. Examples (M=256, N=512, K=1024, L=1):

* groupwise (1, 128, 128), A: ``((_1,256),(_128,8),1):((_0,_1),(_0,256),2048)``
* groupwise / blockwise B:  ``((_128,4),(_128,8),1):((_0,_1),(_0,4),32)``
* blockwise (128, 128, 128), A: ``((_128,2),(_128,8),1):((_0,_1),(_0,2),16)``

The per-CTA shared-memory atom (``smem_atom_layout``) is the same construction over a static CTA tile, e.g. for tile
128x128x128: groupwise A ``((_1,_128),(_128,_1)):((_0,_1),(_0,_128))``, blockwise A or B
``((_128,_1),(_128,_1)):((_0,_1),(_0,_1))``; ``stages`` appends a pipeline mode whose stride is the atom's number of
distinct scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GROUPWISE = (1, 128, 128)   # DeepSeek-V3: per-token x 128 activations, 128 x 128 weights
BLOCKWISE = (128, 128, 128)
_NAMED = {"groupwise": GROUPWISE, "blockwise": BLOCKWISE}
_OPERANDS = {"a": "A", "sfa": "A", "b": "B", "sfb": "B"}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _positive(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int; got {v!r}")
    return v


def normalize_granularity(granularity) -> tuple[int, int, int]:
    """``"groupwise"``, ``"blockwise"`` or ``(gM, gN, gK)`` -> ``(gM, gN, gK)``."""
    if isinstance(granularity, str):
        if granularity.lower() not in _NAMED:
            raise ValueError(f"granularity must be 'groupwise', 'blockwise' or a (gM, gN, gK) tuple; "
                             f"got {granularity!r}")
        return _NAMED[granularity.lower()]
    if not isinstance(granularity, (tuple, list)) or len(granularity) != 3:
        raise ValueError(f"granularity must be 'groupwise', 'blockwise' or a (gM, gN, gK) tuple; got {granularity!r}")
    return tuple(_positive(f"granularity[{i}]", g) for i, g in enumerate(granularity))


def _operand(kind: object) -> str:
    if not isinstance(kind, str) or kind.lower() not in _OPERANDS:
        raise ValueError(f"kind must be 'A' (scales of A, SFA) or 'B' (scales of B, SFB); got {kind!r}")
    return _OPERANDS[kind.lower()]


def _major(major: object) -> str:
    if not isinstance(major, str) or major.upper() not in ("MN", "K"):
        raise ValueError(f"major must be 'MN' (CUTLASS's default, DeepSeek/vLLM) or 'K'; got {major!r}")
    return major.upper()


@dataclass(frozen=True)
class _Int:
    """A layout entry: static ints print as CuTe's ``_N``, dynamic ones bare."""

    value: int
    static: bool

    def __str__(self) -> str:
        return f"_{self.value}" if self.static else str(self.value)


def _fmt(x) -> str:
    if isinstance(x, tuple):
        return "(" + ",".join(_fmt(e) for e in x) + ")"
    return str(x)


def _value(x):
    return tuple(_value(e) for e in x) if isinstance(x, tuple) else x.value


@dataclass(frozen=True)
class ScaleFactorLayout:
    """The CuTe layout of one operand's scale factors; ``str()`` prints it, ``offset()`` evaluates it."""

    shape: tuple
    stride: tuple

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    @property
    def shape_values(self) -> tuple:
        return _value(self.shape)

    @property
    def stride_values(self) -> tuple:
        return _value(self.stride)

    def offset(self, *coord: int) -> int:
        """Offset of the scale used by the element at ``coord`` (one int per top-level mode), as CuTe's
        ``layout(coord)``: each integer coordinate is split colexicographically over its mode's sub-shape."""
        shape, stride = self.shape_values, self.stride_values
        if len(coord) != len(shape):
            raise ValueError(f"coord must have {len(shape)} entries; got {coord}")
        return sum(_eval_mode(c, s, d) for c, s, d in zip(coord, shape, stride))


def _eval_mode(c: int, shape, stride) -> int:
    if not isinstance(shape, tuple):
        return c * stride
    total = 0
    for s, d in zip(shape, stride):
        total += (c % s) * d if not isinstance(s, tuple) else _eval_mode(c % _size(s), s, d)
        c //= _size(s)
    return total


def _size(shape) -> int:
    if isinstance(shape, tuple):
        n = 1
        for s in shape:
            n *= _size(s)
        return n
    return shape


def _mn_k_modes(g_mn: _Int, n_mn: _Int, g_k: _Int, n_k: _Int, major: str, one: _Int):
    zero = _Int(0, True)
    if major == "MN":
        return ((g_mn, n_mn), (g_k, n_k)), ((zero, one), (zero, n_mn))
    return ((g_mn, n_mn), (g_k, n_k)), ((zero, n_k), (zero, one))


def make_scale_factor_layout(kind, M_or_N: int, K: int, granularity=GROUPWISE, L: int = 1,
                             major: str = "MN") -> ScaleFactorLayout:
    """The global-memory scale layout of operand ``kind`` ('A' or 'B') for an ``M_or_N x K`` (x L) operand."""
    op = _operand(kind)
    gM, gN, gK = normalize_granularity(granularity)
    major = _major(major)
    mn, K, L = _positive("M_or_N", M_or_N), _positive("K", K), _positive("L", L)
    g_mn = gM if op == "A" else gN
    n_mn, n_k = _ceil_div(mn, g_mn), _ceil_div(K, gK)
    (mode_mn, mode_k), (stride_mn, stride_k) = _mn_k_modes(
        _Int(g_mn, True), _Int(n_mn, False), _Int(gK, True), _Int(n_k, False), major, _Int(1, True))
    return ScaleFactorLayout((mode_mn, mode_k, _Int(L, False)),
                             (stride_mn, stride_k, _Int(n_mn * n_k, False)))


def scale_factor_layout(kind, M_or_N: int, K: int, granularity=GROUPWISE, L: int = 1, major: str = "MN") -> str:
    """CuTe string of the scale layout, e.g. ``scale_factor_layout("A", 256, 1024, (1, 128, 128))`` ==
    ``"((_1,256),(_128,8),1):((_0,_1),(_0,256),2048)"`` (rule in the module docstring)."""
    return str(make_scale_factor_layout(kind, M_or_N, K, granularity, L, major))


def smem_atom_layout(kind, tile_shape=(128, 128, 128), granularity=GROUPWISE, major: str = "MN",
                     stages: int | None = None) -> str:
    """CuTe string of the per-CTA shared-memory scale atom for a static ``(tileM, tileN, tileK)`` CTA tile.

    With ``stages`` a pipeline mode is appended (stride = number of distinct scales in the atom).
    """
    op = _operand(kind)
    gM, gN, gK = normalize_granularity(granularity)
    major = _major(major)
    if not isinstance(tile_shape, (tuple, list)) or len(tile_shape) != 3:
        raise ValueError(f"tile_shape must be (tileM, tileN, tileK); got {tile_shape!r}")
    tM, tN, tK = (_positive(f"tile_shape[{i}]", t) for i, t in enumerate(tile_shape))
    g_mn, t_mn = (gM, tM) if op == "A" else (gN, tN)
    n_mn, n_k = _ceil_div(t_mn, g_mn), _ceil_div(tK, gK)
    one = _Int(1, True)
    shape, stride = _mn_k_modes(_Int(g_mn, True), _Int(n_mn, True), _Int(gK, True), _Int(n_k, True), major, one)
    if stages is not None:
        shape = shape + (_Int(_positive("stages", stages), True),)
        stride = stride + (_Int(n_mn * n_k, True),)
    return str(ScaleFactorLayout(shape, stride))


def describe_scale_layouts(M: int, N: int, K: int, granularity=GROUPWISE, L: int = 1, major: str = "MN",
                           tile_shape=(128, 128, 128)) -> str:
    """Multi-line summary of SFA/SFB (global and smem) for the CLI's ``layout`` command."""
    gM, gN, gK = gran = normalize_granularity(granularity)
    lines = [
        f"FP8 scale factors, granularity (gM, gN, gK) = ({gM}, {gN}, {gK}), M={M} N={N} K={K} L={L}, {major}-major",
        f"  SFA [{L}, {_ceil_div(M, gM)}, {_ceil_div(K, gK)}]: {scale_factor_layout('A', M, K, gran, L, major)}",
        f"  SFB [{L}, {_ceil_div(N, gN)}, {_ceil_div(K, gK)}]: {scale_factor_layout('B', N, K, gran, L, major)}",
        f"  smem atom per CTA tile {tuple(tile_shape)}:",
        f"    SFA: {smem_atom_layout('A', tile_shape, gran, major)}",
        f"    SFB: {smem_atom_layout('B', tile_shape, gran, major)}",
    ]
    return "\n".join(lines)


def to_mn_major(scale: torch.Tensor) -> torch.Tensor:
    """Same values, MN-major storage: ``scale.transpose(-1, -2).contiguous().transpose(-1, -2)``.

    For ``a_scale [M, KB]`` this gives strides ``(1, M)``, the DeepSeek-V3 / vLLM convention.
    """
    return scale.transpose(-1, -2).contiguous().transpose(-1, -2)


def to_tma_aligned_mn_major(scale: torch.Tensor) -> torch.Tensor:
    """Same values, MN-major storage whose column stride is the row count rounded up to a multiple of 4 (16 bytes of
    float32): strides ``(1, ceil(M/4)*4)`` for ``a_scale [M, KB]`` (batched: each batch a whole padded block). The
    layout DeepGEMM asks for (its ``get_col_major_tma_aligned_tensor``). ``fp8_blockwise_scaled_mm`` stages a per-token
    a_scale in this layout with TMA at any M (``sfa_tma_eligible``); the plain ``to_mn_major`` layout qualifies only
    when M is a multiple of 4, and the consumer warps' own loads of it were 4-8% slower on 64-row tiles (session 24,
    docs/fp8_blockwise.md). The padding rows hold zeros and are never read."""
    rows, cols = scale.shape[-2], scale.shape[-1]
    padded = -(-rows // 4) * 4
    store = scale.new_zeros((*scale.shape[:-2], cols, padded))
    store[..., :rows] = scale.transpose(-1, -2)
    return store.transpose(-1, -2)[..., :rows, :]


def is_mn_major(scale: torch.Tensor) -> bool:
    """True when the last two dims of ``scale`` are stored MN-major (stride 1 along dim -2)."""
    if scale.dim() < 2:
        return False
    rows, cols = scale.shape[-2], scale.shape[-1]
    return (rows <= 1 or scale.stride(-2) == 1) and (cols <= 1 or scale.stride(-1) == rows)
