"""``fp8_blockwise_scaled_mm``: FP8 GEMM with blockwise / groupwise scale factors (seed 001, DeepSeek-V3 style).

    out[..., i, j] = cast( sum_kb a_scale[..., i // gM, kb] * b_scale[..., j // gN, kb]
                                  * sum_{k in [kb*gK, (kb+1)*gK)} a[..., i, k] * b[..., j, k] )

Layouts (L = optional batch, shared by every tensor of a call):
  a        float8_e4m3fn [(L,) M, K], K contiguous (row stride a multiple of 16 elements).
  b        float8_e4m3fn [(L,) N, K], K contiguous (the row-major weight, the seed's B).
  a_scale  float32 [(L,) ceil(M/gM), K/gK];  b_scale float32 [(L,) ceil(N/gN), K/gK].
           Any element strides are accepted: the kernel reads the scales element by element. The fast, documented
           layout is the seed's MN-major one (stride 1 along M resp. N: ``s.t().contiguous().t()``, the DeepSeek-V3 /
           vLLM convention for the activation scale); the plain row-major (K-major) tensor works too.
  out      [(L,) M, N] row-major float16 / bfloat16.
Granularity (gM, gN, gK): gK = gN = 128, gM in {1, 128}: (1, 128, 128) "groupwise" (per-token x 128 activations,
128 x 128 weight blocks) and (128, 128, 128) "blockwise". K must be a multiple of gK; N a multiple of 8 (16-byte
output rows for the TMA store); M and N may be ragged (tiles clip).

Host path: as ``int8_scaled_mm``, a call signature validated once goes straight to the compiled TVM-FFI function
(which re-checks dtypes, extents, unit strides, divisibility and alignment in C++); any failure falls back to the
full Python checks, which name the argument at fault.
"""

from dataclasses import replace
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..configs import TileConfig, best_split, split_cost
from ..formats.scale_layouts import normalize_granularity
from ..jit_cache import cached_compile
from ..plan_cache import PlanCache
from .split_k import launch_planned, resolve_split

_OUT_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPES = (torch.float8_e4m3fn,)
SUPPORTED_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_validated = PlanCache()
USE_SFA_TMA = True  # stage per-token a_scale with TMA where the tensor allows (sfa_tma_eligible)

# (max_m, config), first match wins; ``select_config`` then picks the tile width. Decode-size M uses 64-row tiles
# (one consumer warpgroup) to halve the wasted WGMMA rows. Small M has few output tiles (N=2112: 17 tiles of 128
# columns for 132 SMs), so those rows may split K (in-kernel, fp32 partials reduced in a fixed order; the wave model
# of ``configs.best_split`` picks the slice count per problem, up to ``split_k``).
SM90_FP8_BLOCKWISE_TABLE: tuple[tuple[int, TileConfig], ...] = (
    (64, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1, split_k=8)),
    (256, TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1, split_k=4)),
    (1 << 62, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1)),
)

# Tile widths the host chooses among, with their measured cost per output column relative to 128 (H200,
# 2026-11-22, benchmarks/experiments/fp8_tile_n.py: 21 shapes, each width's time / its wave count). tile_n is at
# most 192: the kernel holds a second (temporary) fp32 accumulator for the two-level accumulation, and acc + tmp of
# 64x256 per warpgroup would take every register. What the width buys is wave quantization: N = 24576 at M = 64 is
# 192 tiles of 128 columns (two waves on 132 SMs) but 128 tiles of 192 (one wave, 23.7 -> 14.4 us); M = 1024,
# N = 2112 is 136 tiles of 128 but 112 of 160 (49.2 -> 33.7 us). At equal wave counts 160 is ~8% slower per column.
TILE_N_COST = {128: 1.0, 160: 1.08, 192: 1.0}


def select_config(m: int, n: int, k: int, batch: int = 1, sm_count: int = 132) -> TileConfig:
    """The table's row for M, at the tile width that the wave model (``configs.split_cost``: persistent waves x
    work per tile, K slices included) finds cheapest for this problem; ties keep 128."""
    base = next(cfg for max_m, cfg in SM90_FP8_BLOCKWISE_TABLE if m <= max_m)
    k_tiles = -(-k // 128)

    def cost(tile_n):
        tiles = -(-m // base.tile_m) * -(-n // tile_n) * batch
        slices = best_split(tiles, tile_n, base.split_k, k_tiles, sm_count)
        return split_cost(tiles, slices, tile_n, sm_count) * TILE_N_COST[tile_n]

    return replace(base, tile_n=min(TILE_N_COST, key=cost))


def shipped_configs() -> list[TileConfig]:
    """Every config ``select_config`` can return (the table's rows at each tile width), each split row followed by
    its unsplit sibling (run when one K slice is planned)."""
    return list(dict.fromkeys(c for _, cfg in SM90_FP8_BLOCKWISE_TABLE for tile_n in TILE_N_COST
                              for c in (replace(cfg, tile_n=tile_n), replace(cfg, tile_n=tile_n, split_k=1))))


def check_granularity(scale_granularity) -> tuple[int, int, int]:
    g = normalize_granularity(scale_granularity)
    if g not in SUPPORTED_GRANULARITIES:
        raise ValueError(f"scale_granularity must be one of {SUPPORTED_GRANULARITIES} ((gM, gN, gK): 'groupwise' "
                         f"per-token activations or 'blockwise' 128x128); got {tuple(g)}")
    return g


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _validate(a, b, a_scale, b_scale, out_dtype, gran, out):
    g_m, g_n, g_k = gran
    checks.check_dtype("a", a, _FP8_DTYPES)
    checks.check_dtype("b", b, _FP8_DTYPES)
    checks.check_gemm_pair(a, b)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be torch.float16 or torch.bfloat16; got {out_dtype}")
    m, k = a.shape[-2:]
    n, k_b = b.shape[-2:]
    if k_b != k:
        raise ValueError(f"a is [.., M={m}, K={k}] but b is [.., N={n}, K={k_b}]: both must have K as the last dim")
    if k < g_k or k % g_k:
        raise ValueError(f"K = {k} must be a positive multiple of the K scale granularity gK = {g_k}")
    if n < 8 or n % 8:
        raise ValueError(f"N = {n} must be a positive multiple of 8 (16-byte rows of the fp16/bf16 output)")
    if m < 1:
        raise ValueError(f"M = {m} must be >= 1")
    checks.check_inner_contiguous("a", a)
    checks.check_inner_contiguous("b", b)
    batch = tuple(a.shape[:-2])
    for name, t, rows, g, what in (("a_scale", a_scale, m, g_m, "M"), ("b_scale", b_scale, n, g_n, "N")):
        checks.check_dtype(name, t, (torch.float32,))
        want = (*batch, _ceil_div(rows, g), k // g_k)
        checks.check_shape(name, t, want, f"[(L,) ceil({what}/{g}), K/{g_k}] for granularity {tuple(gran)}")
        if any(s < 0 for s in t.stride()):
            raise ValueError(f"{name} must have non-negative strides; got {tuple(t.stride())}")
    device = checks.check_cuda({"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "out": out})
    checks.check_aligned("a", a)
    checks.check_aligned("b", b)
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        if t.data_ptr() % 4:
            raise ValueError(f"{name} must be aligned to 4 bytes")
    out_shape = (*batch, m, n)
    if out is not None:
        checks.check_dtype("out", out, (out_dtype,))
        checks.check_shape("out", out, out_shape, "[(L,) M, N]")
        checks.check_inner_contiguous("out", out)
        checks.check_aligned("out", out)
    return device, m, n, k, out_shape


def sfa_tma_eligible(a_scale: torch.Tensor, gran: tuple[int, int, int]) -> bool:
    """Whether the producer can stage a_scale columns with TMA: per-token scales (gM = 1) in the MN-major layout
    with 16-byte strides and base (the DeepSeek-V3 / vLLM ``s.t().contiguous().t()`` layout when M % 4 == 0)."""
    if gran[0] != 1 or a_scale.stride(-2) != 1 or a_scale.data_ptr() % 16:
        return False
    return all(st % 4 == 0 for i, st in enumerate(a_scale.stride()) if i != a_scale.dim() - 2)


def build_sm90(rank: int, out_dtype: torch.dtype, gran: tuple[int, int, int], config: TileConfig, sm_count: int,
               extra_options: str = "", sfa_tma: bool = False):
    """Compile (uncached) the kernel for one variant from fake tensors; ``extra_options`` e.g. keeps the cubin.
    ``sfa_tma``: a_scale staged by TMA (the compiled function then accepts only tensors ``sfa_tma_eligible``)."""
    import cutlass
    import cutlass.cute as cute

    from ..compile_utils import fake_stream, fake_tensor, fake_vector, kernel_view
    from ..epilogues import Accumulator, EpilogueTree
    from ..sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    d_cute = cutlass.BFloat16 if out_dtype == torch.bfloat16 else cutlass.Float16
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=128)
    m_blocks, n_blocks, k_blocks = cute.sym_int32(), cute.sym_int32(), cute.sym_int32()
    batch = (cute.sym_int32(),) if rank == 3 else ()
    fa = fake_tensor(cutlass.Float8E4M3FN, (*batch, m, k), stride_div=16)
    fb = fake_tensor(cutlass.Float8E4M3FN, (*batch, n, k), stride_div=16)
    fd = fake_tensor(d_cute, (*batch, m, n), stride_div=8)
    # Scales: every stride symbolic, so one compiled kernel reads MN-major and K-major scale tensors alike - except
    # a TMA-staged a_scale, which must be MN-major with 16-byte strides (sfa_tma_eligible).
    if sfa_tma:
        f_sa = fake_tensor(cutlass.Float32, (*batch, m_blocks, k_blocks), contiguous_dim=-2, stride_div=4, align=16)
    else:
        f_sa = fake_tensor(cutlass.Float32, (*batch, m_blocks, k_blocks), contiguous_dim=None, align=4)
    f_sb = fake_tensor(cutlass.Float32, (*batch, n_blocks, k_blocks), contiguous_dim=None, align=4)
    # The mainloop already applied the scales; the epilogue only converts the fp32 accumulator.
    kernel = Fp8BlockwiseGemmSm90(config, EpilogueTree(Accumulator()), gran, sm_count=sm_count, sfa_tma=sfa_tma)

    options = f"--enable-tvm-ffi --gpu-arch sm_90a {extra_options}".strip()

    def views(a, b, d, a_scale, b_scale):
        return (kernel_view(a, 0, 1), kernel_view(b, 0, 1), kernel_view(d, 0, 1),
                (kernel_view(a_scale, 0, 1), kernel_view(b_scale, 0, 1)))

    if config.split_k == 1:
        @cute.jit
        def launch(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                   stream):
            kernel(*views(a, b, d, a_scale, b_scale), stream)

        return cute.compile(launch, fa, fb, fd, f_sa, f_sb, fake_stream(), options=options)

    @cute.jit
    def launch_split(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                     workspace: cute.Tensor, semaphore: cute.Tensor, num_splits: cutlass.Int32, stream):
        kernel(*views(a, b, d, a_scale, b_scale), stream, (workspace, semaphore, num_splits))

    f_ws = fake_vector(cutlass.Float32, cute.sym_int32(), align=16)
    f_sem = fake_vector(cutlass.Int32, cute.sym_int32())
    return cute.compile(launch_split, fa, fb, fd, f_sa, f_sb, f_ws, f_sem, cutlass.Int32(1), fake_stream(),
                        options=options)


def _compile_sm90(rank, out_dtype, gran, config: TileConfig, sm_count, sfa_tma: bool):
    key = ("sm_90a", rank, str(out_dtype), gran, config.key, sm_count) + (("sfa_tma",) if sfa_tma else ())
    return cached_compile("fp8_blockwise_scaled_mm", key,
                          lambda: build_sm90(rank, out_dtype, gran, config, sm_count, sfa_tma=sfa_tma))


def fp8_blockwise_scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                            out_dtype: torch.dtype = torch.bfloat16, scale_granularity=(1, 128, 128),
                            out: Optional[torch.Tensor] = None, config: Optional[TileConfig] = None) -> torch.Tensor:
    """FP8 GEMM with per-block scales; see the module docstring for layouts and semantics.

    scale_granularity: (gM, gN, gK), "groupwise" = (1, 128, 128) or "blockwise" = (128, 128, 128).
    config: a :class:`~cute_kernels.configs.TileConfig` (tile_n <= 192, no swap_ab) to override the table.
    """
    sig = (a.shape, b.shape, a_scale.shape, b_scale.shape, out_dtype, scale_granularity, config)
    plan = _validated.get(sig)
    if plan is not None:
        fn, out_shape, split = plan
        if out is None:
            out = torch.empty(out_shape, dtype=out_dtype, device=a.device)
        try:
            launch_planned(fn, (a, b, out, a_scale, b_scale), split, a.device, torch.float32)
            return out
        except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
            pass
    gran = check_granularity(scale_granularity)
    a, b = checks.check_tensor("a", a), checks.check_tensor("b", b)
    a_scale, b_scale = checks.check_tensor("a_scale", a_scale), checks.check_tensor("b_scale", b_scale)
    device, m, n, k, out_shape = _validate(a, b, a_scale, b_scale, out_dtype, gran, out)
    dev_arch = _arch.current_arch(device)
    if dev_arch != "sm_90a":
        raise _arch.unsupported(dev_arch, "fp8_blockwise_scaled_mm (SM90 only)")
    sms = _arch.sm_count(device.index)
    batch = a.shape[0] if a.dim() == 3 else 1
    cfg = config if config is not None else select_config(m, n, k, batch, sms)
    cfg, split = resolve_split(cfg, m, n, k, batch, sms)
    fn = _compile_sm90(a.dim(), out_dtype, gran, cfg, sms, USE_SFA_TMA and sfa_tma_eligible(a_scale, gran))
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    launch_planned(fn, (a, b, out, a_scale, b_scale), split, device, torch.float32)
    _validated[sig] = (fn, out_shape, split)
    return out
