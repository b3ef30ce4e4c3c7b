"""Compile one specialization of the weight-only template from fake tensors (dynamic M, N, K; TVM-FFI ABI).

Also the two dequantize kernels (AWQ's, and the 1/2/4/8-bit one of quantized_mm's dense path), same machinery.

The compiled function takes torch tensors directly: ``fn(x, w, out, scale, group_scales, zeros, group)`` (the
stream is the caller's current one). TVM-FFI re-checks on every call what the fake tensors declare: dtypes, that
x/out share M and w/out/scales share N, unit inner strides, 16-byte aligned x and w rows.
"""

from __future__ import annotations

import torch

from .. import arch as _arch
from ..compile_utils import target_smem_per_sm
from ..jit_cache import cached_compile
from . import config
from .formats import format_by_key
from .kernel import TileShape, WeightOnlyGemm

_TORCH_TO_CUTLASS_NAME = {torch.float32: "Float32", torch.float16: "Float16", torch.bfloat16: "BFloat16"}


def cutlass_dtype(dt: torch.dtype):
    import cutlass

    return getattr(cutlass, _TORCH_TO_CUTLASS_NAME[dt])


def _build(fmt_key: str, x_dtype: torch.dtype, out_dtype: torch.dtype, scale_dtype, tile: TileShape, arch: str,
           extra_options: str = "", promote_scales: bool = False, has_bias: bool = False, kernel_cls=None,
           bias_fake=None, pdl: bool | None = None):
    """The tile as ``arch`` runs it (``config.tile_for_arch``), with programmatic dependent launch where the arch has
    it (``pdl`` None; False forces it off: the GPU tier runs the SM80-class variant on SM90 that way).
    ``kernel_cls`` (a ``WeightOnlyGemm`` subclass) and ``bias_fake`` (the fake tensor of the last argument, instead
    of the [N] bias) are for experiments: ablations, instrumented builds (benchmarks/experiments/)."""
    import cutlass
    import cutlass.cute as cute

    fmt = format_by_key(fmt_key)
    xd, od = cutlass_dtype(x_dtype), cutlass_dtype(out_dtype)
    sd = None if scale_dtype is None else cutlass_dtype(scale_dtype)
    m, n = cute.sym_int32(), cute.sym_int32()
    # x rows are 16-byte aligned (the host pads K otherwise); w rows are whole 16-byte vectors.
    x_div = 16 // (xd.width // 8)
    fx = cute.runtime.make_fake_tensor(xd, (m, cute.sym_int32(divisibility=x_div)),
                                       stride=(cute.sym_int64(divisibility=x_div), 1), assumed_align=16)
    # In fragment order (AWQ's repack) w's rows are N rounded up to 16 and its row bytes a multiple of 64.
    n_w, row_div = (cute.sym_int32(divisibility=16), 64) if tile.fragment_order else (n, 16)
    fw = cute.runtime.make_fake_tensor(cutlass.Uint8, (n_w, cute.sym_int32(divisibility=row_div)),
                                       stride=(cute.sym_int64(divisibility=row_div), 1), assumed_align=16)
    fo = cute.runtime.make_fake_tensor(od, (m, n), stride=(cute.sym_int64(), 1), assumed_align=od.width // 8)
    f_gs = f_z = None
    if sd is not None and tile.param_words:  # the parameter words in the scales' place, no zeros (TileShape)
        f_gs = cute.runtime.make_fake_tensor(cutlass.Int32, (n, cute.sym_int32()), stride=(cute.sym_int64(), 1),
                                             assumed_align=4)
    elif sd is not None:
        groups = cute.sym_int32()
        f_gs = cute.runtime.make_fake_tensor(sd, (n, groups), stride=(cute.sym_int64(), 1),
                                             assumed_align=sd.width // 8)
        if fmt.has_zeros:
            f_z = cute.runtime.make_fake_tensor(cutlass.Uint8, (n, groups), stride=(cute.sym_int64(), 1),
                                                assumed_align=1)
    tile = config.tile_for_arch(tile, arch)
    pdl = _arch.has_pdl(arch) if pdl is None else pdl
    kernel = (kernel_cls or WeightOnlyGemm)(fmt, xd, od, sd, tile, promote_scales, pdl=pdl)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    # bias [N] in out's dtype, added in the epilogue: the last argument (after the stream; None in the plain variant)
    bias = (cute.runtime.make_fake_tensor(od, (n,), stride=(1,), assumed_align=od.width // 8),) if has_bias else ()
    bias = (bias_fake,) if bias_fake is not None else bias
    with target_smem_per_sm(arch):  # (decode tiles with TileShape.min_ctas_hint, compiled without a GPU)
        return cute.compile(kernel, fx, fw, fo, cutlass.Float32(1.0), f_gs, f_z, cutlass.Int32(32), stream, *bias,
                            options=f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip())


def compile_weight_only(fmt_key: str, x_dtype: torch.dtype, out_dtype: torch.dtype, scale_dtype,
                        tile: TileShape, arch: str = "sm_90a", promote_scales: bool = False, has_bias: bool = False,
                        pdl: bool | None = None):
    """The cached compiled specialization (memory, then disk, then ``cute.compile``): ``fn(x, w, out, scale,
    group_scales, zeros, group, bias)``, bias None for the variant without one; ``pdl`` as ``_build``'s."""
    key = (arch, fmt_key, str(x_dtype), str(out_dtype), str(scale_dtype), tile.key, promote_scales) \
        + (("bias",) if has_bias else ()) + (("pdl", pdl) if pdl is not None else ())
    return cached_compile("weight_only_gemm", key,
                          lambda: _build(fmt_key, x_dtype, out_dtype, scale_dtype, tile, arch,
                                         promote_scales=promote_scales, has_bias=has_bias, pdl=pdl))


def compile_with_cubin(fmt_key: str, x_dtype, out_dtype, scale_dtype, tile: TileShape, arch: str = "sm_90a",
                       promote_scales: bool = False, has_bias: bool = False, pdl: bool | None = None):
    """Uncached compile that keeps the cubin and PTX (``.artifacts``), for SASS inspection in tests."""
    from ..sass import compile_with_artifacts

    return compile_with_artifacts(lambda opts: _build(fmt_key, x_dtype, out_dtype, scale_dtype, tile, arch, opts,
                                                      promote_scales, has_bias, pdl=pdl))


def _build_blob_decode(fmt_key: str, x_dtype: torch.dtype, out_dtype: torch.dtype, tile: TileShape, arch: str,
                       options: dict, has_bias: bool, extra_options: str = ""):
    import cutlass
    import cutlass.cute as cute

    from .blob_decode import K_TILE_BYTES, BlobDecodeGemm

    xd, od = cutlass_dtype(x_dtype), cutlass_dtype(out_dtype)
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)
    fx = cute.runtime.make_fake_tensor(xd, (m, k), stride=(cute.sym_int64(divisibility=8), 1), assumed_align=16)
    words = K_TILE_BYTES // 8
    fw = cute.runtime.make_fake_tensor(cutlass.Int64, (cute.sym_int32(), cute.sym_int32(divisibility=words)),
                                       stride=(cute.sym_int64(divisibility=words), 1), assumed_align=16)
    fo = cute.runtime.make_fake_tensor(od, (m, n), stride=(cute.sym_int64(), 1), assumed_align=od.width // 8)
    fp = cute.runtime.make_fake_tensor(cutlass.Int32, (cute.sym_int32(), n), stride=(cute.sym_int64(), 1),
                                       assumed_align=4)
    kernel = BlobDecodeGemm(format_by_key(fmt_key), xd, od, tile, **options)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    bias = (cute.runtime.make_fake_tensor(od, (n,), stride=(1,), assumed_align=od.width // 8),) if has_bias else ()
    return cute.compile(kernel, fx, fw, fo, cutlass.Float32(1.0), fp, None, cutlass.Int32(128), stream, *bias,
                        options=f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip())


def compile_blob_decode(fmt_key: str, x_dtype: torch.dtype, out_dtype: torch.dtype, tile: TileShape,
                        arch: str = "sm_90a", has_bias: bool = False, **options):
    """The decode tiles over the WGMMA blob (blob_decode.py), cached: ``fn(x, blob, out, scale, params, None, group,
    bias)``; ``options``: BlobDecodeGemm's (promote_scales, full_k_tiles, x_stage, group_per_step, x_rows)."""
    key = (arch, fmt_key, str(x_dtype), str(out_dtype), tile.key, tuple(sorted(options.items()))) \
        + (("bias",) if has_bias else ())
    return cached_compile("blob_decode_gemm", key,
                          lambda: _build_blob_decode(fmt_key, x_dtype, out_dtype, tile, arch, options, has_bias))


def blob_decode_with_cubin(fmt_key: str, x_dtype, out_dtype, tile: TileShape, arch: str = "sm_90a",
                           has_bias: bool = False, **options):
    """Uncached ``compile_blob_decode`` that keeps the cubin and PTX, for SASS inspection in tests."""
    from ..sass import compile_with_artifacts

    return compile_with_artifacts(lambda opts: _build_blob_decode(fmt_key, x_dtype, out_dtype, tile, arch, options,
                                                                  has_bias, opts))


def _build_awq_dequantize(dtype: torch.dtype, arch: str, extra_options: str = ""):
    import cutlass
    import cutlass.cute as cute

    from .awq_dequantize_kernel import AwqDequantize

    dt = cutlass_dtype(dtype)
    ic, oc8, groups, oc = cute.sym_int32(), cute.sym_int32(), cute.sym_int32(), cute.sym_int32(divisibility=8)
    fq = cute.runtime.make_fake_tensor(cutlass.Int32, (ic, oc8), stride=(cute.sym_int64(), 1), assumed_align=4)
    fz = cute.runtime.make_fake_tensor(cutlass.Int32, (groups, oc8), stride=(cute.sym_int64(), 1), assumed_align=4)
    fs = cute.runtime.make_fake_tensor(dt, (groups, oc), stride=(cute.sym_int64(divisibility=8), 1),
                                       assumed_align=16)
    fo = cute.runtime.make_fake_tensor(dt, (ic, oc), stride=(cute.sym_int64(divisibility=8), 1), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(AwqDequantize(dt), fq, fz, fs, fo, cutlass.Int32(128), stream,
                        options=f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip())


def compile_awq_dequantize(dtype: torch.dtype, arch: str = "sm_90a"):
    """``fn(qweight, qzeros, scales, out, group)``, cached."""
    return cached_compile("awq_dequantize", (arch, str(dtype)), lambda: _build_awq_dequantize(dtype, arch))


def _build_dequantize(bits: int, out_dtype: torch.dtype, scale_dtype, arch: str, extra_options: str = ""):
    import cutlass
    import cutlass.cute as cute

    from .dequantize_kernel import WeightDequantize

    od = cutlass_dtype(out_dtype)
    sd = None if scale_dtype is None else cutlass_dtype(scale_dtype)
    n, row_bytes, k = cute.sym_int32(), cute.sym_int32(divisibility=bits), cute.sym_int32(divisibility=8)
    # The kernel addresses both tensors as flat runs and ignores their row strides: the host passes contiguous
    # rows (quantized_mm.dense_weight copies anything else).
    fw = cute.runtime.make_fake_tensor(cutlass.Uint8, (n, row_bytes), stride=(cute.sym_int64(divisibility=bits), 1),
                                       assumed_align=bits)
    fo = cute.runtime.make_fake_tensor(od, (n, k), stride=(cute.sym_int64(divisibility=8), 1), assumed_align=16)
    f_gs = None
    if sd is not None:
        f_gs = cute.runtime.make_fake_tensor(sd, (cute.sym_int32(),), stride=(1,), assumed_align=sd.width // 8)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(WeightDequantize(bits, od, sd), fw, fo, f_gs, cutlass.Int32(32), stream,
                        options=f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip())


def compile_dequantize(bits: int, out_dtype: torch.dtype, scale_dtype, arch: str = "sm_90a"):
    """``fn(w_packed, out, group_scales_flat, group)`` of the dense dequantize kernel (dequantize_kernel.py), cached.
    w_packed [N, K * bits / 8] and out [N, K] contiguous; group_scales_flat the contiguous [N, K / group] viewed
    as 1-D, or None."""
    return cached_compile("weight_only_dequantize", (arch, bits, str(out_dtype), str(scale_dtype)),
                          lambda: _build_dequantize(bits, out_dtype, scale_dtype, arch))
