"""``fp8_blockwise_grouped_mm``: the FP8 GEMM of a mixture-of-experts layer, one problem per expert, in the masked
layout of DeepGEMM's ``m_grouped_fp8_gemm_nt_masked`` (the decode-phase MoE layout: static shapes, so a CUDA graph
captures it, and each expert's token count read on the device).

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
(docs/fp8_blockwise.md, "Session 38", has what each measured).
"""

from dataclasses import replace
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..configs import TileConfig, raster_for
from ..plan_cache import PlanCache
from .fp8_blockwise_scaled_mm import (USE_SFA_TMA, _compile_sm90, _validate, check_granularity, select_config,
                                      sfa_tma_eligible)

_validated = PlanCache()


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
    plan = _validated.get(sig)
    if plan is not None and not any(t.requires_grad for t in (a, b, a_scale, b_scale)):
        fn, out_shape = plan
        if out is None:
            out = torch.empty(out_shape, dtype=out_dtype, device=a.device)
        try:
            fn(a, b, out, a_scale, b_scale, None, masked_m)
            return out
        except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
            pass
    gran = check_granularity(scale_granularity)
    a, b = checks.check_tensor("a", a), checks.check_tensor("b", b)
    a_scale, b_scale = checks.check_tensor("a_scale", a_scale), checks.check_tensor("b_scale", b_scale)
    masked_m = checks.check_tensor("masked_m", masked_m)
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        checks.check_ndim(name, t, (3,))
        if t.requires_grad:
            raise ValueError(f"{name} requires grad: fp8_blockwise_grouped_mm has no backward")
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
    dev_arch = _arch.current_arch(device)
    if dev_arch != "sm_90a":
        raise _arch.unsupported(dev_arch, "fp8_blockwise_grouped_mm (SM90 only)")
    sms = _arch.sm_count(device.index)
    staged = USE_SFA_TMA and sfa_tma_eligible(a_scale, gran)
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
