"""Host entry of the SM80-class int8 scaled_mm: config and split-K choice, compile cache, launch.

``run_int8_scaled_mm_sm80`` is what the public ``int8_scaled_mm`` calls after its argument checks. It compiles one
kernel per (compile target, tile config, out dtype, epilogue tree, split-K on/off) from fake tensors with dynamic
M, N, K, L and strides (K % 16, N % 8, 16-byte aligned bases), and calls it through TVM-FFI on torch's current stream.

Two archs are in play: the *table arch* (``arch=``: which config table; 'sm_80', 'sm_86', 'sm_89') and the *compile
target* (the GPU the tensors live on; on a CPU-only compile, the table arch). Forcing ``arch='sm_80'`` on an H100
therefore runs the A100 tiles compiled for sm_90a: the same cp.async + ldmatrix + mma.sync code, not the SM90 kernel.
"""

from __future__ import annotations

import math
import operator
from typing import Optional

import torch

import cutlass
import cutlass.cute as cute

from cute_kernels.sm80 import _epilogue_interim as epi
from cute_kernels.sm80.configs import NOMINAL_SMS, Sm80TileConfig, normalize_arch, select_config
from cute_kernels.sm80.kernel import Int8ScaledMmSm80
from cute_kernels.sm80.split_k import WORKSPACE, choose_split_k, normalize_split_k

_OUT_DTYPES = {torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16}


def scaled_mm_tree(per_token: bool, per_channel: bool, has_bias: bool):
    """out = (acc * b_scale[n]) * a_scale[m] (+ bias[n]), the seed's evaluation order."""
    t = epi.Compute(operator.mul, epi.Accumulator(), epi.RowVector("b_scale") if per_channel else epi.Scalar("b_scale"))
    t = epi.Compute(operator.mul, t, epi.ColVector("a_scale") if per_token else epi.Scalar("a_scale"))
    if has_bias:
        t = epi.Compute(operator.add, t, epi.RowVector("bias"))
    return t


def compile_target(capability: tuple[int, int]) -> str:
    """The --gpu-arch for a device capability: the arch-specific 'a' target from sm_90 on, plain sm_XY before."""
    major, minor = capability
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


# ------------------------------------------------------------------------------------------------ compile + cache
_COMPILED: dict[tuple, object] = {}


def _fake_operands(out_dtype, per_token: bool, per_channel: bool, has_bias: bool, split_k: bool):
    L, M = cute.sym_int32(), cute.sym_int32()
    N, K = cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=16)
    s64 = cute.sym_int64
    fake = cute.runtime.make_fake_tensor
    a = fake(cutlass.Int8, (L, M, K), stride=(s64(divisibility=16), s64(divisibility=16), 1), assumed_align=16)
    b = fake(cutlass.Int8, (L, K, N), stride=(s64(divisibility=16), 1, s64(divisibility=16)), assumed_align=16)
    out = fake(out_dtype, (L, M, N), stride=(s64(divisibility=8), s64(divisibility=8), 1), assumed_align=16)
    a_scale = fake(cutlass.Float32, (M if per_token else 1,), stride=(1,), assumed_align=4)
    b_scale = fake(cutlass.Float32, (N if per_channel else 1,), stride=(1,), assumed_align=4)
    bias = fake(out_dtype, (N,), stride=(1,), assumed_align=2) if has_bias else None
    ws = fake(cutlass.Int32, (cute.sym_int32(),), stride=(1,), assumed_align=16) if split_k else None
    counters = fake(cutlass.Int32, (cute.sym_int32(),), stride=(1,), assumed_align=4) if split_k else None
    return a, b, out, a_scale, b_scale, bias, ws, counters


def build_kernel(target: str, config: Sm80TileConfig, out_dtype: torch.dtype, per_token: bool, per_channel: bool,
                 has_bias: bool, split_k: bool, options: str = ""):
    """cute.compile one variant for `target` (e.g. 'sm_80', 'sm_90a'); no GPU needed."""
    kernel = Int8ScaledMmSm80(config, _OUT_DTYPES[out_dtype], scaled_mm_tree(per_token, per_channel, has_bias),
                              split_k=split_k)
    args = _fake_operands(_OUT_DTYPES[out_dtype], per_token, per_channel, has_bias, split_k)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    opts = f"--enable-tvm-ffi --gpu-arch {target} {options}".strip()
    return cute.compile(kernel, *args, cutlass.Int32(1), cutlass.Int32(1), stream, options=opts)


def get_compiled(target: str, config: Sm80TileConfig, out_dtype: torch.dtype, per_token: bool, per_channel: bool,
                 has_bias: bool, split_k: bool):
    # INTERIM: becomes cute_kernels.jit_cache.cached_compile("int8_scaled_mm_sm80", key, build) when it lands.
    key = (target, config, out_dtype, per_token, per_channel, has_bias, split_k)
    fn = _COMPILED.get(key)
    if fn is None:
        fn = _COMPILED[key] = build_kernel(*key)
    return fn


# ------------------------------------------------------------------------------------------------ device facts
_DEVICE_FACTS: dict[int, tuple[str, str, int]] = {}


def _device_facts(device: torch.device) -> tuple[str, str, int]:
    """(compile target, arch family for occupancy, SM count) of a CUDA device, cached."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    facts = _DEVICE_FACTS.get(idx)
    if facts is None:
        cap = torch.cuda.get_device_capability(idx)
        family = f"sm_{cap[0]}{cap[1]}"
        facts = _DEVICE_FACTS[idx] = (compile_target(cap), family,
                                      torch.cuda.get_device_properties(idx).multi_processor_count)
    return facts


# ------------------------------------------------------------------------------------------------ entry point
def run_int8_scaled_mm_sm80(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                            bias: Optional[torch.Tensor], out: torch.Tensor, arch: str = "sm_80",
                            config: Optional[Sm80TileConfig] = None, split_k: Optional[int] = None) -> torch.Tensor:
    """out[..., m, n] = (a @ b)[..., m, n] * b_scale[n] * a_scale[m] + bias[n], written into ``out``.

    Arguments are assumed checked by the caller (int8_scaled_mm): a int8 [M, K] / [L, M, K] K-contiguous, b int8
    [K, N] / [L, K, N] K-contiguous, a_scale f32 [M] or [1], b_scale f32 [N] or [1], bias [N] in out's dtype or
    None, out fp16/bf16 [M, N] / [L, M, N], K % 16 == 0, N % 8 == 0, 16-byte aligned.
    ``arch`` picks the config table ('sm_80', 'sm_86', 'sm_89'); ``config`` overrides it; ``split_k`` forces a slice
    count (1 = off; None = the heuristic in split_k.py).
    """
    if a.dim() == 2:
        a, b, out_k = a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0)
    else:
        out_k = out
    L, M, K = a.shape
    N = b.shape[2]
    table_arch = normalize_arch(arch)
    cfg = config if config is not None else select_config(table_arch, M, N)
    target, family, num_sms = _device_facts(out.device)
    k_tiles = math.ceil(K / cfg.tile_k)
    if split_k is None:
        slices, per = choose_split_k(M, N, K, L, cfg, num_sms, family)
    else:
        slices, per = normalize_split_k(split_k, k_tiles)
    per_token, per_channel = a_scale.numel() != 1, b_scale.numel() != 1
    fn = get_compiled(target, cfg, out.dtype, per_token, per_channel, bias is not None, slices > 1)
    if slices > 1:
        tiles = math.ceil(M / cfg.tile_m) * math.ceil(N / cfg.tile_n) * L
        ws, counters = WORKSPACE.get(out.device, tiles, cfg.tile_m * cfg.tile_n)
        fn(a, b, out_k, a_scale, b_scale, bias, ws, counters, slices, per)
    else:
        fn(a, b, out_k, a_scale, b_scale, bias, None, None, 1, per)
    return out


def nominal_sms(arch: str) -> int:
    return NOMINAL_SMS[normalize_arch(arch)]
