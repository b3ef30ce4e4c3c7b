"""The dense path of quantized_mm: the 1/2/4/8-bit dequantize kernel (dequantize_kernel.py) + one cuBLAS GEMM.

CPU tier: the one dequantize template compiles for sm_90a in every specialization (width x output dtype x group
scales) with 128-bit stores and no spills; the kernel's per-thread code (load, unshuffle + the formats' decode,
group scale) runs on emulated warps (tests/weight_only_simt.py) and must equal the CPU reference bit for bit; the
dispatcher's choice of path; the CPU reference; error messages.
GPU tier (``-m gpu``): dequantize_weights on the device vs the CPU reference, bit for bit (N and K tails, every
option), and quantized_mm on the dense path vs the float64 reference, outputs NaN-poisoned.
"""

import ast
import importlib
import inspect
import types

import numpy as np
import pytest
import torch

from . import weight_only_simt as simt
from .conftest import poisoned
from cute_kernels import checks
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import config, dequantize_weights, quantized_mm
from cute_kernels.weight_only import dequantize_kernel as dq
from cute_kernels.weight_only.compile import cutlass_dtype

qmm_ops = importlib.import_module("cute_kernels.weight_only.quantized_mm")

BITS = [8, 4, 2, 1]
DTYPES = [torch.float16, torch.bfloat16]


def _random_packed(n, k, bits, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, generator=g)


def _random_group_scales(n, k, group, dtype, seed):
    g = torch.Generator().manual_seed(seed + 1)
    return (torch.rand(n, k // group, generator=g) * 0.1 + 1e-3).to(dtype)


# ------------------------------------------------------------------------------------------------ CPU: compile
def test_dequantize_is_one_kernel_template():
    tree = ast.parse(inspect.getsource(dq))
    kernels = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
               and any(ast.unparse(d) in ("cute.kernel", "kernel") for d in node.decorator_list)]
    assert kernels == ["kernel"]


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("scale_dtype", [None, torch.float32], ids=["no_groups", "groups"])
def test_every_specialization_compiles(bits, dtype, scale_dtype):
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin
    from cute_kernels.weight_only.compile import _build_dequantize

    compiled = compile_with_artifacts(lambda opts: _build_dequantize(bits, dtype, scale_dtype, "sm_90a", opts))
    s = summarize_cubin(compiled.artifacts.CUBIN)
    (name,) = s.kernels
    assert "WeightDequantize" in name
    assert s.text.count("STG.E.128") == dq.CHUNKS_PER_THREAD, "one 16-byte store per chunk"
    assert s.instructions["LDG"] == dq.CHUNKS_PER_THREAD * (1 if scale_dtype is None else 2)
    assert not s.spills, f"{s.local_memory_ops} local-memory ops (register spills)"


# ------------------------------------------------------------------------------------------------ CPU: emulation
def _ld_global_narrow(mem):
    def load(addr, pred, nbytes):
        addr = np.broadcast_to(np.asarray(addr, np.int64), (simt.LANES,))
        pred = np.broadcast_to(np.asarray(pred, bool), (simt.LANES,))
        out = np.zeros(simt.LANES, np.uint32)
        for lane in np.nonzero(pred)[0]:
            a = int(addr[lane])
            assert a % nbytes == 0 and 256 <= a and a + nbytes <= len(mem.buf), f"bad {nbytes}-byte load at {a:#x}"
            out[lane] = int.from_bytes(bytes(mem.buf[a:a + nbytes]), "little")
        return out
    return load


class _FlatScales:
    """The kernel's view of the flat group-scale tensor: shape and element loads (lane vectors)."""

    def __init__(self, gs_flat: torch.Tensor):
        self.values = gs_flat.float().numpy()
        self.shape = (gs_flat.numel(),)

    def __getitem__(self, f):
        return types.SimpleNamespace(to=lambda _dt: self.values[np.asarray(f, np.int64)].astype(np.float32))


def _emulated_launch(w, out, gs_flat, group, bits, device):
    """One launch of WeightDequantize on CPU tensors (same arguments as qmm_ops.launch_dequantize), writing out."""
    scale_dtype = None if gs_flat is None else cutlass_dtype(gs_flat.dtype)
    kern = dq.WeightDequantize(bits, cutlass_dtype(out.dtype), scale_dtype)
    assert w.is_contiguous() and out.is_contiguous() and out.shape[1] % 8 == 0
    mem = simt.Memory()
    w_base = mem.place(w.numpy())
    gs = None if gs_flat is None else _FlatScales(gs_flat)
    chunks = out.shape[0] * out.shape[1] // 8
    res = np.full((chunks, 4), 0xFFFFFFFF, np.uint32)  # NaN patterns: a chunk the kernel skips stays NaN
    lane = np.arange(simt.LANES)
    ptx_patched = dict(ld_global_narrow=_ld_global_narrow(mem),
                       f16x2_to_f32=lambda v: tuple(h.astype(np.float32) for h in simt._halves(v, "f16x2")))
    patched = dict(Int64=lambda v: np.asarray(v, np.int64),
                   Int32=lambda v: np.asarray(v, np.int64), Uint32=simt.u32, Float32=np.float32,
                   cutlass=types.SimpleNamespace(min=np.minimum))
    saved = {name: getattr(dq, name) for name in patched}
    saved_ptx = {name: getattr(dq.ptx, name) for name in ptx_patched}
    try:
        for name, v in patched.items():
            setattr(dq, name, v)
        for name, v in ptx_patched.items():
            setattr(dq.ptx, name, v)
        with simt.emulated(mem):
            per_cta = dq.THREADS * dq.CHUNKS_PER_THREAD
            for bidx in range(-(-chunks // per_cta)):  # kernel(): the same loop, warp by warp
                for warp in range(dq.THREADS // simt.LANES):
                    first = bidx * per_cta + warp * simt.LANES + lane
                    codes = [kern.load_codes(w_base, first + u * dq.THREADS, first + u * dq.THREADS < chunks)
                             for u in range(dq.CHUNKS_PER_THREAD)]
                    for u in range(dq.CHUNKS_PER_THREAD):
                        i = first + u * dq.THREADS
                        scale = None if gs is None else kern.group_scale(gs, i, group)
                        words = kern.decode_chunk(codes[u], scale)
                        live = i < chunks
                        res[i[live]] = np.stack([simt.u32(wd) for wd in words], axis=1)[live]
    finally:
        for name, v in saved.items():
            setattr(dq, name, v)
        for name, v in saved_ptx.items():
            setattr(dq.ptx, name, v)
    out.copy_(torch.from_numpy(res.view(np.int16).reshape(out.shape).copy()).view(out.dtype))


@pytest.fixture
def emulated_dequantize(monkeypatch):
    monkeypatch.setattr(qmm_ops, "launch_dequantize", _emulated_launch)
    monkeypatch.setattr(checks, "check_cuda", lambda tensors: torch.device("cpu"))


EMULATED = [  # bits, dtype, N, K, group, group-scale dtype
    (8, torch.bfloat16, 5, 296, None, None),  # 8-bit bf16 goes through f32 inside the format's decode
    (8, torch.float16, 3, 256, 64, torch.float32),
    (4, torch.float16, 7, 200, None, None),
    (4, torch.bfloat16, 4, 256, 32, torch.bfloat16),
    (2, torch.bfloat16, 6, 168, None, None),
    (2, torch.float16, 3, 384, 128, torch.float32),
    (1, torch.float16, 5, 264, None, None),
    (1, torch.bfloat16, 3, 512, 256, torch.float16),
    (4, torch.bfloat16, 3, 38, None, None),  # K % 8 != 0: padded to 40, columns past K dropped
    (2, torch.float16, 2, 36, None, None),
]


@pytest.mark.parametrize("bits,dtype,N,K,group,gs_dtype", EMULATED)
def test_dequantize_kernel_emulated_is_bit_exact(emulated_dequantize, bits, dtype, N, K, group, gs_dtype):
    w = _random_packed(N, K, bits, seed=N * K + bits)
    gs = None if group is None else _random_group_scales(N, K, group, gs_dtype, seed=bits)
    dense = qmm_ops.dense_weight(w, bits, K, gs, group or 32, dtype, torch.device("cpu"))[:, :K]
    ref = qmm_ops.dequantize_reference(w, bits, K, gs, dtype)
    assert torch.equal(dense.view(torch.int16), ref.view(torch.int16))


def test_quantized_mm_dispatches_large_m_to_the_dense_path(emulated_dequantize, monkeypatch):
    def no_template(*args, **kw):
        raise AssertionError("the kernel template ran; the dispatcher should have picked the dense path")

    monkeypatch.setattr(qmm_ops, "launch", no_template)
    torch.manual_seed(11)
    M, N, K = config.DENSE_MIN_M + 3, 40, 256
    x = torch.randn(M, K, dtype=torch.bfloat16)
    w, scale, gs = quantize_weights(torch.randn(N, K), 4, group=64)
    out = poisoned((M, N), torch.bfloat16, "cpu")
    qmm_ops.quantized_mm(x, w, scale, 4, gs, out=out)
    ref = quantized_mm_ref(x, w, scale, 4, gs)
    assert not out.isnan().any()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 8e-3
    res = qmm_ops.quantized_mm(x, w, scale, 4, gs)  # second call: the warm path (cached plan)
    assert torch.equal(res, out)
    w.bitwise_xor_(0x11)  # weights updated in place: never served from a stale dense copy
    res = qmm_ops.quantized_mm(x, w, scale, 4, gs)
    ref = quantized_mm_ref(x, w, scale, 4, gs)
    assert ((res.double() - ref).abs().max() / ref.abs().max()).item() < 8e-3


def test_dispatch():
    assert config.select_tile(4, config.DENSE_MIN_M, 4096, 132, dense=True) == ("dense", None)
    assert config.select_tile(4, config.DENSE_MIN_M - 1, 4096, 132, dense=True)[0] == "tensor_core"
    assert config.select_tile(4, 4096, 4096, 132)[0] == "tensor_core"  # caller without a dense path (AWQ, fp32 x)
    assert config.select_tile(4, 8, 4096, 132, dense=True)[0] == "decode"
    assert config.select_tile(4, 8, 4096, 132, path="dense", dense=True) == ("dense", None)
    assert config.select_tile(4, 300, 4096, 132, dense=True, dense_min_m=512)[0] == "tensor_core"
    with pytest.raises(ValueError, match="path='dense' is not available"):
        config.select_tile(4, 300, 4096, 132, path="dense")
    with pytest.raises(ValueError, match="'dense'"):
        config.select_tile(4, 300, 4096, 132, path="cublas", dense=True)


def test_decode_ring_where_the_grid_keeps_few_bytes_in_flight():
    # N = 4096: 256 CTAs of one 16-row tile (~16 KB of weights in flight per SM with the register pipeline) -> the
    # cp.async ring, two steps ahead, for 2/4/8-bit at M <= 8; N = 8192 (nt 2, ~32 KB) keeps the registers; 1-bit,
    # AWQ, group scales and M > 8 keep their plans (DECODE_MIN_INFLIGHT_KB).
    for bits in (2, 4, 8):
        assert config.decode_tile(bits, 1, 4096, 132).stages == 3
        assert config.decode_tile(bits, 8, 4096, 132).stages == 3
        assert config.decode_tile(bits, 1, 8192, 132).stages == 0
        assert config.decode_tile(bits, 16, 4096, 132) == config.decode_tile(bits, 16, 4096, 132, ring=False) or \
            config.decode_plan(bits, 16).ring
        assert config.decode_tile(bits, 1, 4096, 132, ring=False).stages == 0  # an explicit choice wins
    assert config.decode_tile(1, 1, 4096, 132).stages == 0
    assert config.decode_tile("awq", 1, 4096, 132).stages == 0
    assert config.decode_tile(4, 1, 4096, 132, scaled=True) == config.decode_tile(4, 1, 4096, 132, scaled=True,
                                                                                   ring=config.SCALED_DECODE_PLANS[4][0].ring)


def test_side_by_side_warps_on_multi_wave_grids():
    """config.side_by_side_warps: 2 or 4 warps along N where that makes a multi-wave grid one nearly full wave and
    each warp walks <= 16 K steps; measured cases (docs/weight_only.md, session 7)."""
    sbs = config.side_by_side_warps
    assert sbs("awq", 16, 14336, 4096, 132) == 4  # 896 CTAs -> 224 (0.85 wave), 16 steps per warp
    assert sbs("awq", 16, 8192, 8192, 132) == 2  # 512 -> 256, 16 steps
    assert sbs(4, 32, 14336, 4096, 132) == 2  # 448 -> 224, 8 steps
    assert sbs("awq", 16, 11008, 4096, 132) == 1  # 688 -> 344 (1.3 waves) or 172 (0.65): neither
    assert sbs(8, 16, 8192, 8192, 132) == 1  # 512 -> 256, but 32 steps per warp
    assert sbs(4, 32, 8192, 8192, 132) == 1  # already one wave
    assert sbs(2, 64, 28672, 4096, 132) == 1  # 1/2-bit: not measured, unchanged
    # decode_tile applies it when told K (the ops do), keeping 8 warps per CTA
    t = config.decode_tile("awq", 1, 14336, 132, k=4096)
    assert (t.warps_n, t.warps_k, t.threads) == (4, 2, 256)
    assert config.decode_tile("awq", 1, 14336, 132).warps_n == 1
    assert config.select_tile(4, 1, 14336, 132, scaled=True, awq=True, k=4096)[1] == t


def test_decode_plans_for_9_to_16_tokens():
    """Session 7's 9-16-token plans: 4-bit from a 3-stage ring with 2 tiles per warp (never halved); AWQ 4 tiles in
    registers, or where fewer than 0.9 CTAs per SM would launch the session-6 plan (2 tiles, 4-stage ring)."""
    t4 = config.decode_tile(4, 16, 4096, 132)
    assert (t4.nt, t4.stages, t4.mt) == (2, 3, 2)
    wide, narrow = config.decode_tile("awq", 16, 8192, 132), config.decode_tile("awq", 16, 6144, 132)
    assert (wide.nt, wide.stages, narrow.nt, narrow.stages) == (4, 0, 2, 4)
    # 1/2-bit: 4 tiles per warp, both token tiles per CTA from a 3-stage ring, or token-major on narrow layers
    for bits in (1, 2):
        wide, narrow = config.decode_tile(bits, 16, 8192, 132), config.decode_tile(bits, 12, 4096, 132)
        assert (wide.nt, wide.mt, wide.stages, wide.token_major) == (4, 2, 3, False)
        assert (narrow.nt, narrow.mt, narrow.stages, narrow.token_major) == (4, 1, 0, True)
    assert config.decode_tile(4, 16, 8192, 132, scaled=True).nt == 4


def test_fp32_x_keeps_the_tensor_core_path(emulated_dequantize, monkeypatch):
    seen = []
    monkeypatch.setattr(qmm_ops, "launch",
                        lambda fmt, x, w, out, scale, gs, zeros, group, tile, device, bias=None: seen.append(tile))
    monkeypatch.setattr(qmm_ops, "dense_mm", lambda *a, **kw: pytest.fail("fp32 x must not take the dense path"))
    x = torch.randn(config.DENSE_MIN_M + 1, 64)
    w, scale, _ = quantize_weights(torch.randn(16, 64), 4)
    qmm_ops.quantized_mm(x, w, scale, 4, out=torch.empty(x.shape[0], 16))
    assert seen == [config.tensor_core_tile(x.shape[0], fmt=4)]


# ---------------------------------------------------------------------------------------- CPU: reference, errors
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_cpu_dequantize_weights_is_unpack_times_scales(bits, dtype):
    N, K, group = 6, 128, 64
    w = _random_packed(N, K, bits, seed=bits)
    q = unpack_weights(w, bits, K).float()
    assert torch.equal(dequantize_weights(w, bits, K, dtype=dtype), q.to(dtype))
    for gs_dtype in (torch.float32, dtype):
        gs = _random_group_scales(N, K, group, gs_dtype, seed=bits)
        expect = (q * gs.float().repeat_interleave(group, dim=1)).to(dtype)
        got = dequantize_weights(w, bits, K, gs, dtype=dtype)
        assert got.dtype == dtype and got.shape == (N, K) and torch.equal(got, expect)


def test_dequantize_weights_errors():
    w = _random_packed(4, 64, 4, seed=0)
    with pytest.raises(ValueError, match="bits"):
        dequantize_weights(w, 3, 64)
    with pytest.raises(TypeError, match="w_packed must have dtype uint8"):
        dequantize_weights(w.to(torch.int8), 4, 64)
    with pytest.raises(TypeError, match="k must be an int"):
        dequantize_weights(w, 4, 64.0)
    with pytest.raises(ValueError, match=r"w_packed must have shape \[N, K \* bits / 8\] = \[N, 16\]"):
        dequantize_weights(w, 4, 32)
    with pytest.raises(ValueError, match="k = 5 must be a positive multiple of 8 / bits = 2"):
        dequantize_weights(w[:, :2], 4, 5)
    with pytest.raises(TypeError, match="dtype must be torch.float16 or torch.bfloat16"):
        dequantize_weights(w, 4, 64, dtype=torch.float32)
    with pytest.raises(ValueError, match="group_scales must have shape"):
        dequantize_weights(w, 4, 64, torch.ones(4, 3))
    with pytest.raises(TypeError, match="group_scales must have dtype"):
        dequantize_weights(w, 4, 64, torch.ones(4, 2, dtype=torch.float64))


def test_dense_path_needs_16_bit_x():
    w, scale, _ = quantize_weights(torch.randn(16, 64), 4)
    with pytest.raises(ValueError, match="path='dense' needs fp16 or bf16 x; got float32"):
        quantized_mm(torch.randn(200, 64), w, scale, 4, path="dense")


# ------------------------------------------------------------------------------------------------ GPU
TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 2e-5}

GPU_SHAPES = [  # N, K per width: N tails everywhere, K tails (K % 8 != 0) where the width allows them
    (37, 1000), (300, 1032), (5, 38), (2, 8)]


def _gpu_k(bits, k):
    return k - k % (8 // bits)  # a K the width can pack


@pytest.mark.gpu
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("groups", [None, "f32", "same"])
def test_gpu_dequantize_weights_is_bit_exact(bits, dtype, groups):
    for si, (N, K) in enumerate(GPU_SHAPES):
        K = _gpu_k(bits, K)
        group = None
        if groups is not None:
            K, group = K - K % 64, 64
            if K == 0:
                continue
        w = _random_packed(N, K, bits, seed=si * 10 + bits)
        gs = None if group is None else _random_group_scales(N, K, group, torch.float32 if groups == "f32" else dtype,
                                                             seed=si)
        got = dequantize_weights(w.cuda(), bits, K, None if gs is None else gs.cuda(), dtype=dtype)
        torch.cuda.synchronize()
        ref = qmm_ops.dequantize_reference(w, bits, K, gs, dtype)
        assert got.shape == (N, K) and got.dtype == dtype
        mism = (got.cpu().view(torch.int16) != ref.view(torch.int16))
        assert not mism.any(), f"N={N} K={K}: {int(mism.sum())} mismatches, first at {mism.nonzero()[0].tolist()}"


@pytest.mark.gpu
@pytest.mark.parametrize("bits", BITS)
def test_gpu_dequantize_kernel_writes_exactly_its_rows(bits):
    """The last CTA's lanes past N * K / 8 chunks store nothing: rows after the output stay NaN."""
    N, K = 77, 200  # 1925 chunks: not a multiple of the 1024 per CTA
    w = _random_packed(N, K, bits, seed=bits).cuda()
    buf = poisoned((N + 8, K), torch.bfloat16)
    qmm_ops.launch_dequantize(w, buf[:N], None, 32, bits, w.device)
    torch.cuda.synchronize()
    assert buf[N:].isnan().all(), "the kernel wrote past its output"
    ref = qmm_ops.dequantize_reference(w.cpu(), bits, K, None, torch.bfloat16)
    assert torch.equal(buf[:N].cpu().view(torch.int16), ref.view(torch.int16))


@pytest.mark.gpu
def test_gpu_dequantize_weights_strided_and_offset_packed():
    """A row-strided view and a view at an odd byte offset: copied to the kernel's layout, same result."""
    w = _random_packed(40, 512 + 16, 4, seed=5).cuda()
    for view in (w[:, :256], w[:, 3:259]):
        got = dequantize_weights(view, 4, 512)
        assert torch.equal(got.cpu(), qmm_ops.dequantize_reference(view.cpu(), 4, 512, None, torch.bfloat16))


def _dense_case(bits, M, N, K, dtype, group=None, seed=0):
    torch.manual_seed(seed + 1000 * bits + M)
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    w_packed, scale, gs = quantize_weights(torch.randn(N, K, device="cuda"), bits, group)
    return x, w_packed, scale, gs


def _check_dense(x, w, scale, bits, gs=None, out_dtype=None, **kw):
    calls = []
    real = qmm_ops.dense_mm
    qmm_ops.dense_mm = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        od = out_dtype or x.dtype
        out = poisoned((x.shape[0], w.shape[0]), od)
        res = quantized_mm(x, w, scale, bits, gs, out_dtype, out=out, **kw)
    finally:
        qmm_ops.dense_mm = real
    assert res is out and calls, "the dense path did not run"
    torch.cuda.synchronize()
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.float().cpu())
    assert not out.isnan().any(), "unwritten (NaN) outputs"
    err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
    tol = max(TOL[od], TOL[x.dtype])
    assert err < tol, f"max error {err:.3e} relative to max|ref| (tol {tol:.1e})"


@pytest.mark.gpu
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("M", [129, 300])
def test_gpu_quantized_mm_dense_path(bits, M):
    x, w, s, _ = _dense_case(bits, M, 200, 1024 + 64, torch.bfloat16)
    # on SM90 the WGMMA path takes fp16/bf16 x up to WGMMA_MAX_M tokens (1/2/4-bit since session 14, 8-bit since
    # session 21), so the dense path is forced here
    _check_dense(x, w, s, bits, path="dense")
    x, w, s, gs = _dense_case(bits, M, 136, 768, torch.float16, group=128, seed=1)
    _check_dense(x, w, s, bits, gs, path="dense")


@pytest.mark.gpu
def test_gpu_dense_path_options():
    x, w, s, gs = _dense_case(4, 150, 96, 512, torch.bfloat16, group=64)
    _check_dense(x, w, s, 4, gs.to(torch.bfloat16), out_dtype=torch.float32)
    _check_dense(x, w, s, 4, gs, out_dtype=torch.float16)
    x, w, s, _ = _dense_case(2, 140, 64, 100, torch.float16)  # K % 8 != 0: padded inside the dequantize
    _check_dense(x, w, s, 2)
    x, w, s, _ = _dense_case(8, 5, 64, 256, torch.bfloat16)  # forced at small M
    _check_dense(x, w, s, 8, path="dense")


@pytest.mark.gpu
def test_gpu_dense_path_warm_calls_and_in_place_update():
    x, w, s, _ = _dense_case(4, 256, 512, 1024, torch.bfloat16)
    a = quantized_mm(x, w, s, 4)
    b = quantized_mm(x, w, s, 4)  # the cached plan
    assert torch.equal(a, b)
    w.bitwise_xor_(0x77)  # in place: the next call must see the new weights
    c = quantized_mm(x, w, s, 4)
    ref = quantized_mm_ref(x.cpu(), w.cpu(), s, 4)
    assert ((c.double().cpu() - ref).abs().max() / ref.abs().max()).item() < TOL[torch.bfloat16]
