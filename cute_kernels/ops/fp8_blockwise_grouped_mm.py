"""The FP8 GEMM of a mixture-of-experts layer, one problem per expert, in DeepGEMM's two grouped layouts:
``fp8_blockwise_grouped_mm`` the masked one of ``m_grouped_fp8_gemm_nt_masked`` (the decode-phase MoE layout: static
shapes, so a CUDA graph captures it, and each expert's token count read on the device), and
``fp8_blockwise_grouped_mm_contiguous`` the contiguous one of ``m_grouped_fp8_gemm_nt_contiguous`` (prefill: every
expert's tokens one after the other, see its docstring).

    out[g, i, j] = fp8_blockwise_scaled_mm(a[g], b[g], a_scale[g], b_scale[g])[i, j]    for i < masked_m[g]

Layouts (G experts, up to M_max tokens each):
  a         float8_e4m3fn / e5m2 [G, M_max, K], K contiguous (``fp8_blockwise_scaled_mm``'s rules per expert).
  b         float8_e4m3fn / e5m2 [G, N, K], K contiguous: each expert's row-major weight.
  a_scale   float32 [G, ceil(M_max/gM), K/128], b_scale float32 [G, ceil(N/128), K/128], any strides (the per-token
            a_scale fastest in the TMA-aligned MN-major layout, ``formats.to_tma_aligned_mn_major`` - what
            ``per_token_group_quant_fp8`` returns).
  masked_m  int32 [G] on the same GPU: expert g's valid rows are a[g, :masked_m[g]]. Read by the kernel, never by
            the host (no sync). Values past M_max count as M_max, values <= 0 as none.
  out       [G, M_max, N] bf16 / fp16. Rows at or past masked_m[g] are unspecified: a token tile that starts past
            the count is not computed (its rows keep what ``out`` held), one that straddles it writes every row it
            covers (computed from whatever a holds there - finite for finite inputs).
Granularity (gM, gN, gK) = (1, 128, 128) (per-token x 128 activations, 128 x 128 weight blocks, DeepSeek-V3) or
(128, 128, 128).

The kernel is ``fp8_blockwise_scaled_mm``'s, batched over the experts, walking the base kernel's masked work list
(``Sm90GemmKernel.masked_dim``): only the tiles that reach a valid row, so an expert's weight is streamed once per
token tile it has and not at all when it has no tokens. The tile config is the one ``fp8_blockwise_scaled_mm`` picks for M_max tokens per expert, made
unsplit and 1x1-clustered (the work list is derived per CTA from the counts; split-K slices and multicast peers
would need the static schedule). ``expected_m`` (DeepGEMM's hint) picks it for that many tokens instead: smaller
token tiles cover fewer invalid rows when experts run short of M_max, but each one streams its weight tile again
(session 38's measurements: the data archive's session47/history/fp8_blockwise_sessions_37-39.md).
"""

from dataclasses import replace
from typing import Optional

import torch

from .. import checks
from ..configs import TileConfig, raster_for
from ..plan_cache import PlanCache
from .fp8_blockwise_scaled_mm import (_UNSWAPPED_SMALL_M, _compile_sm90, _validate, check_granularity, select_config,
                                      sm90_target)

_validated = PlanCache()


def _planned_call(plans: PlanCache, sig: tuple, tensors: tuple, out_dtype, out):
    """The output of the plan a call with signature ``sig`` made before - ``fn(a, b, out, a_scale, b_scale, None,
    layout)`` with ``tensors`` = (a, b, a_scale, b_scale, layout), no checks - or None (no plan, a grad to refuse,
    or a launch that failed: the caller's checks then name the argument at fault)."""
    plan = plans.get(sig)
    if plan is None or any(t.requires_grad for t in tensors[:4]):
        return None
    fn, out_shape = plan
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=tensors[0].device)
    try:
        fn(*tensors[:2], out, *tensors[2:4], None, tensors[4])
        return out
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _checked(op: str, ranks: tuple, a, b, a_scale, b_scale, layout: tuple) -> tuple:
    """(a, b, a_scale, b_scale, layout tensor) after the checks every grouped call starts with: tensors, their ranks
    (``ranks`` of the first four), no grad (the ops have no backward). ``layout``: (name, tensor)."""
    named = (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale))
    tensors = [checks.check_tensor(name, t) for name, t in named]
    for (name, _), t, rank in zip(named, tensors, ranks):
        checks.check_ndim(name, t, (rank,))
        if t.requires_grad:
            raise ValueError(f"{name} requires grad: {op} has no backward")
    return (*tensors, checks.check_tensor(*layout))


def masked_config(cfg: TileConfig) -> TileConfig:
    """``cfg`` as masked batches can run it: unsplit, 1x1 cluster (``Sm90GemmKernel.masked_dim``)."""
    return replace(cfg, split_k=1, split_tail=1, cluster_m=1, cluster_n=1)


def fp8_blockwise_grouped_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                             masked_m: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16,
                             scale_granularity=(1, 128, 128), out: Optional[torch.Tensor] = None,
                             expected_m: Optional[int] = None, config: Optional[TileConfig] = None) -> torch.Tensor:
    """Per-expert FP8 blockwise GEMMs over the valid rows ``masked_m`` (module docstring).

    expected_m: tokens per expert to choose the tile config for (default M_max; module docstring).
    config: a :class:`~cute_kernels.configs.TileConfig` to override the choice (made unsplit and 1x1-clustered).
    No autograd: an input that requires grad is refused.
    """
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, a_scale.stride(), b_scale.shape, out_dtype,
           scale_granularity, expected_m, config)
    done = _planned_call(_validated, sig, (a, b, a_scale, b_scale, masked_m), out_dtype, out)
    if done is not None:
        return done
    gran = check_granularity(scale_granularity)
    a, b, a_scale, b_scale, masked_m = _checked("fp8_blockwise_grouped_mm", (3, 3, 3, 3), a, b, a_scale, b_scale,
                                                ("masked_m", masked_m))
    device, m, n, k, out_shape = _validate(a, b, a_scale, b_scale, out_dtype, gran, out)
    g = a.shape[0]
    checks.check_dtype("masked_m", masked_m, (torch.int32,))
    checks.check_shape("masked_m", masked_m, (g,), "[G] (one token count per expert)")
    if masked_m.stride(0) != 1 and g > 1:
        raise ValueError(f"masked_m must be contiguous; got stride {masked_m.stride(0)}")
    if masked_m.device != device:
        raise ValueError(f"masked_m must be on {device} with a and b; got {masked_m.device}")
    if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m < 1):
        raise ValueError(f"expected_m must be a positive int or None; got {expected_m!r}")
    if m == 0 or n == 0 or g == 0:
        return out if out is not None else torch.empty(out_shape, dtype=out_dtype, device=device)
    sms, staged = sm90_target(device, "fp8_blockwise_grouped_mm", a_scale, gran)
    hint = min(expected_m or m, m)
    cfg = masked_config(config if config is not None
                        else select_config(hint, n, k, g, sms, a_scale_staged=staged))
    fn = _compile_sm90(3, out_dtype, gran, cfg, sms, staged and not cfg.swap_ab, a.dtype, b.dtype,
                       raster_for(cfg, m, n, k, g, sms), masked=True)
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    fn(a, b, out, a_scale, b_scale, None, masked_m)
    _validated[sig] = (fn, out_shape)
    return out


# The row alignment of each expert's run in the contiguous layout: DeepGEMM's (``get_mk_alignment_for_contiguous_
# layout``), and a multiple of every tile height the kernel takes, so that no tile holds two experts' rows.
CONTIGUOUS_ALIGN = 128
_validated_contiguous = PlanCache()
# The persistent schedule's order for row groups: N fastest (a wave takes every N tile of a few token tiles, so each
# A panel is read from DRAM once and the expert's weight is re-read from L2). Session 39 (H100, DeepSeek-V3 gate/up
# and down shapes, 4.9-32K rows; fp8_contiguous_raster39.py in the data archive's session39/moved/): 0.65-0.97x the
# time of the M-fastest order, and ahead of every swizzled band (2-16 tiles, either way) on all eight problems.
CONTIGUOUS_RASTER = (1, False)


def contiguous_config(cfg: TileConfig) -> TileConfig:
    """``cfg`` as row groups can run it (``Sm90GemmKernel.row_groups``): unswapped - the 64-row unswapped tile
    in place of a swapped small-M row - and unsplit; a cluster along M (the table's 2x1, whose B multicast would
    cross experts) becomes a single CTA, a cluster along N only (a caller's 1x2: A multicast) is kept. Session 39
    measured 1x2 against 1x1 at 0.94-1.03x (docs/fp8_blockwise.md), so the table's rows run 1x1."""
    if cfg.swap_ab:
        cfg = _UNSWAPPED_SMALL_M
    return replace(masked_config(cfg), cluster_n=cfg.cluster_n if cfg.cluster_m == 1 else 1)


def fp8_blockwise_grouped_mm_contiguous(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor,
                                        b_scale: torch.Tensor, m_indices: torch.Tensor,
                                        out_dtype: torch.dtype = torch.bfloat16, scale_granularity=(1, 128, 128),
                                        out: Optional[torch.Tensor] = None,
                                        config: Optional[TileConfig] = None) -> torch.Tensor:
    """Per-expert FP8 blockwise GEMMs over the experts' rows laid end to end (DeepGEMM's contiguous layout, the
    prefill-phase MoE layout):

        out[i, :] = a[i] @ b[m_indices[i]].T, with the blockwise scales,    for every row i with m_indices[i] >= 0

    a         float8_e4m3fn / e5m2 [M, K], K contiguous: the tokens of expert 0, then of expert 1, ... each expert's
              run padded to a multiple of 128 rows (``CONTIGUOUS_ALIGN``), so M is a multiple of 128.
    b         float8_e4m3fn / e5m2 [G, N, K], K contiguous: the experts' weights.
    a_scale   float32 [ceil(M/gM), K/128], b_scale float32 [G, ceil(N/128), K/128] (``fp8_blockwise_scaled_mm``'s
              layouts; any strides).
    m_indices int32 [M] on the same GPU: each row's expert, or -1 (any negative) for a padding row. Read by the
              kernel, never by the host (no sync; a CUDA graph replays with new routing).
    out       [M, N] bf16 / fp16. Padding rows are unspecified. A row whose expert differs from that of the first
              row of its 128-row block (an expert run not starting on a boundary), or names no expert (>= G), comes
              out NaN: a malformed ``m_indices`` cannot pass for a result, and checking it costs no host sync.
    Granularity (gM, gN, gK) = (1, 128, 128) or (128, 128, 128), as ``fp8_blockwise_grouped_mm``.

    The kernel is ``fp8_blockwise_scaled_mm``'s over the [M, N] output; each tile takes the weight (and b_scale) of
    its first row's expert (``Sm90GemmKernel.row_groups``), and a tile whose first row is padding is not computed.
    config: a :class:`~cute_kernels.configs.TileConfig` (tile_m 64 or 128) to override ``fp8_blockwise_scaled_mm``'s
    choice for M tokens (made unswapped and unsplit, clusters along M dropped: ``contiguous_config``). No autograd.
    """
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, a_scale.stride(), b_scale.shape, out_dtype,
           scale_granularity, config)
    done = _planned_call(_validated_contiguous, sig, (a, b, a_scale, b_scale, m_indices), out_dtype, out)
    if done is not None:
        return done
    gran = check_granularity(scale_granularity)
    a, b, a_scale, b_scale, m_indices = _checked("fp8_blockwise_grouped_mm_contiguous", (2, 3, 2, 3), a, b, a_scale,
                                                 b_scale, ("m_indices", m_indices))
    g = b.shape[0]
    if g < 1:
        raise ValueError("b must hold at least one expert's weight ([G, N, K] with G >= 1)")
    if b_scale.shape[0] != g:
        raise ValueError(f"b_scale must be [G={g}, ceil(N/128), K/128] (one block grid per expert of b); "
                         f"got {tuple(b_scale.shape)}")
    m = a.shape[0]
    if m % CONTIGUOUS_ALIGN:
        raise ValueError(f"a must have a multiple of {CONTIGUOUS_ALIGN} rows (each expert's run padded to "
                         f"{CONTIGUOUS_ALIGN} rows, the contiguous layout's alignment); got M = {m}")
    checks.check_dtype("m_indices", m_indices, (torch.int32,))
    checks.check_shape("m_indices", m_indices, (m,), "[M] (one expert id per row of a, -1 for padding)")
    if m_indices.stride(0) != 1 and m > 1:
        raise ValueError(f"m_indices must be contiguous; got stride {m_indices.stride(0)}")
    # Expert 0's problem checks every rule of a 2-d call (dtypes, K, N, scale shapes, out, alignment, device); b /
    # b_scale as a whole add their expert stride.
    device, m, n, k, out_shape = _validate(a, b[0], a_scale, b_scale[0], out_dtype, gran, out)
    checks.check_inner_contiguous("b", b)
    checks.check_aligned("b", b)
    if m_indices.device != device:
        raise ValueError(f"m_indices must be on {device} with a and b; got {m_indices.device}")
    if config is not None and (config.tile_m not in (64, 128) or config.swap_ab):
        raise ValueError(f"config must be an unswapped tile of 64 or 128 rows (a divisor of the experts' "
                         f"{CONTIGUOUS_ALIGN}-row alignment); got {config.describe()}")
    if m == 0 or n == 0:
        return out if out is not None else torch.empty(out_shape, dtype=out_dtype, device=device)
    sms, staged = sm90_target(device, "fp8_blockwise_grouped_mm_contiguous", a_scale, gran)
    cfg = contiguous_config(config if config is not None else select_config(m, n, k, 1, sms, a_scale_staged=staged))
    fn = _compile_sm90(2, out_dtype, gran, cfg, sms, staged, a.dtype, b.dtype, CONTIGUOUS_RASTER, row_groups=True)
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    fn(a, b, out, a_scale, b_scale, None, m_indices)
    _validated_contiguous[sig] = (fn, out_shape)
    return out
