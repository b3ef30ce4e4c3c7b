"""``int8_scaled_mm``: int8 x int8 -> int32 GEMM with per-token / per-channel scales and bias (seed 000); and
``fp8_scaled_mm``, the same GEMM on FP8 operands (fp32 accumulator), vLLM's ``cutlass_scaled_mm`` for FP8.

    out[..., i, j] = cast( float(sum_k a[..., i, k] * b[..., k, j]) * a_scale[i] * b_scale[j] + bias[j] + c[..., i, j] )

or, with an int32 bias (added to the accumulator, e.g. a quantized linear's bias or a zero-point correction):

    out[..., i, j] = cast( (float(sum_k a[..., i, k] * b[..., k, j]) + bias[j]) * a_scale[i] * b_scale[j] + c[..., i, j] )

Layouts: a int8 [M, K] or [L, M, K], K contiguous; b int8 [K, N] or [L, K, N] stored column-major (``w.t()`` of a
row-major [N, K] weight, so K is contiguous too); a_scale float32 [M] or [1]; b_scale float32 [N] or [1]; bias [N]
in the output dtype, or int32 (before the scales), or None; out [M, N] / [L, M, N] row-major fp16 or bf16. Scales and bias are shared by the batch.
Asymmetric activations (a = q - azp): int32 ``azp_adj`` [N] (and ``azp`` [M], per token) make the accumulator
``sum_k a[i, k] * b[k, j] - azp[i] * azp_adj[j]`` (or ``- azp_adj[j]``), in int32, before the rest (vLLM's
``cutlass_scaled_mm_azp``; epilogues.ZeroPointAccumulator).
c: optional, out's shape, fp32 / fp16 / bf16, N contiguous - a full operand added in fp32 before the one rounding
(e.g. another GPU's partial sum, see distributed/p2p_transport.py). SM90 only; runs the unsplit kernel.

FP8 (``fp8_scaled_mm``): a / b float8_e4m3fn or float8_e5m2 (any pairing) in the same layouts, a_scale [M] / [1],
b_scale [N] / [1], bias [N] in the output dtype, c as above; the same kernel, tile table and split-K plans with an fp32
accumulator. Like vLLM's FP8 ``cutlass_scaled_mm`` (its SM90 kernels are the ``FP8FastAccum`` schedules) and
``torch._scaled_mm(use_fast_accum=True)``, the whole K accumulates in the WGMMA accumulator: Hopper's FP8 MMA adds
with fewer than fp32's mantissa bits, so long-K results carry a larger rounding error than a promoted sum
(``fp8_blockwise_scaled_mm`` promotes every 128-deep K-block). SM90 only.

Host path (the warm call must cost less than a tiny torch op): a call whose shapes signature was validated before
goes straight to the compiled TVM-FFI function, which re-checks dtypes, equal extents, unit strides, stride
divisibility, base-pointer alignment and device type in C++ on every call. If that check (or anything else) fails,
the call falls back to the full Python checks, so bad input always gets an error that names the argument; a new
signature always takes the checked path first.
"""

import dataclasses
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..autograd import bias_grad, needs_grad, record, refuse_out
from ..configs import TileConfig, raster_for, select_sm90_int8, weight_preload_ktiles
from ..epilogues.tree import zero_point_kind
from ..jit_cache import cached_compile
from ..plan_cache import PlanCache
from .split_k import cluster_rank1_share, launch_planned, resolve_launch

# Largest K whose int32 sum cannot overflow: K * 128 * 128 < 2^31 (WGMMA saturates; split-K partials would wrap).
MAX_K = 2**31 // 2**14 - 16

_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_CUTE_DTYPES = {torch.float16: "Float16", torch.bfloat16: "BFloat16", torch.float32: "Float32"}
_validated = PlanCache()  # call signature -> (compiled fn, out shape, split plan | "sm80" | None)


def _scale_kind(t: torch.Tensor) -> str:
    return "scalar" if t.numel() == 1 else "vector"


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _validate(a, b, a_scale, b_scale, bias, out_dtype, out, azp_adj=None, azp=None, fp8=False):
    operand_dtypes = FP8_DTYPES if fp8 else (torch.int8,)
    checks.check_dtype("a", a, operand_dtypes)
    checks.check_dtype("b", b, operand_dtypes)
    checks.check_gemm_pair(a, b)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be torch.float16, torch.bfloat16 or torch.float32; got {out_dtype}")
    m, k = a.shape[-2:]
    k_b, n = b.shape[-2:]
    if k_b != k:
        raise ValueError(f"a is [.., M={m}, K={k}] but b is [.., K={k_b}, N={n}]: the inner dimensions must match")
    if k < 16 or k % 16:
        raise ValueError(f"K = {k} must be a positive multiple of 16 (16-byte rows for TMA / cp.async)")
    if n % 8:
        raise ValueError(f"N = {n} must be a multiple of 8 (16-byte rows of the output)")
    if k > MAX_K and not fp8:
        raise ValueError(f"K = {k} exceeds {MAX_K}: the int32 accumulator could overflow (|a*b| <= 2^14 per term); "
                         f"split K and add the partial results")
    checks.check_inner_contiguous("a", a)
    if b.stride(-2) != 1:
        raise ValueError(f"b must be column-major [K, N] (K contiguous, i.e. w.t() of a row-major [N, K] weight); "
                         f"got strides {tuple(b.stride())} for shape {tuple(b.shape)}")
    for name, t, length in (("a_scale", a_scale, m), ("b_scale", b_scale, n)):
        checks.check_dtype(name, t, (torch.float32,))
        if t.dim() != 1 or t.shape[0] not in (1, length):
            raise ValueError(f"{name} must have shape [{length}] or [1]; got {tuple(t.shape)}")
        checks.check_inner_contiguous(name, t)
    if bias is not None:
        checks.check_dtype("bias", bias, (out_dtype,) if fp8 else (out_dtype, torch.int32))
        checks.check_shape("bias", bias, (n,), "one value per output column N")
        checks.check_inner_contiguous("bias", bias)
    _check_zero_point(azp_adj, azp, m, n, k)
    device = checks.check_cuda({"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "bias": bias, "out": out,
                                "azp_adj": azp_adj, "azp": azp})
    checks.check_aligned("a", a)
    checks.check_aligned("b", b)
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale), ("bias", bias), ("azp_adj", azp_adj), ("azp", azp)):
        if t is not None and t.data_ptr() % t.element_size():
            raise ValueError(f"{name} must be aligned to its element size")
    out_shape = (*a.shape[:-1], n)
    if out is not None:
        checks.check_dtype("out", out, (out_dtype,))
        checks.check_shape("out", out, out_shape, "[.., M, N]")
        checks.check_inner_contiguous("out", out)
        checks.check_aligned("out", out)
    return device, m, n, k, out_shape


# K-tiles of each CTA's first tile prefetched into L2 before the PDL wait (Sm90GemmKernel.l2_warmup); 0 = off.
L2_WARMUP_KTILES = 2
# K-tiles of each CTA's first tile whose weight is loaded into the shared-memory ring before the PDL wait
# (Sm90GemmKernel.weight_preload): None = ``configs.weight_preload_ktiles`` by token count; an int forces it
# (experiments).
WEIGHT_PRELOAD_KTILES = None


_CUTE_OPERANDS = {torch.int8: "Int8", torch.float8_e4m3fn: "Float8E4M3FN", torch.float8_e5m2: "Float8E5M2"}


def build_sm90(rank, a_kind, b_kind, has_bias, out_dtype, config: TileConfig, sm_count=132, extra_options="",
               c_dtype=None, raster=(1, True), weight_preload=0, split_cluster=1, rank1_share=8, zero_point=None,
               operand_dtypes=(torch.int8, torch.int8)):
    """Compile the SM90 kernel for one variant from fake tensors (no GPU needed); returns the TVM-FFI function.
    has_bias: ``epilogues.bias_kind`` - False / True (a bias in the output dtype) / "acc" (an int32 bias added to the
    accumulator before the scales).

    Call signature of the result: ``fn(a, b, out, a_scale, b_scale, bias, azp_adj, azp)`` on CUDA torch tensors
    (None for the operands the variant does not read), with a trailing ``c`` when ``c_dtype`` is given (unsplit
    configs only). ``zero_point``: ``epilogues.ZERO_POINT_KINDS`` (asymmetric activations: ``azp_adj`` / ``azp``).
    ``weight_preload``: K-tiles of b loaded before the PDL wait (``configs.weight_preload_ktiles``).
    ``split_cluster``: K slices reduced within a cluster (``Sm90GemmKernel.split_cluster``; an unsplit config,
    launched with the unsplit signature), rank 1 streaming ``rank1_share`` sixteenths of K
    (``split_k.cluster_rank1_share``). ``operand_dtypes``: (a, b) torch dtypes, int8 (int32 accumulator) or FP8
    (fp32 accumulator, ``fp8_scaled_mm``).
    """
    import cutlass
    import cutlass.cute as cute

    from ..compile_utils import fake_stream, fake_tensor, fake_vector, fake_zero_points, kernel_view
    from ..epilogues import bias_kind, present_operands, scaled_mm_tree
    from ..sm90.gemm import Sm90GemmKernel

    d_cute = getattr(cutlass, _CUTE_DTYPES[out_dtype])
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=16)
    batch = (cute.sym_int32(),) if rank == 3 else ()
    a_cute, b_cute = (getattr(cutlass, _CUTE_OPERANDS[t]) for t in operand_dtypes)
    acc_dtype = cutlass.Int32 if a_cute is cutlass.Int8 else cutlass.Float32
    fa = fake_tensor(a_cute, (*batch, m, k), stride_div=16)
    fb = fake_tensor(b_cute, (*batch, k, n), contiguous_dim=-2, stride_div=16)
    fd = fake_tensor(d_cute, (*batch, m, n), stride_div=128 // d_cute.width)
    f_as = fake_vector(cutlass.Float32, m if a_kind == "vector" else 1)
    f_bs = fake_vector(cutlass.Float32, n if b_kind == "vector" else 1)
    kind = bias_kind(has_bias)
    bias_cute = cutlass.Int32 if kind == "acc" else d_cute
    f_bias = fake_vector(bias_cute, n, align=bias_cute.width // 8) if kind else None
    f_adj, f_azp = fake_zero_points(zero_point, m, n)
    tree = scaled_mm_tree(a_kind, b_kind, kind, swap_ab=config.swap_ab, source=c_dtype is not None,
                          zero_point=zero_point)
    # The tokens' last tile ends at their edge (M, or N after a swap; ``Sm90GemmKernel.tile_shifts``), except with
    # an added c, which may be the output itself: a moved tile re-reads rows its neighbour has already written.
    clamp = (False, False) if c_dtype is not None else (not config.swap_ab, config.swap_ab)
    kernel = Sm90GemmKernel(config, tree, acc_dtype, sm_count=sm_count, l2_warmup=L2_WARMUP_KTILES,
                            raster=raster, clamp=clamp, weight_preload=weight_preload,
                            weight_operand=0 if config.swap_ab else 1, split_cluster=split_cluster,
                            rank1_share=rank1_share)
    swap = config.swap_ab
    options = f"--enable-tvm-ffi --gpu-arch sm_90a {extra_options}".strip()

    def views(a, b, d):
        mA = kernel_view(a, 0, 1)  # (M, K, L)
        mB = kernel_view(b, 1, 0)  # (N, K, L)
        if swap:  # D^T = B^T A^T: the weight is the kernel's A
            return mB, mA, kernel_view(d, 1, 0)
        return mA, mB, kernel_view(d, 0, 1)

    if c_dtype is not None:
        if config.splits:
            raise ValueError("the c operand runs on unsplit configs only")
        c_cute = getattr(cutlass, _CUTE_DTYPES[c_dtype])
        fc = fake_tensor(c_cute, (*batch, m, n), stride_div=128 // c_cute.width, align=c_cute.width // 8)

        @cute.jit
        def launch_c(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                     bias, azp_adj, azp, c: cute.Tensor, stream):
            mA, mB, mD = views(a, b, d)
            mC = kernel_view(c, 1, 0) if swap else kernel_view(c, 0, 1)
            kernel(mA, mB, mD, present_operands(a_scale, b_scale, bias, azp_adj, azp, mC), stream)

        return cute.compile(launch_c, fa, fb, fd, f_as, f_bs, f_bias, f_adj, f_azp, fc, fake_stream(),
                            options=options)

    if not config.splits:
        @cute.jit
        def launch(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                   bias, azp_adj, azp, stream):
            mA, mB, mD = views(a, b, d)
            kernel(mA, mB, mD, present_operands(a_scale, b_scale, bias, azp_adj, azp), stream)

        return cute.compile(launch, fa, fb, fd, f_as, f_bs, f_bias, f_adj, f_azp, fake_stream(), options=options)

    @cute.jit
    def launch_split(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                     bias, azp_adj, azp, workspace: cute.Tensor, semaphore: cute.Tensor, num_splits: cutlass.Int32,
                     head: cutlass.Int32, stream):
        mA, mB, mD = views(a, b, d)
        kernel(mA, mB, mD, present_operands(a_scale, b_scale, bias, azp_adj, azp), stream,
               (workspace, semaphore, num_splits, head))

    f_ws = fake_vector(acc_dtype, cute.sym_int32(), align=16)  # partial sums in the accumulator's type
    f_sem = fake_vector(cutlass.Int32, cute.sym_int32())
    return cute.compile(launch_split, fa, fb, fd, f_as, f_bs, f_bias, f_adj, f_azp, f_ws, f_sem, cutlass.Int32(1),
                        cutlass.Int32(0), fake_stream(), options=options)


def _compile_sm90(rank, a_kind, b_kind, has_bias, out_dtype, config: TileConfig, sm_count, c_dtype=None,
                  raster=(1, True), weight_preload=0, split_cluster=1, rank1_share=8, zero_point=None,
                  operand_dtypes=(torch.int8, torch.int8)):
    key = ("sm_90a", rank, a_kind, b_kind, has_bias, str(out_dtype), config.key, sm_count)
    if operand_dtypes != (torch.int8, torch.int8):
        key += ("operands", tuple(str(t) for t in operand_dtypes))
    if zero_point is not None:
        key += ("zero_point", zero_point)
    if L2_WARMUP_KTILES:
        key += ("l2_warmup", L2_WARMUP_KTILES)
    if weight_preload:
        key += ("weight_preload", weight_preload)
    if c_dtype is not None:
        key += ("c", str(c_dtype))
    if raster != (1, True):
        key += ("raster", raster)
    if split_cluster > 1:
        key += ("split_cluster", split_cluster)
    if rank1_share != 8:
        key += ("rank1_share", rank1_share)
    return cached_compile("int8_scaled_mm", key,
                          lambda: build_sm90(rank, a_kind, b_kind, has_bias, out_dtype, config, sm_count,
                                             c_dtype=c_dtype, raster=raster, weight_preload=weight_preload,
                                             split_cluster=split_cluster, rank1_share=rank1_share,
                                             zero_point=zero_point, operand_dtypes=operand_dtypes))


def int8_scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                   bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
                   out: Optional[torch.Tensor] = None, config: Optional[TileConfig] = None,
                   arch: Optional[str] = None, sm_count: Optional[int] = None,
                   c: Optional[torch.Tensor] = None, azp_adj: Optional[torch.Tensor] = None,
                   azp: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int8 GEMM with a dequantizing epilogue; see the module docstring for layouts and semantics.

    bias: [N] in ``out_dtype`` (added after the scales), or int32 (added to the accumulator before them: the bias of
      an int8 linear layer whose bias was quantized with the weights, or a zero-point correction such as
      ``-azp * b.sum(0)`` for asymmetric per-tensor activations).
    out_dtype: fp16 / bf16 (the op's outputs) or fp32 (e.g. partial sums that are reduced across GPUs later).
    config: a :class:`~cute_kernels.configs.TileConfig` to override the shape-bucket table.
    arch: force a kernel family ("sm90" / "sm80"); default: the tensors' GPU.
    sm_count: run the persistent kernel on at most this many SMs (default all), e.g. to leave SMs to a
      concurrent communication kernel.
    c: optional tensor of out's shape (fp32 / fp16 / bf16, N contiguous) added before the final rounding.
    azp_adj, azp: asymmetric activations (vLLM's ``cutlass_scaled_mm_azp``), a = q - azp per token. azp_adj int32
      [N] is subtracted from the accumulator in int32 before everything else: alone, it is ``azp * b.sum(K)`` of a
      per-tensor zero point; with ``azp`` int32 [M] (per token; ``per_token_quant_int8(x, symmetric=False)`` makes
      it) it is ``b.sum(K)`` and the accumulator loses ``azp[i] * azp_adj[j]``. The int32 correction is exact when
      every ``|a - azp| <= 255`` (zero points in -128..127, as ``per_token_quant_int8`` makes them; not checked,
      that would read the tensors) and K <= ``MAX_K_ZERO_POINT``.
    Backward: d bias only (the sum of d out over the tokens); any other float argument that requires grad gives an
    output whose backward raises (``autograd.py``).
    """
    if needs_grad(a_scale, b_scale, bias, c):
        refuse_out("int8_scaled_mm", out)
        return record("int8_scaled_mm", lambda: int8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype,
                                                               config=config, arch=arch, sm_count=sm_count, c=c,
                                                               azp_adj=azp_adj, azp=azp),
                      ("a_scale", "b_scale", "bias", "c"), (a_scale, b_scale, bias, c), {"bias": bias_grad})
    return _scaled_mm(False, a, b, a_scale, b_scale, bias, out_dtype, out, config, arch, sm_count, c, azp_adj, azp)


def fp8_scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                  bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
                  out: Optional[torch.Tensor] = None, config: Optional[TileConfig] = None,
                  sm_count: Optional[int] = None, c: Optional[torch.Tensor] = None,
                  use_fast_accum: bool = True) -> torch.Tensor:
    """FP8 GEMM with per-token / per-channel (or per-tensor) scales and a bias, vLLM's ``cutlass_scaled_mm`` on FP8:

        out[..., i, j] = cast( float(sum_k a[..., i, k] * b[..., k, j]) * a_scale[i] * b_scale[j] + bias[j] + c )

    a float8_e4m3fn / float8_e5m2 [(L,) M, K], K contiguous; b the same dtypes [(L,) K, N] column-major (``w.t()`` of a
    row-major [N, K] weight); a_scale float32 [M] or [1]; b_scale float32 [N] or [1]; bias [N] in ``out_dtype`` (fp16 /
    bf16 / fp32); c as in ``int8_scaled_mm``. K a multiple of 16, N of 8. SM90 only. The K sum runs in the WGMMA
    accumulator without promotion (the module docstring says what that means for precision; for per-block scales and
    promoted sums use ``fp8_blockwise_scaled_mm``). ``use_fast_accum=False`` (torch._scaled_mm's flag; the default
    here is the fast path, as in vLLM): promoted sums instead - every 128-deep WGMMA partial sum added into an fp32
    accumulator, ``fp8_blockwise_scaled_mm``'s kernel with unit block scales and these scales in its epilogue
    (``promoted_rowwise_mm``); K a multiple of 128, without ``config`` / ``sm_count`` / ``c``, bf16 / fp16 out.
    Backward: d bias only.
    """
    if needs_grad(a_scale, b_scale, bias, c):
        refuse_out("fp8_scaled_mm", out)
        return record("fp8_scaled_mm", lambda: fp8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, config=config,
                                                             sm_count=sm_count, c=c, use_fast_accum=use_fast_accum),
                      ("a_scale", "b_scale", "bias", "c"), (a_scale, b_scale, bias, c), {"bias": bias_grad})
    if not use_fast_accum:
        return _promoted_fp8(a, b, a_scale, b_scale, bias, out_dtype, out, config, sm_count, c)
    return _scaled_mm(True, a, b, a_scale, b_scale, bias, out_dtype, out, config, None, sm_count, c, None, None)


_promoted_checked: set = set()  # call signatures fp8_scaled_mm(use_fast_accum=False) has validated once


def _promoted_fp8(a, b, a_scale, b_scale, bias, out_dtype, out, config, sm_count, c):
    """fp8_scaled_mm's promoted path: the checks once per signature (later calls rely on the compiled function's own,
    as ``_scaled_mm`` does), then ``fp8_blockwise_scaled_mm.promoted_rowwise_mm`` (which refuses K not a multiple of
    128)."""
    from .fp8_blockwise_scaled_mm import promoted_rowwise_mm

    for name, value in (("config", config), ("sm_count", sm_count), ("c", c)):
        if value is not None:
            raise ValueError(f"{name} is not supported with use_fast_accum=False (the promoted kernel picks its own "
                             f"tiles and runs on every SM)")
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, b_scale.shape, None if bias is None else bias.dtype,
           out_dtype)
    if sig in _promoted_checked:
        try:
            return promoted_rowwise_mm(a, b, a_scale, b_scale, bias, out_dtype, out)
        except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
            pass
    a, b = checks.check_tensor("a", a), checks.check_tensor("b", b)
    a_scale, b_scale = checks.check_tensor("a_scale", a_scale), checks.check_tensor("b_scale", b_scale)
    if out_dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"out_dtype must be torch.float16 or torch.bfloat16 with use_fast_accum=False; got {out_dtype}")
    device, *_ = _validate(a, b, a_scale, b_scale, bias, out_dtype, out, fp8=True)
    dev_arch = _arch.current_arch(device)
    if dev_arch != "sm_90a":
        raise _arch.unsupported(dev_arch, "fp8_scaled_mm (SM90 only)")
    out = promoted_rowwise_mm(a, b, a_scale, b_scale, bias, out_dtype, out)
    _promoted_checked.add(sig)
    return out


def _scaled_mm(fp8: bool, a, b, a_scale, b_scale, bias, out_dtype, out, config, arch, sm_count, c, azp_adj, azp):
    """The body of both ops (``fp8``: FP8 operands, an fp32 accumulator, SM90 only)."""
    # Only what picks the compiled variant and what the Python checks depend on beyond TVM-FFI's own per-call
    # checks (dtypes, unit strides, stride divisibility, base alignment, equal extents, device type).
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, b_scale.shape, None if bias is None else bias.dtype,
           out_dtype, config, arch, sm_count, None if c is None else c.dtype, zero_point_kind(azp_adj, azp))
    partials = torch.float32 if fp8 else torch.int32  # the split-K workspace's words
    plan = _validated.get(sig)
    if plan is not None:
        fn, out_shape, split = plan
        if out is None:
            out = torch.empty(out_shape, dtype=out_dtype, device=a.device)
        try:
            if split == "sm80":  # the SM80 entry point keeps its own per-shape plan
                fn(a, b, a_scale, b_scale, bias, out, azp_adj, azp)
            else:
                launch_planned(fn, (a, b, out, a_scale, b_scale, bias, azp_adj, azp) + ((c,) if c is not None else ()),
                               split, a.device, partials)
            return out
        except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
            pass
    a, b = checks.check_tensor("a", a), checks.check_tensor("b", b)
    a_scale, b_scale = checks.check_tensor("a_scale", a_scale), checks.check_tensor("b_scale", b_scale)
    if c is not None:
        c = checks.check_tensor("c", c)
        checks.check_dtype("c", c, (torch.float32, torch.float16, torch.bfloat16))
        checks.check_shape("c", c, (*a.shape[:-1], b.shape[-1]), "out's shape [.., M, N]")
        checks.check_inner_contiguous("c", c)
    azp_adj = None if azp_adj is None else checks.check_tensor("azp_adj", azp_adj)
    azp = None if azp is None else checks.check_tensor("azp", azp)
    device, m, n, k, out_shape = _validate(a, b, a_scale, b_scale, bias, out_dtype, out, azp_adj, azp, fp8)
    zero_point = zero_point_kind(azp_adj, azp)
    if c is not None:
        checks.check_aligned("c", c)
        checks.check_cuda({"a": a, "c": c})
    if m == 0 or n == 0 or (a.dim() == 3 and a.shape[0] == 0):  # no tokens, no output columns: nothing to launch
        return out if out is not None else torch.empty(out_shape, dtype=out_dtype, device=device)
    if fp8:
        dev_arch = _arch.current_arch(device)
        if dev_arch != "sm_90a":
            raise _arch.unsupported(dev_arch, "fp8_scaled_mm (SM90 only)")
        target = "sm90"
    else:
        target = _resolve_arch(arch, device)
    if target == "sm80":
        from ..sm80 import run_int8_scaled_mm_sm80

        if c is not None:
            raise ValueError("c (an added [M, N] operand) is supported by the SM90 kernel only")

        if out is None:
            out = torch.empty(out_shape, dtype=out_dtype, device=device)
        dev_arch = _arch.current_arch(device)

        def run_sm80(a, b, a_scale, b_scale, bias, out, azp_adj, azp):
            run_int8_scaled_mm_sm80(a, b, a_scale, b_scale, bias, out, arch=dev_arch, config=config,
                                    azp_adj=azp_adj, azp=azp)

        run_sm80(a, b, a_scale, b_scale, bias, out, azp_adj, azp)
        _validated[sig] = (run_sm80, out_shape, "sm80")
        return out
    sms = _arch.sm_count(device.index)
    if sm_count is not None:
        if not 1 <= sm_count <= sms:
            raise ValueError(f"sm_count must be in [1, {sms}] (this GPU's SMs); got {sm_count}")
        sms = sm_count
    batch = a.shape[0] if a.dim() == 3 else 1
    # FP8 runs int8's table and policies: the same bytes per element and the same WGMMA rate (measured on the int8
    # kernel; docs/int8_scaled_mm.md, "fp8_scaled_mm").
    cfg = config if config is not None else select_sm90_int8(m, n, k, batch, sms)
    if c is not None and cfg.splits:
        cfg = dataclasses.replace(cfg, split_k=1, split_tail=1)  # c is added by the one epilogue of an unsplit tile
    cfg, split, split_cluster = resolve_launch(cfg, m, n, k, batch, sms)
    preload = weight_preload_ktiles("int8", m) if WEIGHT_PRELOAD_KTILES is None else WEIGHT_PRELOAD_KTILES
    fn = _compile_sm90(a.dim(), _scale_kind(a_scale), _scale_kind(b_scale), _bias_kind(bias), out_dtype, cfg, sms,
                       None if c is None else c.dtype, raster_for(cfg, m, n, k, batch, sms), preload, split_cluster,
                       cluster_rank1_share("int8", k, split_cluster), zero_point, (a.dtype, b.dtype))
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    launch_planned(fn, (a, b, out, a_scale, b_scale, bias, azp_adj, azp) + ((c,) if c is not None else ()), split,
                   device, partials)
    _validated[sig] = (fn, out_shape, split)
    return out


# Largest K with a zero point: the corrected sum, sum_k (q - azp) * b with |q - azp| <= 255 and |b| <= 128, must fit
# int32 (ZeroPointAccumulator subtracts in wrapping int32 arithmetic, exact only if the true difference fits).
MAX_K_ZERO_POINT = (2**31 - 1) // (255 * 128)


def _check_zero_point(azp_adj, azp, m: int, n: int, k: int) -> None:
    if azp is not None and azp_adj is None:
        raise ValueError("azp (per-token zero points) needs azp_adj, the weight's column sums b.sum(K) as int32 [N]: "
                         "the accumulator loses azp[i] * azp_adj[j]")
    if azp_adj is None:
        return
    for name, t, length, what in (("azp_adj", azp_adj, n, "one value per output column N"),
                                  ("azp", azp, m, "one zero point per token M")):
        if t is None:
            continue
        checks.check_dtype(name, t, (torch.int32,))
        checks.check_shape(name, t, (length,), what)
        checks.check_inner_contiguous(name, t)
    if k > MAX_K_ZERO_POINT:
        raise ValueError(f"K = {k} exceeds {MAX_K_ZERO_POINT} with a zero point: sum_k (a - azp) * b could overflow "
                         f"int32 (|a - azp| <= 255, |b| <= 128); split K and add the partial results")


def _bias_kind(bias: Optional[torch.Tensor]) -> Optional[str]:
    """The epilogue variant a bias tensor selects (``epilogues.bias_kind``): int32 -> "acc", else "out"."""
    return None if bias is None else ("acc" if bias.dtype == torch.int32 else "out")


def _resolve_arch(arch: Optional[str], device: torch.device) -> str:
    dev_arch = _arch.current_arch(device)
    if arch is None:
        if dev_arch == "sm_90a":
            return "sm90"
        if dev_arch in ("sm_80", "sm_86", "sm_87", "sm_89"):
            return "sm80"
        raise _arch.unsupported(dev_arch, "int8_scaled_mm")
    if arch not in ("sm90", "sm80"):
        raise ValueError(f"arch must be 'sm90' or 'sm80' (or None for the device's own); got {arch!r}")
    if arch == "sm90" and dev_arch != "sm_90a":
        raise _arch.unsupported(dev_arch, "int8_scaled_mm(arch='sm90')")
    return arch
