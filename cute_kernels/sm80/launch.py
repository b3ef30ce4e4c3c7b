"""Host entry of the SM80-class int8 scaled_mm: config and split-K choice, compile cache, launch.

``run_int8_scaled_mm_sm80`` is what the public ``int8_scaled_mm`` calls after its argument checks. It compiles one
kernel per (compile target, tensor rank, tile config, out dtype, epilogue tree, split-K on/off) from fake tensors with
dynamic M, N, K, L and strides (K % 16, N % 8, 16-byte aligned bases), caches it through ``jit_cache``, and calls
it through TVM-FFI on torch's current stream.

Two archs are in play: the *table arch* (which config table: 'sm_80', 'sm_86', 'sm_89'; sm_90 and newer use the
A100 table) and the *compile target* (the GPU the tensors live on; without a GPU, the table arch). Forcing the SM80
kernel on an H100 therefore runs the A100 tiles compiled for sm_90a: the same cp.async + ldmatrix + mma.sync code.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

import cutlass
import cutlass.cute as cute

from cute_kernels.compile_utils import fake_stream, fake_tensor, fake_vector, fake_zero_points, kernel_view
from cute_kernels.epilogues import bias_kind, present_operands, scaled_mm_tree, zero_point_kind
from cute_kernels.jit_cache import cached_compile
from cute_kernels.plan_cache import PlanCache
from cute_kernels.sm80.configs import Sm80TileConfig, normalize_arch, select_config
from cute_kernels.sm80.kernel import Int8ScaledMmSm80
from cute_kernels.sm80.split_k import WORKSPACE, choose_split_k, normalize_split_k

_OUT_DTYPES = {torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16}


def compile_target(capability: tuple[int, int]) -> str:
    """The --gpu-arch for a device capability: the arch-specific 'a' target for sm_90, plain sm_XY otherwise."""
    major, minor = capability
    return f"sm_{major}{minor}" + ("a" if major == 9 else "")


def table_arch(arch: str) -> str:
    """Config table for an arch name: its own for sm_8x ('sm_75' raises), A100's for sm_90 and newer (forced)."""
    digits = str(arch).lower().replace("sm_", "").replace("sm", "").rstrip("af")
    if digits.isdigit() and int(digits) >= 90:
        return "sm_80"
    return normalize_arch(arch)


def build_kernel(target: str, config: Sm80TileConfig, out_dtype: torch.dtype, a_kind: str, b_kind: str,
                 has_bias: bool, split_k: bool, rank: int = 3, options: str = "", zero_point: Optional[str] = None):
    """cute.compile one variant for ``target`` (e.g. 'sm_80', 'sm_90a'); no GPU needed.

    a_kind / b_kind: "vector" ([M] / [N] scales) or "scalar" ([1]); has_bias: ``epilogues.bias_kind`` (False, True
    for a bias in the output dtype, "acc" for an int32 bias added before the scales); zero_point:
    ``epilogues.ZERO_POINT_KINDS`` (asymmetric activations). The compiled function takes (a, b, out, a_scale, b_scale,
    bias, azp_adj, azp, workspace, tile_counters, split_k, k_tiles_per_split) as torch tensors / ints, with None for
    the epilogue operands the variant does not read and, in non-split builds, for the workspace and counters.
    """
    out_cute = _OUT_DTYPES[out_dtype]
    kind = bias_kind(has_bias)
    tree = scaled_mm_tree(a_kind, b_kind, kind, zero_point=zero_point)
    kernel = Int8ScaledMmSm80(config, out_cute, tree, split_k=split_k)
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=16)
    batch = (cute.sym_int32(),) if rank == 3 else ()
    fa = fake_tensor(cutlass.Int8, (*batch, m, k), stride_div=16)
    fb = fake_tensor(cutlass.Int8, (*batch, k, n), contiguous_dim=-2, stride_div=16)
    fc = fake_tensor(out_cute, (*batch, m, n), stride_div=8)
    f_as = fake_vector(cutlass.Float32, m if a_kind == "vector" else 1)
    f_bs = fake_vector(cutlass.Float32, n if b_kind == "vector" else 1)
    f_bias = (fake_vector(cutlass.Int32 if kind == "acc" else out_cute, n, align=4 if kind == "acc" else 2)
              if kind else None)
    f_adj, f_azp = fake_zero_points(zero_point, m, n)
    f_ws = fake_vector(cutlass.Int32, cute.sym_int32(), align=16) if split_k else None
    f_cnt = fake_vector(cutlass.Int32, cute.sym_int32()) if split_k else None

    @cute.jit
    def launch(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor, bias,
               azp_adj, azp, workspace, tile_counters, split_k: cutlass.Int32, k_tiles_per_split: cutlass.Int32,
               stream):
        epi = present_operands(a_scale, b_scale, bias, azp_adj, azp)
        kernel(kernel_view(a, 0, 1), kernel_view(b, 1, 0), kernel_view(out, 0, 1), epi, workspace, tile_counters,
               split_k, k_tiles_per_split, stream)

    opts = f"--enable-tvm-ffi --gpu-arch {target} {options}".strip()
    return cute.compile(launch, fa, fb, fc, f_as, f_bs, f_bias, f_adj, f_azp, f_ws, f_cnt, cutlass.Int32(1),
                        cutlass.Int32(1), fake_stream(), options=opts)


def get_compiled(target: str, config: Sm80TileConfig, out_dtype: torch.dtype, a_kind: str, b_kind: str,
                 has_bias: bool, split_k: bool, rank: int, zero_point: Optional[str] = None):
    key = (target, dataclasses.astuple(config), str(out_dtype), a_kind, b_kind, has_bias, split_k, rank)
    if zero_point is not None:
        key += ("zero_point", zero_point)
    return cached_compile("int8_scaled_mm_sm80", key,
                          lambda: build_kernel(target, config, out_dtype, a_kind, b_kind, has_bias, split_k, rank,
                                               zero_point=zero_point))


# ------------------------------------------------------------------------------------------------ per-call plan
@dataclasses.dataclass(frozen=True)
class _Plan:
    fn: object
    slices: int
    k_tiles_per_split: int
    tiles: int
    tile_elems: int


_PLANS: dict[tuple, _Plan] = PlanCache()
_DEVICE_FACTS: dict[int, tuple[str, str, int]] = {}


def _device_facts(device: torch.device) -> tuple[str, str, int]:
    """(compile target, arch family for occupancy, SM count) of a CUDA device, cached."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    facts = _DEVICE_FACTS.get(idx)
    if facts is None:
        cap = torch.cuda.get_device_capability(idx)
        facts = _DEVICE_FACTS[idx] = (compile_target(cap), f"sm_{cap[0]}{cap[1]}",
                                      torch.cuda.get_device_properties(idx).multi_processor_count)
    return facts


def _plan(a, b, a_scale, b_scale, bias, out, arch, config, split_k, zero_point) -> _Plan:
    L = a.shape[0] if a.dim() == 3 else 1
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if config is not None and not isinstance(config, Sm80TileConfig):
        raise TypeError(f"config for the SM80-class kernel must be a cute_kernels.sm80.Sm80TileConfig; got "
                        f"{type(config).__name__} ({config!r})")
    if out.dtype not in _OUT_DTYPES:
        raise TypeError(f"the SM80-class int8 kernel writes torch.float16 or torch.bfloat16 output; got out of dtype "
                        f"{out.dtype} (fp32 output is not implemented on this path)")
    tarch = table_arch(arch)
    cfg = config if config is not None else select_config(tarch, M, N)
    cfg.validate("sm_80")  # the compile target's real smem limit is checked by the launch itself
    target, family, num_sms = _device_facts(out.device)
    k_tiles = math.ceil(K / cfg.tile_k)
    if split_k is None:
        slices, per = choose_split_k(M, N, K, L, cfg, num_sms, family)
    else:
        slices, per = normalize_split_k(split_k, k_tiles)
    a_kind = "scalar" if a_scale.numel() == 1 else "vector"
    b_kind = "scalar" if b_scale.numel() == 1 else "vector"
    tiles = math.ceil(M / cfg.tile_m) * math.ceil(N / cfg.tile_n) * L
    if slices > 1 and tiles * cfg.tile_m * cfg.tile_n >= 2 ** 31:
        raise ValueError(f"split_k={split_k} on a {L}x{M}x{N} output needs a {tiles}-tile int32 workspace past the "
                         f"kernel's 32-bit offsets; use split_k=1 (the tile grid fills the GPU anyway)")
    kind = None if bias is None else ("acc" if bias.dtype == torch.int32 else "out")
    fn = get_compiled(target, cfg, out.dtype, a_kind, b_kind, kind, slices > 1, a.dim(), zero_point)
    return _Plan(fn, slices, per, tiles, cfg.tile_m * cfg.tile_n)


# ------------------------------------------------------------------------------------------------ entry point
def run_int8_scaled_mm_sm80(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                            bias: Optional[torch.Tensor], out: torch.Tensor, arch: str = "sm_80",
                            config: Optional[Sm80TileConfig] = None, split_k: Optional[int] = None,
                            azp_adj: Optional[torch.Tensor] = None, azp: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out[..., m, n] = (a @ b)[..., m, n] * a_scale[m] * b_scale[n] + bias[n], written into ``out``.

    Arguments are assumed checked by the caller (int8_scaled_mm): a int8 [M, K] / [L, M, K] K-contiguous, b int8
    [K, N] / [L, K, N] K-contiguous, a_scale f32 [M] or [1], b_scale f32 [N] or [1], bias [N] in out's dtype (or
    int32: added to the accumulator before the scales) or None, out fp16/bf16 [M, N] / [L, M, N], K % 16 == 0, N % 8 == 0, 16-byte aligned. (TVM-FFI still re-checks
    dtypes, ranks, equal extents, divisibility and alignment in C++ on every call.)
    ``arch`` picks the config table ('sm_80', 'sm_86', 'sm_89'; 'sm_90a' and newer: the sm_80 table);
    ``config`` (an Sm80TileConfig) overrides it; ``split_k`` forces a slice count (1 = off; None = split_k.py's rule).
    ``azp_adj`` / ``azp``: int32 zero-point terms of asymmetric activations (``int8_scaled_mm``), checked by it too.
    """
    zero_point = zero_point_kind(azp_adj, azp)
    key = (a.shape, b.shape, a_scale.shape, b_scale.shape, None if bias is None else bias.dtype, out.dtype, out.device,
           arch, config, split_k, zero_point)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(a, b, a_scale, b_scale, bias, out, arch, config, split_k, zero_point)
    if plan.slices > 1:
        ws, counters = WORKSPACE.get(out.device, plan.tiles, plan.tile_elems)
        plan.fn(a, b, out, a_scale, b_scale, bias, azp_adj, azp, ws, counters, plan.slices, plan.k_tiles_per_split)
    else:
        plan.fn(a, b, out, a_scale, b_scale, bias, azp_adj, azp, None, None, 1, plan.k_tiles_per_split)
    return out
