"""GPU tier: the activation quantizer kernels (cute_kernels/quantize) bit for bit against the torch references, on
shapes with one and many groups / passes, padded rows, leading dims, zero rows and non-finite rows; and the FP8
scale layout feeding fp8_blockwise_scaled_mm."""

import pytest
import torch

from cute_kernels import fp8_blockwise_scaled_mm, per_token_group_quant_fp8, per_token_quant_int8
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.int8 import quantize_int8_rowwise
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

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


def test_non_finite_rows_give_non_finite_scales():
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    x[1, 7] = float("nan")
    x[2, 9] = float("inf")
    for s in (per_token_quant_int8(x)[1], per_token_group_quant_fp8(x)[1][:, 0]):
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
