"""AWQ on SM90: the WGMMA path's weight blob, built once per checkpoint straight from AutoAWQ's tensors.

``awq_gemm`` on an H100 / H200 runs the WGMMA path from ~12 tokens (6 or 1 on some layers) and the decode tiles
below. The WGMMA path reads the blob (``wgmma.blob_from_codes``: each thread's A fragment of a 64 x 64 block in 16
bytes) and its parameter words (``wgmma.param_words``), built here from the checkpoint without going through the
K-packed repack (``awq_repack``), which only the repack reader of the decode tiles (and other GPUs) builds. The blob is
one per checkpoint whatever the format (``awq`` and ``awq_fma`` pair a word's elements alike), the parameter words one
set per format (``awq_fma`` at fp16 up to 512 tokens, ``awq`` otherwise).

With ``config.AWQ_ONE_COPY`` the decode tiles read the same blob (``DecodePlan``, ``blob_decode.BlobDecodeGemm``) and
no repack is built: a layer then holds the checkpoint, the blob and the words, ~2.1-2.2x the checkpoint (3.2-3.3x
with the repack; 4.2-5.4x before session 41, when each format had its blob and the WGMMA path kept the repack too).

* ``weights``: the cached ``AwqSm90Weights`` of (qweight, scales, qzeros), keyed on their storage and versions like
  the repack, dropped with qweight. ``blob_weights``: the same around a blob the caller holds instead of qweight
  (``awq_blob.py``, session 42); ``qweight_from_blob`` the exact inverse of ``blob_from_checkpoint``.
* ``DecodePlan``: the decode tiles on the blob, with the variant rule measured in session 41; ``WgmmaRun``: the WGMMA
  path on the same operands; ``sm90_run`` picks one of the two for a call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..formats.awq import pack_int4, unpack_int4
from ..plan_cache import cached_for_tensor
from ..streams import build_outside_graph_pools
from . import blob_decode, wgmma
from .awq_repack import cache_key, max_abs_scale
from .compile import compile_blob_decode
from .kernel import TileShape

@dataclass
class AwqSm90Weights:
    """What both SM90 kernels read: the blob of the checkpoint's codes [ceil(OC/64), ceil(IC/64) * 256] int64, the
    scales transposed (a view of the checkpoint's) and the zero points [OC, groups] u8 the parameter words come
    from, and those words per (format, x dtype), built on first use."""

    blob: torch.Tensor | None  # None where the caller holds it (``blob_weights``): the runs take it as an argument
    scales: torch.Tensor  # [OC, groups] view of the checkpoint's [groups, OC]
    zeros: torch.Tensor  # uint8 [OC, groups]
    in_features: int
    group: int
    max_abs_scale: float
    _params: dict = field(default_factory=dict)

    @property
    def out_features(self) -> int:
        return self.zeros.shape[0]

    def params(self, fmt_key: str, dtype: torch.dtype) -> torch.Tensor:
        words = self._params.get((fmt_key, dtype))
        if words is None:  # first built inside a graph capture, perhaps: kept out of the graph's memory pool
            words = self._params[(fmt_key, dtype)] = build_outside_graph_pools(
                lambda: wgmma.param_words(fmt_key, self.scales, self.zeros, dtype), self.zeros.device)
        return words


def blob_from_checkpoint(qweight: torch.Tensor) -> torch.Tensor:
    """The AWQ blob from qweight int32 [IC, OC/8] directly, a chunk of 64-channel blocks at a time: the codes of
    output channel o are nibble o of the checkpoint's rows, i.e. ``unpack_int4(qweight).t()``."""
    return wgmma.blob_from_row_chunks(qweight.shape[1] * 8, qweight.shape[0], 4, "awq",
                                      lambda c0, c1: unpack_int4(qweight[:, c0 // 8:c1 // 8]).t(), qweight.device)


def qweight_from_blob(blob: torch.Tensor, in_features: int, out_features: int) -> torch.Tensor:
    """The inverse of ``blob_from_checkpoint`` (exact): AutoAWQ's qweight int32 [IC, OC/8], a chunk of 64-channel
    blocks at a time (the inverse's int64 temporaries are 8 bytes per code)."""
    qweight = torch.empty((in_features, out_features // 8), dtype=torch.int32, device=blob.device)
    blocks = max(1, wgmma.CHUNK_CODES // max(in_features, 1) // wgmma.BLOCK_ROWS)
    for b0 in range(0, blob.shape[0], blocks):
        c0, c1 = b0 * wgmma.BLOCK_ROWS, min(out_features, (b0 + blocks) * wgmma.BLOCK_ROWS)
        codes = wgmma.codes_from_blob(blob[b0:b0 + blocks], 4, "awq", c1 - c0, in_features)  # [channels, IC]
        qweight[:, c0 // 8:c1 // 8] = pack_int4(codes.t())
    return qweight


def _from_blob(blob: torch.Tensor | None, in_features: int, scales: torch.Tensor, qzeros: torch.Tensor,
               group: int) -> AwqSm90Weights:
    return AwqSm90Weights(blob=blob, scales=scales.t(), zeros=unpack_int4(qzeros).t().contiguous().to(torch.uint8),
                          in_features=in_features, group=group, max_abs_scale=max_abs_scale(scales))


def build(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, group: int) -> AwqSm90Weights:
    return _from_blob(blob_from_checkpoint(qweight), qweight.shape[0], scales, qzeros, group)


_cache: dict[tuple, AwqSm90Weights] = {}


def weights(qweight, scales, qzeros, group: int) -> AwqSm90Weights:
    return cached_for_tensor(_cache, cache_key(qweight, scales, qzeros), qweight,
                             lambda: build(qweight, scales, qzeros, group))


def blob_weights(blob: torch.Tensor, in_features: int, scales, qzeros, group: int) -> AwqSm90Weights:
    """The ``AwqSm90Weights`` of a blob the caller holds (``awq_blob.py``; ``AwqLinear`` in its ``"sm90_blob"``
    layout): the zero points as bytes and, on first use, the parameter words, kept while the blob lives and keyed
    like ``weights``. Its ``blob`` is None - a reference from this cache would keep the blob alive for ever -, so
    the runs are given the blob at each call."""
    return cached_for_tensor(_cache, blob_key(blob, scales, qzeros), blob,
                             lambda: _from_blob(None, in_features, scales, qzeros, group))


def blob_key(blob, scales, qzeros) -> tuple:
    return ("blob",) + cache_key(blob, scales, qzeros)


def cached(key: tuple):
    """The cached weights for ``awq_repack.cache_key(...)`` or ``blob_key(...)``, or None."""
    return _cache.get(key)


def clear_cache() -> None:
    _cache.clear()


# ---------------------------------------------------------------------------------------------------- the decode
# Session 41 (H100, benchmarks/experiments/awq_blob_decode41.py, the shipped decode tiles of 4096^2, 14336 x 4096 and
# 4096 x 14336 at 1 and 4 tokens, fp16 and bf16; one run, medians of 3 interleaved rounds, docs/weight_only.md):
# with x read by 4-byte loads the blob reader took 1.04-1.31x the repack reader's time; staging x in shared memory
# and reading its B fragments with ldmatrix, two CTAs per SM, brought it to 0.95-1.05x. At one token the whole of
# x's row once per CTA (``whole``) was 0.94-1.04x, per K step (``step``) 0.99-1.05x; at 4 tokens ``step`` 0.95-1.02x,
# ``whole`` 0.98-1.05x. Without the 2-CTA cap (64 registers let a third CTA onto an SM) 1.11-1.28x.
WHOLE_X_MAX_TOKENS = 1
CTAS_PER_SM = 2


def staged_rows(m: int, tile: TileShape) -> int:
    """x rows a CTA stages: the next power of two >= its tokens (at most the tile's)."""
    return next(r for r in (1, 2, 4, 8, 16, 32) if r >= min(m, tile.tokens_per_cta))


def decode_ok(tile: TileShape, group: int, k: int) -> bool:
    """Whether the blob reader runs this decode tile (register pipeline with x ahead, one group per K-tile)."""
    return (tile is not None and tile.stages == 0 and tile.x_ahead and not tile.swap_registers
            and not tile.fields_in_place and blob_decode.supports(group, k))


# Whether the blob's decode tiles run fp16 x with ``awq_fma``'s words (the WGMMA path's small-M words) rather than the
# exact ``awq`` ones. Session 43 (H100, awq_ring43.py (archive session44/moved/) variant "blob", old and new package in
# alternating processes, 2 x 3 interleaved rounds): once awq_fma's two values share one 4-byte word per (row, group)
# (formats.AwqInt4OneFma; the WGMMA path 0.95-0.97x at 1-16 tokens in fp16), these tiles ran 1.04-1.16x slower on
# them at one token (14336 x 4096 15.64 -> 18.15 µs, 4096 x 14336 14.50 -> 15.04); on ``awq``'s two words they run
# as before (0.98-1.03x the old awq_fma words at 1 / 4 tokens on 14336 x 4096, 4096 x 14336, 4096^2). Not
# understood: their SASS differs by a few instructions (fewer loads, two byte permutes per word), registers equal.
BLOB_DECODE_ONE_FMA = False


class DecodePlan:
    """The decode tiles on the blob for M tokens of x_dtype, with the WGMMA path's parameter words (``awq``, promoted
    on tiles with warps side by side as the repack reader does; with ``BLOB_DECODE_ONE_FMA`` fp16 with finite scales
    takes ``awq_fma``): ``plan(x, aw, out, bias[, blob])`` as ``WgmmaRun``."""

    def __init__(self, x_dtype: torch.dtype, aw: AwqSm90Weights, m: int, tile: TileShape, arch: str):
        k = aw.in_features
        self.fmt_key = wgmma.awq_format(x_dtype, aw, 1) if BLOB_DECODE_ONE_FMA else "awq"
        self.promote = self.fmt_key == "awq" and tile.warps_n > 1
        rows = staged_rows(m, tile)
        whole = (m <= WHOLE_X_MAX_TOKENS and tile.mt == 1
                 and rows * -(-k // blob_decode.STEP_VALUES) * blob_decode.STEP_VALUES * 2
                 <= blob_decode.BlobDecodeGemm.X_WHOLE_BYTES)
        self.tile = replace(tile, max_ctas_per_sm=CTAS_PER_SM)
        self.options = dict(promote_scales=self.promote, full_k_tiles=k % blob_decode.K_TILE == 0,
                            x_stage="whole" if whole else "step", x_rows=rows,
                            group_per_step=aw.group % blob_decode.STEP_VALUES == 0 or aw.group >= k)
        self.x_dtype, self.arch = x_dtype, arch
        self._fns = {}  # with / without a bias: two variants

    def __call__(self, x, aw: AwqSm90Weights, out, bias=None, blob=None):
        fn = self._fns.get(bias is not None)
        if fn is None:
            fn = self._fns[bias is not None] = compile_blob_decode(self.fmt_key, self.x_dtype, self.x_dtype,
                                                                   self.tile, self.arch, has_bias=bias is not None,
                                                                   **self.options)
        params = aw.params(self.fmt_key, x.dtype)
        fn(x, aw.blob if blob is None else blob, out, 2.0 ** getattr(params, "scale_exponent", 0), params, None,
           aw.group, bias)
        return out


def sm90_run(x_dtype: torch.dtype, aw: AwqSm90Weights, m: int, sm_count: int, arch: str,
             decode_tile: TileShape | None = None):
    """The kernel that runs M tokens on ``aw``: the decode tiles on the blob where ``decode_tile`` is given and
    ``decode_ok`` holds for it, else the WGMMA path (any M)."""
    if decode_tile is not None and decode_ok(decode_tile, aw.group, aw.in_features):
        return DecodePlan(x_dtype, aw, m, decode_tile, arch)
    fmt = wgmma.awq_format(x_dtype, aw, m)
    return WgmmaRun(fmt, wgmma.WgmmaPlan(fmt, 4, wgmma.select_config(m, aw.out_features, aw.in_features, sm_count),
                                         sm_count))


class WgmmaRun:
    """The WGMMA path on the same blob, with its parameter words: ``plan(x, aw, out, bias[, blob])`` (``blob``: the
    caller's, where ``aw.blob`` is None)."""

    def __init__(self, fmt_key: str, plan: "wgmma.WgmmaPlan"):
        self.fmt_key, self.plan = fmt_key, plan

    def __call__(self, x, aw: AwqSm90Weights, out, bias=None, blob=None):
        return self.plan.launch(x, aw.blob if blob is None else blob, aw.params(self.fmt_key, x.dtype), out, 1.0,
                                aw.group, bias)
