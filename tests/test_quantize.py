"""CPU tier: the activation quantizers (cute_kernels/quantize): the torch fallback on CPU tensors (values and the FP8
scale's TMA-aligned layout), and the kernel's SASS for sm_90a (F2FP e4m3 / F2I int8, no local memory) and sm_80;
the asymmetric (zero-point) int8 reference (formats/int8.py) on hand-computed rows, its round-trip bound, constant
rows and dtypes, and its torch op's fake implementation and autograd refusal."""

import pytest
import torch

import cute_kernels  # noqa: F401 - registers torch.ops.cute_kernels.*
from cute_kernels import per_token_group_quant_fp8, per_token_quant_fp8, per_token_quant_int8, per_token_quant_int8_azp
from cute_kernels.formats import (dequantize_int8_rowwise_asymmetric, quantize_int8_rowwise,
                                  quantize_int8_rowwise_asymmetric)
from cute_kernels.formats.fp8 import dequantize_fp8_rowwise, quantize_fp8_per_token_group, quantize_fp8_rowwise

RCP_255 = torch.tensor(1.0 / 255.0, dtype=torch.float32)  # the scale's factor, rounded to fp32 as torch rounds it


def test_cpu_tensors_take_the_references():
    x = torch.randn(2, 5, 256)
    q, s = per_token_quant_int8(x)
    rq, rs = quantize_int8_rowwise(x)
    assert torch.equal(q, rq) and torch.equal(s, rs) and s.shape == (2, 5)
    q, s = per_token_group_quant_fp8(x.bfloat16())
    rq, rs = quantize_fp8_per_token_group(x.bfloat16().reshape(10, 256))
    assert torch.equal(q.view(torch.uint8).reshape(10, 256), rq.view(torch.uint8))
    assert s.shape == (2, 5, 2) and torch.equal(s.reshape(10, 2), rs)
    assert s.reshape(10, 2).stride() == (1, 12)  # MN-major, column stride rounded up to 4 rows
    q, s = per_token_quant_fp8(x.half())
    rq, rs = quantize_fp8_per_token_group(x.half().reshape(10, 256), 256)  # one group per row
    assert q.shape == x.shape and s.shape == (2, 5)
    assert torch.equal(q.view(torch.uint8).reshape(10, 256), rq.view(torch.uint8)) and torch.equal(s.reshape(10, 1), rs)


@pytest.mark.parametrize("arch,fp8,per_token", [("sm_90a", False, False), ("sm_90a", True, False),
                                               ("sm_90a", True, True), ("sm_80", False, False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel_sass(arch, fp8, per_token, dtype):
    from cute_kernels.quantize import build
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(lambda o: build(dtype, fp8, arch, o, per_token=per_token))
                        .artifacts.CUBIN)
    assert not s.spills and s.local_memory_ops == 0
    # FP8 groups: 3 butterfly shuffles in the group's 8 lanes; whole rows: 5 across the warp, then shared memory
    assert s.instructions["SHFL"] == (5 if per_token or not fp8 else 3)
    assert s.instructions["STG"] == 2  # codes, scale
    if fp8:
        assert "F2FP.SATFINITE.E4M3.F32" in s.text
    else:
        assert s.instructions["F2I"] >= 16  # 16 codes per thread and pass
    assert "MUFU.RCP" in s.text and "FCHK" in s.text  # div.rn's IEEE path, not an approximate division
    assert s.text.count("LDG.E.128") >= 2  # the 16-byte loads


def test_fp8_rowwise_reference():
    x = torch.randn(3, 4, 96, dtype=torch.float64) * torch.logspace(-3, 3, 4, dtype=torch.float64).view(1, 4, 1)
    q, s = quantize_fp8_rowwise(x)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32 and s.shape == (3, 4)
    assert torch.equal(s, x.abs().amax(-1).float() * torch.tensor(1 / 448, dtype=torch.float32))
    assert (q.float().abs().amax(-1) == 448).all()  # every row's largest value takes the largest code
    rel = (dequantize_fp8_rowwise(q, s) - x).abs() / x.abs().amax(-1, keepdim=True)
    assert rel.max() <= 2.0 ** -4 * 1.01  # half an e4m3 step at the top binade, relative to the row's amax
    zero = quantize_fp8_rowwise(torch.zeros(2, 32))
    assert torch.equal(zero[1], torch.full((2,), 1e-10, dtype=torch.float32) * torch.tensor(1 / 448))
    with pytest.raises(ValueError, match="must be finite"):
        quantize_fp8_rowwise(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError, match="scale must have shape q.shape"):
        dequantize_fp8_rowwise(q, s.reshape(-1))
    with pytest.raises(TypeError, match="^t must have dtype"):
        quantize_fp8_rowwise(torch.zeros(2, 16, dtype=torch.int32))


def test_fp8_per_token_op_fake_shapes_and_autograd_refusal():
    ops = torch.ops.cute_kernels
    q, s = ops.per_token_quant_fp8(torch.empty(2, 3, 256, dtype=torch.bfloat16, device="meta"))
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((2, 3, 256), torch.float8_e4m3fn, (2, 3), torch.float32)
    x = torch.randn(4, 64, requires_grad=True)
    _, s = ops.per_token_quant_fp8(x)
    with pytest.raises(NotImplementedError, match="per_token_quant_fp8 has no backward"):
        s.sum().backward()


# ------------------------------------------------------------------------------------- asymmetric (zero point) int8
def _asym(rows, dtype=torch.float32):
    return quantize_int8_rowwise_asymmetric(torch.tensor(rows, dtype=dtype))


def _scale(span):
    return torch.tensor(float(span), dtype=torch.float32) * RCP_255


@pytest.mark.parametrize("row,span,azp,codes", [
    # range 255: the scale is 255 * fp32(1 / 255), which is 1.0 in fp32, so every x / scale is x
    ([-51.0, 0.0, 100.0, 204.0], 255, -77, [-128, -77, 23, 127]),
    # one-signed rows: the range is widened to hold 0, so the zero point is an end of the int8 range
    ([10.0, 20.0, 30.0, 255.0], 255, -128, [-118, -108, -98, 127]),
    ([-255.0, -30.0, -20.0, -10.0], 255, 127, [-128, 97, 107, 117]),
    ([-2.0, -1.0, 0.0, 3.0], 5, -26, [-128, -77, -26, 127]),
])
def test_asymmetric_reference_hand_computed(row, span, azp, codes):
    q, s, a = _asym([row])
    assert s.dtype == torch.float32 and a.dtype == torch.int32 and q.dtype == torch.int8
    assert torch.equal(s, _scale(span).reshape(1)), (s, _scale(span))
    assert a.tolist() == [azp] and q.tolist() == [codes]


def test_asymmetric_codes_round_half_to_even():
    assert _scale(255).item() == 1.0  # so x / scale = x and the halves below are exact
    q, s, a = _asym([[0.0, 0.5, 1.5, 2.5, 3.5, 255.0]])
    assert a.item() == -128
    assert q.tolist() == [[-128, -128, -126, -126, -124, 127]]  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4


def test_asymmetric_zero_point_rounds_half_to_even():
    # lo / scale = -50.5 exactly (scale 1): azp = round(-128 + 50.5) = round(-77.5) = -78 (even), not -77
    q, s, a = _asym([[-50.5, 204.5]])
    assert s.item() == 1.0 and a.item() == -78
    assert q.tolist() == [[-128, 126]]  # round(-50.5) = -50, -50 - 78; round(204.5) = 204, 204 - 78


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_asymmetric_constant_rows(dtype):
    """The documented rule: a constant row c is quantized on [min(c, 0), max(c, 0)]; c = 0 on [0, eps]."""
    c = torch.tensor([5.0, -3.0, 0.0, 1e-20, -1e-20, 60000.0], dtype=dtype)
    x = c.unsqueeze(-1).expand(-1, 48).contiguous()
    q, s, a = quantize_int8_rowwise_asymmetric(x)
    c32 = c.float()
    assert s.isfinite().all() and (s > 0).all()
    assert torch.equal(s, c32.abs().clamp_min(1e-10) * RCP_255)
    # |c| >= eps: c > 0 -> azp -128, codes 127; c < 0 -> azp 127, codes -128. A constant far below eps (and 0) is
    # within scale / 2 = eps / 510 of 0, so its codes are the zero point's: -128
    positive, big = c32 > 0, c32.abs() > 1e-10
    assert torch.equal(a, torch.where(big & ~positive, 127, -128).int())
    want = torch.where(positive & big, 127, -128).to(torch.int8)
    assert torch.equal(q, want.unsqueeze(-1).expand_as(q))
    back = dequantize_int8_rowwise_asymmetric(q, s, a)
    assert ((back - c32.unsqueeze(-1)).abs() <= c32.abs().unsqueeze(-1) * 2.0 ** -21 + s.unsqueeze(-1) / 2).all()
    assert torch.equal(back[2], torch.zeros(48))  # an all-zero row comes back exactly


def _rows_of_every_kind(dtype, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, k, generator=g) * 3
    x[1] = x[1].abs() + 100  # one-signed, far from 0 (vLLM's zero point would be ~-2500 here; ours is -128)
    x[2] = -x[2].abs() - 7
    x[3] = torch.relu(x[3])  # post-ReLU
    x[4, 17] = 1e4  # an outlier
    x[5] = x[5] * 1e-6
    x[6] = 1000.0 + torch.rand(k, generator=g)  # narrow spread relative to the magnitude
    x[7] = 2.5  # constant
    x[8] = 0.0
    x[9, ::2] = -1.0  # two values only
    x[9, 1::2] = 1.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_asymmetric_round_trip_within_half_a_step(dtype):
    x = _rows_of_every_kind(dtype)
    q, s, a = quantize_int8_rowwise_asymmetric(x)
    x32 = x.float()
    err = (dequantize_int8_rowwise_asymmetric(q, s, a) - x32).abs()
    # scale / 2, plus the fp32 roundings of the scale and of the dequantization (relative ~2^-22 of the value)
    bound = s.unsqueeze(-1) * 0.5 * (1 + 2.0 ** -16) + x32.abs() * 2.0 ** -20
    assert (err <= bound).all(), (err / s.unsqueeze(-1)).max()
    lo_code, hi_code = q.int().amin(-1), q.int().amax(-1)
    crosses = (x32.amax(-1) > 0) & (x32.amin(-1) < 0)
    assert ((lo_code <= -127) & (hi_code >= 126))[crosses].all()  # a row across 0 covers the whole int8 range
    assert ((lo_code <= -127) | (hi_code >= 126)).all()  # any row reaches one end (0 is in its range)
    assert ((a >= -128) & (a <= 127)).all()  # formats/int8.py, "Bounds": what the GEMM's int32 correction needs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_asymmetric_batch_dims_are_rows(dtype):
    x = _rows_of_every_kind(dtype, k=64).reshape(2, 3, 2, 64)
    q, s, a = quantize_int8_rowwise_asymmetric(x)
    assert q.shape == x.shape and s.shape == a.shape == (2, 3, 2)
    rq, rs, ra = quantize_int8_rowwise_asymmetric(x.reshape(12, 64))
    assert torch.equal(q.reshape(12, 64), rq) and torch.equal(s.reshape(12), rs) and torch.equal(a.reshape(12), ra)
    one_d = quantize_int8_rowwise_asymmetric(x[0, 0, 0])  # a single row: scalar scale and zero point
    assert one_d[1].shape == one_d[2].shape == () and torch.equal(one_d[0], rq[0])


def test_asymmetric_non_finite_rows():
    x = torch.randn(4, 64)
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    q, s, a = quantize_int8_rowwise_asymmetric(x)
    assert s[1].isnan() and not s[2].isfinite() and s[[0, 3]].isfinite().all()
    assert a[1].item() == 0  # NaN -> 0, as cvt.rni.s32.f32
    q0, s0, a0 = quantize_int8_rowwise_asymmetric(x[[0, 3]])  # the other rows are unaffected
    assert torch.equal(q[[0, 3]], q0) and torch.equal(s[[0, 3]], s0) and torch.equal(a[[0, 3]], a0)


def test_asymmetric_hairline_rows_keep_a_small_zero_point():
    """A row spread over one ulp of its magnitude: on [min, max] (vLLM's range) its zero point would be
    -128 - lo / scale ~= -255 * 2^24, past int32; with 0 in the range it is -128 and the row comes back."""
    q, s, a = _asym([[2.0 ** 34 - 1024.0, 2.0 ** 34], [-(2.0 ** 34), -(2.0 ** 34) + 1024.0]])
    assert a.tolist() == [-128, 127] and q.tolist() == [[127, 127], [-128, -128]]


def test_asymmetric_argument_errors():
    with pytest.raises(TypeError, match="^t must have dtype"):
        quantize_int8_rowwise_asymmetric(torch.zeros(2, 16, dtype=torch.int32))
    with pytest.raises(ValueError, match="at least one dimension"):
        quantize_int8_rowwise_asymmetric(torch.tensor(1.0))
    q, s, a = _asym([[1.0, 2.0]])
    with pytest.raises(ValueError, match="scale and azp"):
        dequantize_int8_rowwise_asymmetric(q, s.reshape(1, 1), a)
    with pytest.raises(TypeError, match="^azp must have dtype"):
        dequantize_int8_rowwise_asymmetric(q, s, a.long())


def test_cpu_tensors_take_the_asymmetric_reference():
    x = _rows_of_every_kind(torch.bfloat16, k=256).reshape(3, 4, 256)
    ref = quantize_int8_rowwise_asymmetric(x)
    for got in (per_token_quant_int8(x, symmetric=False), per_token_quant_int8_azp(x),
                torch.ops.cute_kernels.per_token_quant_int8_azp(x)):
        assert len(got) == 3 and all(torch.equal(g, r) for g, r in zip(got, ref))
    assert len(per_token_quant_int8(x)) == 2  # the default stays symmetric


def test_azp_op_fake_shapes_and_autograd_refusal():
    ops = torch.ops.cute_kernels
    q, s, a = ops.per_token_quant_int8_azp(torch.empty(2, 3, 256, dtype=torch.bfloat16, device="meta"))
    assert (q.shape, q.dtype) == ((2, 3, 256), torch.int8)
    assert (s.shape, s.dtype, a.shape, a.dtype) == ((2, 3), torch.float32, (2, 3), torch.int32)
    from torch.fx.experimental.proxy_tensor import make_fx

    g = make_fx(lambda x: ops.per_token_quant_int8_azp(x)[2] + 1, tracing_mode="fake")(torch.randn(5, 64))
    assert "cute_kernels.per_token_quant_int8_azp" in g.code
    x = torch.randn(4, 64, requires_grad=True)
    _, s, _ = ops.per_token_quant_int8_azp(x)
    with pytest.raises(NotImplementedError, match="per_token_quant_int8_azp has no backward"):
        s.sum().backward()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_zero_point_kernel_sass(arch, dtype, monkeypatch):
    from cute_kernels.quantize import build
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    monkeypatch.setenv("CUTE_DSL_ARCH", arch)
    s = summarize_cubin(compile_with_artifacts(lambda o: build(dtype, False, arch, o, zero_point=True))
                        .artifacts.CUBIN)
    assert not s.spills and s.local_memory_ops == 0
    assert s.instructions["F2I"] >= 17  # 16 codes per thread and pass, and the zero point
    assert "MUFU.RCP" in s.text and "FCHK" in s.text  # div.rn's IEEE path, not an approximate division
    assert s.text.count("LDG.E.128") >= 2  # the 16-byte loads
    assert s.instructions["STG"] == 3  # codes, scale, zero point
    assert s.instructions["SHFL"] == 10  # min and max, five butterfly steps each
