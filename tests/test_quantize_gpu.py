"""GPU tier: the activation quantizer kernels (cute_kernels/quantize) bit for bit against the torch references, on
shapes with one and many groups / passes, padded rows, leading dims, zero rows and non-finite rows; and the FP8
scale layout feeding fp8_blockwise_scaled_mm; the per-token FP8 kernel likewise, feeding fp8_scaled_mm. The asymmetric (zero-point) int8 kernel likewise, on M 1..300 and
K 16..20480, strided x, outliers, one-signed, constant and all-zero rows, against the CUDA and the CPU reference."""

import pytest
import torch

from cute_kernels import (fp8_blockwise_scaled_mm, fp8_scaled_mm, per_token_group_quant_fp8, per_token_quant_fp8,
                          per_token_quant_int8)
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group, quantize_fp8_rowwise
from cute_kernels.formats.int8 import quantize_int8_rowwise, quantize_int8_rowwise_asymmetric
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref

pytestmark = pytest.mark.gpu


def _x(shape, dtype, padded=False, specials=False):
    x = (torch.randn(*shape, device="cuda") * 3).to(dtype)
    if specials:
        x[..., 0, :] = 0  # an all-zero row: scale = eps / qmax
        x[..., 1, 5] = 60000 if dtype == torch.float16 else 1e30  # one huge value
    if padded:  # rows 16 bytes (or more) longer than K
        buf = torch.empty(*shape[:-1], shape[-1] + 24, dtype=dtype, device="cuda")
        buf[..., :shape[-1]] = x
        x = buf[..., :shape[-1]]
    return x


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (5, 4096), (300, 7168), (2, 3, 272), (3, 20480)])
@pytest.mark.parametrize("padded", [False, True])
def test_int8_per_token_bit_equal(shape, dtype, padded):
    x = _x(shape, dtype, padded, specials=shape[-2] > 2)
    q, s = per_token_quant_int8(x)
    rq, rs = quantize_int8_rowwise(x)
    assert q.shape == x.shape and s.shape == x.shape[:-1]
    assert torch.equal(s, rs), f"scale differs: {(s - rs).abs().max().item()}"
    assert torch.equal(q, rq), f"{int((q != rq).sum())} codes differ"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 128), (5, 4096), (300, 7168), (2, 3, 256), (129, 16384)])
@pytest.mark.parametrize("padded", [False, True])
def test_fp8_per_token_group_bit_equal(shape, dtype, padded):
    x = _x(shape, dtype, padded, specials=shape[-2] > 2)
    q, s = per_token_group_quant_fp8(x)
    m = x.numel() // x.shape[-1]
    rq, rs = quantize_fp8_per_token_group(x.reshape(m, -1))
    assert q.shape == x.shape and s.shape == (*x.shape[:-1], x.shape[-1] // 128)
    s2 = s.reshape(m, -1)
    # MN-major with a TMA-aligned column stride (a dimension of extent 1 may carry any stride)
    assert (m == 1 or s2.stride(0) == 1) and (s2.shape[1] == 1 or s2.stride(1) == -(-m // 4) * 4), s2.stride()
    assert torch.equal(s2, rs), f"scale differs: {(s2 - rs).abs().max().item()}"
    assert torch.equal(q.reshape(m, -1).view(torch.uint8), rq.view(torch.uint8))


def _assert_fp8_rows_equal(got, ref):
    (q, s), (rq, rs) = got, ref
    assert q.shape == rq.shape and s.shape == rs.shape and q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    assert torch.equal(s, rs), f"scale differs in {int((s != rs).sum())} rows: {(s - rs).abs().max().item()}"
    codes, ref_codes = q.view(torch.uint8), rq.view(torch.uint8)
    assert torch.equal(codes, ref_codes), f"{int((codes != ref_codes).sum())} codes differ"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (5, 4096), (300, 7168), (2, 3, 272), (3, 20480), (299, 48)])
@pytest.mark.parametrize("padded", [False, True])
def test_fp8_per_token_bit_equal(shape, dtype, padded):
    x = _x(shape, dtype, padded, specials=shape[-2] > 2)
    got = per_token_quant_fp8(x)
    assert got[0].shape == x.shape and got[1].shape == x.shape[:-1]
    _assert_fp8_rows_equal(got, quantize_fp8_rowwise(x))
    _assert_fp8_rows_equal([t.cpu() for t in got], quantize_fp8_rowwise(x.cpu()))  # CPU torch agrees too


@pytest.mark.parametrize("kind", ["every_other_row", "transposed", "misaligned"])
def test_fp8_per_token_strided_x(kind):
    x = _layout(_x((45, 1024), torch.bfloat16), kind)
    _assert_fp8_rows_equal(per_token_quant_fp8(x), quantize_fp8_rowwise(x))


def test_fp8_per_token_eligible_inputs_run_the_kernel(monkeypatch):
    """The bit-equality tests would pass vacuously if eligible inputs fell back to the reference; ineligible ones
    (fp32 x, K not a multiple of 16) take it."""
    import cute_kernels.quantize as quantize

    x_fp32, x_k40 = torch.randn(7, 256, device="cuda"), torch.randn(7, 40, device="cuda", dtype=torch.float16)
    refs = [quantize_fp8_rowwise(x) for x in (x_fp32, x_k40)]
    for x, ref in zip((x_fp32, x_k40), refs):
        _assert_fp8_rows_equal(per_token_quant_fp8(x), ref)

    def no_reference(*args, **kwargs):
        raise AssertionError("the torch reference ran for a kernel-eligible input")

    monkeypatch.setattr(quantize, "quantize_fp8_rowwise", no_reference)
    for dtype in (torch.float16, torch.bfloat16):
        q, s = per_token_quant_fp8(torch.randn(3, 64, device="cuda", dtype=dtype))
        assert q.shape == (3, 64) and s.shape == (3,)


def test_fp8_per_token_torch_op():
    x = _x((3, 3, 256), torch.float16)
    ops = torch.ops.cute_kernels
    _assert_fp8_rows_equal(ops.per_token_quant_fp8(x), quantize_fp8_rowwise(x))
    torch.library.opcheck(ops.per_token_quant_fp8.default, (x,))


@pytest.mark.parametrize("m", [1, 77, 256])
def test_fp8_per_token_quantizer_feeds_fp8_scaled_mm(m):
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    w, ws = quantize_fp8_rowwise(torch.randn(520, 1024, device="cuda"))
    a, a_s = per_token_quant_fp8(x)
    out = torch.full((m, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    fp8_scaled_mm(a, w.t(), a_s, ws, out=out)
    ref = int8_scaled_mm_ref(a, w.t(), a_s, ws)
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_non_finite_rows_give_non_finite_scales():
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    x[1, 7] = float("nan")
    x[2, 9] = float("inf")
    for s in (per_token_quant_int8(x)[1], per_token_group_quant_fp8(x)[1][:, 0], per_token_quant_fp8(x)[1]):
        assert s[1].isnan() and not s[2].isfinite() and s[[0, 3]].isfinite().all()


@pytest.mark.parametrize("m", [1, 77, 256])
def test_fp8_quantizer_feeds_the_gemm(m):
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    w, ws = quantize_fp8_blockwise(torch.randn(520, 1024, device="cuda"), 128)
    a, a_s = per_token_group_quant_fp8(x)
    out = torch.full((m, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    fp8_blockwise_scaled_mm(a, w, a_s, ws, out=out)
    ref = fp8_blockwise_scaled_mm_ref(a, w, a_s, ws, (1, 128, 128))
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


# ------------------------------------------------------------------------------------- asymmetric (zero point) int8
def _asym_rows(m, k, dtype, seed=0):
    """[m, k] rows of every kind the zero point meets: mixed sign, one-signed (far from 0, post-ReLU), outliers,
    constants (positive, negative, zero, below eps), two-valued rows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g) * 3
    big = 60000.0 if dtype == torch.float16 else 1e30
    specials = [
        lambda r: r.abs() + 100,  # one-signed, far from 0: a large negative zero point
        lambda r: -r.abs() - 7,  # a large positive zero point
        torch.relu,
        lambda r: r.index_fill(0, torch.tensor([k // 3], device="cuda"), big),  # one huge outlier
        lambda r: r.index_fill(0, torch.tensor([k - 1], device="cuda"), -big),
        lambda r: 1000.0 + r.abs() * 0.01,  # narrow spread relative to the magnitude
        lambda r: torch.full_like(r, 2.5),  # constants: range widened to reach 0
        lambda r: torch.full_like(r, -0.75),
        lambda r: torch.zeros_like(r),
        lambda r: torch.full_like(r, 3e-11),  # a constant below eps
        lambda r: torch.where(r > 0, 1.0, -1.0),
        lambda r: r * 1e-4,
    ]
    for i in range(min(m, len(specials))):
        x[(i * 7) % m] = specials[i](x[(i * 7) % m])
    return x.to(dtype)


def _layout(x, kind):
    """x with the same values in another memory layout (the kernel path's views and the _rows copies)."""
    m, k = x.shape
    if kind == "padded":  # rows 16 bytes (or more) longer than K: a row stride that is not K
        buf = torch.zeros(m, k + 24, dtype=x.dtype, device="cuda")
        buf[:, :k] = x
        return buf[:, :k]
    if kind == "every_other_row":
        buf = torch.zeros(2 * m, k, dtype=x.dtype, device="cuda")
        buf[::2] = x
        return buf[::2]
    if kind == "transposed":  # K not contiguous: copied first
        return x.t().contiguous().t()
    if kind == "misaligned":  # storage 2 bytes past a 16-byte boundary: cloned first
        buf = torch.zeros(m * k + 1, dtype=x.dtype, device="cuda")
        buf[1:] = x.reshape(-1)
        return buf[1:].view(m, k)
    return x


def _assert_asym_equal(got, ref):
    (q, s, a), (rq, rs, ra) = got, ref
    assert q.shape == rq.shape and s.shape == rs.shape == a.shape == ra.shape
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and a.dtype == torch.int32
    assert torch.equal(s, rs), f"scale differs in {int((s != rs).sum())} rows: {(s - rs).abs().max().item()}"
    assert torch.equal(a, ra), f"azp differs in {int((a != ra).sum())} rows: {(a - ra).abs().max().item()}"
    assert torch.equal(q, rq), f"{int((q != rq).sum())} codes differ, by up to {(q.int() - rq.int()).abs().max()}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,k", [(1, 16), (2, 32), (5, 48), (13, 272), (77, 1040), (128, 4096), (300, 7168),
                                 (300, 8192), (3, 20480), (1, 8192), (299, 16)])
def test_int8_asymmetric_bit_equal(m, k, dtype):
    x = _asym_rows(m, k, dtype, seed=m * 7 + k)
    got = per_token_quant_int8(x, symmetric=False)
    _assert_asym_equal(got, quantize_int8_rowwise_asymmetric(x))
    _assert_asym_equal([t.cpu() for t in got], quantize_int8_rowwise_asymmetric(x.cpu()))  # CPU torch agrees too


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(6))
def test_int8_asymmetric_bit_equal_random_shapes(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    for _ in range(5):
        m, k = int(torch.randint(1, 301, (1,), generator=g)), 16 * int(torch.randint(1, 513, (1,), generator=g))
        x = _asym_rows(m, k, dtype, seed=seed)
        _assert_asym_equal(per_token_quant_int8(x, symmetric=False), quantize_int8_rowwise_asymmetric(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["padded", "every_other_row", "transposed", "misaligned"])
def test_int8_asymmetric_strided_x(kind, dtype):
    x = _layout(_asym_rows(45, 1024, dtype, seed=3), kind)
    _assert_asym_equal(per_token_quant_int8(x, symmetric=False), quantize_int8_rowwise_asymmetric(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("lead", [(2, 3), (4, 1, 5)])
def test_int8_asymmetric_batch_dims(lead, dtype):
    m = 1
    for d in lead:
        m *= d
    x = _asym_rows(m * 11, 272, dtype, seed=m).reshape(*lead, 11, 272)
    q, s, a = per_token_quant_int8(x, symmetric=False)
    assert q.shape == x.shape and s.shape == a.shape == (*lead, 11)
    _assert_asym_equal((q, s, a), quantize_int8_rowwise_asymmetric(x))


def test_int8_asymmetric_constant_rows_follow_the_rule():
    """The kernel's constant rows (formats/int8.py): c > 0 -> (azp -128, codes 127), c < 0 -> (127, -128), 0 ->
    (-128, -128); a constant below eps has the scale eps / 255 and comes back within half of it; finite positive
    scales throughout."""
    c = torch.tensor([2.5, -0.75, 0.0, 65504.0, 3e-11, -3e-11, 1e-20], device="cuda")
    for dtype in (torch.float16, torch.bfloat16):
        x = c.to(dtype).unsqueeze(-1).expand(-1, 256).contiguous()
        q, s, a = per_token_quant_int8(x, symmetric=False)
        _assert_asym_equal((q, s, a), quantize_int8_rowwise_asymmetric(x))
        assert s.isfinite().all() and (s > 0).all()
        c_in = x[:, 0].float()
        big = c_in.abs() >= 1e-10
        assert torch.equal(a[big], torch.where(c_in < 0, 127, -128)[big].int())
        assert torch.equal(q[big, 0], torch.where(c_in > 0, 127, -128)[big].to(torch.int8))
        assert (q == q[:, :1]).all()  # one code per constant row
        back = (q[:, 0].long() - a.long()).float() * s
        assert ((back - c_in).abs() <= s * 0.5 + c_in.abs() * 2.0 ** -21).all()
        assert back[c_in == 0].eq(0).all()


def test_int8_asymmetric_non_finite_rows():
    x = _asym_rows(6, 512, torch.bfloat16)
    x[1, 7] = float("nan")
    x[2, 9] = float("inf")
    x[3, 11] = -float("inf")
    q, s, a = per_token_quant_int8(x, symmetric=False)
    rq, rs, ra = quantize_int8_rowwise_asymmetric(x)
    assert s[1].isnan() and not s[2].isfinite() and not s[3].isfinite()
    assert torch.equal(a, ra)  # zero points are specified even here (saturating, NaN -> 0)
    finite = [0, 4, 5]
    _assert_asym_equal((q[finite], s[finite], a[finite]), (rq[finite], rs[finite], ra[finite]))


def test_int8_asymmetric_ineligible_inputs_take_the_reference():
    for x in (torch.randn(7, 256, device="cuda"), torch.randn(7, 40, device="cuda", dtype=torch.float16)):
        _assert_asym_equal(per_token_quant_int8(x, symmetric=False), quantize_int8_rowwise_asymmetric(x))


def test_int8_asymmetric_round_trip():
    x = _asym_rows(64, 4096, torch.bfloat16)
    q, s, a = per_token_quant_int8(x, symmetric=False)
    back = (q.long() - a.long().unsqueeze(-1)).float() * s.unsqueeze(-1)
    x32 = x.float()
    err = (back - x32).abs()
    assert (err <= s.unsqueeze(-1) * 0.5 * (1 + 2.0 ** -16) + x32.abs() * 2.0 ** -20).all()


def test_int8_asymmetric_torch_op():
    x = _asym_rows(9, 256, torch.float16).view(3, 3, 256)
    ops = torch.ops.cute_kernels
    _assert_asym_equal(ops.per_token_quant_int8_azp(x), quantize_int8_rowwise_asymmetric(x))
    torch.library.opcheck(ops.per_token_quant_int8_azp.default, (x,))
    f = torch.compile(lambda t: ops.per_token_quant_int8_azp(t), fullgraph=True, backend="aot_eager")
    _assert_asym_equal(f(x), quantize_int8_rowwise_asymmetric(x))


def test_int8_asymmetric_eligible_inputs_run_the_kernel(monkeypatch):
    """The bit-equality tests above would pass vacuously if eligible inputs fell back to the reference."""
    import cute_kernels.quantize as quantize

    def no_reference(x):
        raise AssertionError("the torch reference ran for a kernel-eligible input")

    monkeypatch.setattr(quantize, "quantize_int8_rowwise_asymmetric", no_reference)
    for dtype in (torch.float16, torch.bfloat16):
        q, s, a = per_token_quant_int8(_asym_rows(3, 64, dtype), symmetric=False)
        assert q.shape == (3, 64) and s.shape == a.shape == (3,)
