"""AutoAWQ checkpoint tensors -> the weight-only kernel's layout, once per weight tensor (cached).

Why repack. AutoAWQ stores W as [IC, OC/8] int32: 8 output channels per word, i.e. packed along N. The MMA wants
two K values of one output channel per register, which the seed's K-packed layout gives with one shift-and-mask per
pair; decoding AutoAWQ words directly would need an extra byte permute per pair (or a shared-memory transpose) in the
kernel's hot loop. The checkpoint is read once to build

    w   uint8 [OC16, R64]     unsigned nibbles, K packed LSB-first (low nibble = even k), stored in fragment order
                              (``fragment_order.py``: each 16-row tile's 64-byte K steps as 1 KB blocks in the order
                              the kernel's threads read them); OC16 = OC and R64 = IC / 2 rounded up to 16 and 64
    s   [OC, IC / G]          scales, transposed (activation dtype, as given)
    z   uint8 [OC, IC / G]    zero points, unpacked and transposed
    p   int32 [OC, IC / G]    (built on first use: ``param_words``) the ``awq_zmma`` decode's parameter words, for
                              the tiles with ``TileShape.param_words``: -(M_0 + z) and the scale in one word

(the same 4.25 bits per weight: memory for the copy equals the checkpoint's, plus padding where OC or IC are not
multiples of 16 / 128). ``awq_gemm`` then runs the shared weight-only kernel with the ``awq`` format on its mma.sync
tiles, every one with ``TileShape.fragment_order`` (``config.awq_repack_tile``) (on SM90 the WGMMA path reads its own
blob instead, ``awq_sm90.py``, and with ``config.AWQ_ONE_COPY`` the decode tiles too: then this copy is never built).
The copy is cached per (qweight, qzeros, scales) storage and version: in-place updates of any of them (``_version``)
rebuild it, and the entry is dropped when ``qweight`` is garbage collected. ``clear_cache()`` frees every copy
(``cute_kernels.clear_weight_caches()`` every derived layout: needed after writes the version counter does not see,
such as ``param.data.copy_``). Repacking costs a few torch ops over the checkpoint (chunked along IC to bound
temporaries to ~8M one-byte values, written straight into fragment order: no second copy of the weight) -
milliseconds for a 8192 x 8192 layer, paid on the first call only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..formats.awq import unpack_int4_bytes  # [R, OC/8] int32 -> [R, OC] nibbles (uint8)
from ..formats.bitpack import int32_bits
from ..plan_cache import cached_for_tensor
from ..streams import build_outside_graph_pools
from .fragment_order import from_fragment_order, padded_shape, write_columns

K_ALIGN = 32  # K values per 16-byte row vector of 4-bit weights
# IC rows the repack converts at a time: about CHUNK_VALUES codes (1 byte each in the chunk's temporaries), a multiple
# of 128 rows (2 values per byte, 64-byte K steps), 128-2048 rows.
CHUNK_VALUES = 8 << 20


def chunk_rows(oc: int) -> int:
    return max(128, min(2048, CHUNK_VALUES // max(oc, 1) // 128 * 128))


@dataclass(frozen=True)
class AwqKernelWeights:
    w: torch.Tensor  # uint8 [OC16, R64] in fragment order
    scales: torch.Tensor  # [OC, groups]
    zeros: torch.Tensor  # uint8 [OC, groups]
    in_features: int  # IC (before padding)
    group: int
    max_abs_scale: float = float("inf")  # max |s| (NaN scales: inf): both paths' choice of AWQ format reads it
    _derived: dict = field(default_factory=dict, compare=False, repr=False)  # param_words' cache

    def param_words(self) -> torch.Tensor:
        """int32 [OC, groups]: ``formats.AwqInt4ZeroMma``'s parameter words of these scales and zero points (in the
        scales' dtype), built once (4 bytes per (row, group) next to the 3 of s and z)."""
        if "param_words" not in self._derived:
            # (like the repack itself: outside torch.compile's CUDA-graph pools, plan_cache.cached_for_tensor)
            self._derived["param_words"] = build_outside_graph_pools(self._build_param_words, self.scales.device)
        return self._derived["param_words"]

    def _build_param_words(self) -> torch.Tensor:
        from .formats import AWQ_ZERO_MMA, BF16, F16

        ct = F16 if self.scales.dtype == torch.float16 else BF16
        scale16 = self.scales.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
        words = AWQ_ZERO_MMA.param_words_host(ct, scale16, self.zeros.to(torch.int64))
        return int32_bits(words)

    @property
    def out_features(self) -> int:
        return self.scales.shape[0]

    def row_major(self) -> torch.Tensor:
        """w as uint8 [OC, ceil(IC / 32) * 16] row-major (the K-packed layout of the other weight-only formats)."""
        return from_fragment_order(self.w, self.out_features, -(-self.in_features // K_ALIGN) * K_ALIGN // 2)


_cache: dict[tuple, AwqKernelWeights] = {}


def cache_key(qweight, scales, qzeros) -> tuple:
    return tuple((t.data_ptr(), t._version, t.shape, t.dtype, t.device) for t in (qweight, scales, qzeros))


def cached(key: tuple):
    """The cached copy for ``cache_key(...)``, or None."""
    return _cache.get(key)


def repack(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, group: int) -> AwqKernelWeights:
    """Uncached repack (see module docstring); inputs already validated."""
    ic, oc = qweight.shape[0], qweight.shape[1] * 8
    icp = -(-ic // K_ALIGN) * K_ALIGN
    # Written chunk by chunk straight into fragment order (zeros past OC and IC): no row-major copy of the whole
    # weight exists at any time, only one chunk's temporaries.
    w = torch.zeros(padded_shape(oc, icp // 2), dtype=torch.uint8, device=qweight.device)
    rows = chunk_rows(oc)
    for r0 in range(0, ic, rows):  # rows r0.. of IC (whole K steps: chunk_rows is a multiple of 128)
        r1 = min(ic, r0 + rows)
        q = unpack_int4_bytes(qweight[r0:r1])  # uint8 [rows, OC], 0..15
        if (r1 - r0) % 2:
            q = torch.cat([q, q.new_zeros(1, oc)])
        write_columns(w, (q[0::2] | (q[1::2] << 4)).t(), r0 // 2)  # [OC, rows / 2]: K pairs, low nibble even k
    z = unpack_int4_bytes(qzeros)  # uint8 [groups, OC]
    return AwqKernelWeights(w=w, scales=scales.t().contiguous(), zeros=z.t().contiguous(),
                            in_features=ic, group=group, max_abs_scale=max_abs_scale(scales))


def max_abs_scale(scales: torch.Tensor) -> float:
    """max |s| over the scales (0.0 for none, inf if any is NaN): the AWQ format choices of both SM90 paths read it."""
    top = scales.abs().max().item() if scales.numel() else 0.0
    return top if top == top else float("inf")


def kernel_weights(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, group: int) -> AwqKernelWeights:
    return cached_for_tensor(_cache, cache_key(qweight, scales, qzeros), qweight,
                             lambda: repack(qweight, scales, qzeros, group))


def clear_cache() -> None:
    _cache.clear()


def cache_size() -> int:
    return len(_cache)
