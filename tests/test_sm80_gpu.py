"""GPU tier of the SM80-class int8 GEMM, run on an H100/H200 by forcing the SM80 kernel (arch='sm_80' / 'sm_86').

Every result is compared against the float64 reference on fresh random int8 data with NaN-poisoned outputs; split-K
results must equal the unsplit ones bit for bit (int32 partial sums are exact, so the split cannot change them).
"""

import pytest
import torch

from cute_kernels.reference import int8_scaled_mm_ref
from cute_kernels.sm80 import all_configs, run_int8_scaled_mm_sm80
from cute_kernels.sm80.split_k import WORKSPACE
from tests.conftest import int8_gemm_inputs, poisoned

pytestmark = pytest.mark.gpu


def _run(m, n, k, *, batch=None, a_kind="vector", b_kind="vector", bias=True, out_dtype=torch.bfloat16,
         arch="sm_80", config=None, split_k=None, seed=0):
    a, b, a_s, b_s, bias_t = int8_gemm_inputs(m, n, k, batch, a_kind, b_kind, bias, out_dtype, seed)
    out = poisoned((*a.shape[:-1], n), out_dtype)
    run_int8_scaled_mm_sm80(a, b, a_s, b_s, bias_t, out, arch=arch, config=config, split_k=split_k)
    torch.cuda.synchronize()
    _check(out, a, b, a_s, b_s, bias_t)
    return out


def _check(out, a, b, a_scale, b_scale, bias):
    ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
    assert out.shape == ref.shape
    assert not torch.isnan(out).any(), "kernel left elements unwritten (NaN poison survived)"
    # Allowed: fp32 epilogue arithmetic and one rounding to the output type.
    rel = 2 ** -7 if out.dtype == torch.bfloat16 else 2 ** -10
    err = (out.double() - ref).abs()
    bad = err > rel * ref.abs() + 1e-2
    assert not bad.any(), (f"{int(bad.sum())} wrong elements, first at {bad.nonzero()[0].tolist()}; max err "
                           f"{err.max().item():.4g}, max |ref| {ref.abs().max().item():.4g}")


# (M, N, K, out dtype): tails in every dimension and every M/N bucket of the sm_80 table.
SHAPES = [
    (1, 8, 16, torch.float16),          # 16x64x128 tile, everything ragged
    (16, 4096, 4096, torch.bfloat16),   # decode bucket, split-K by the heuristic
    (1, 14336, 4096, torch.bfloat16),
    (17, 136, 272, torch.float16),      # 32-row bucket
    (40, 4096, 2048, torch.bfloat16),   # 64x128x128
    (50, 1000, 2000, torch.bfloat16),   # 64x64x128
    (100, 4104, 528, torch.bfloat16),   # 128x128x64, N tail
    (300, 4096, 1024, torch.bfloat16),  # 128x256x64, 8 warps
    (4097, 264, 1040, torch.bfloat16),  # M tail over many tiles
]


@pytest.mark.parametrize("m,n,k,out_dtype", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k, _ in SHAPES])
def test_shapes(m, n, k, out_dtype):
    _run(m, n, k, out_dtype=out_dtype, seed=m + n + k)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_every_config_plain_and_split(arch):
    # sm_86 and sm_89 share one table; here its tiles run compiled for the H100.
    for cfg in all_configs(arch):
        plain = _run(333, 776, 1040, arch=arch, config=cfg, split_k=1, seed=cfg.tile_m)
        split = _run(333, 776, 1040, arch=arch, config=cfg, split_k=3, seed=cfg.tile_m)
        assert torch.equal(plain, split), cfg.name


@pytest.mark.parametrize("a_kind,b_kind,bias,out_dtype", [
    ("vector", "vector", True, torch.float16),
    ("scalar", "scalar", False, torch.bfloat16),
    ("vector", "scalar", True, torch.bfloat16),
    ("scalar", "vector", False, torch.float16),
])
def test_epilogue_variants(a_kind, b_kind, bias, out_dtype):
    for m in (5, 700):
        _run(m, 520, 384, a_kind=a_kind, b_kind=b_kind, bias=bias, out_dtype=out_dtype, seed=m)


def test_batched_with_and_without_split():
    _run(33, 72, 96, batch=3, seed=1)
    plain = _run(17, 200, 4112, batch=2, split_k=1, seed=2)
    split = _run(17, 200, 4112, batch=2, split_k=5, seed=2)
    assert torch.equal(plain, split)


def test_split_k_on_off_agree_and_workspace_stays_zero():
    m, n, k = 16, 4096, 14336
    for seed in range(2):  # the second round reuses the workspace the first one must have re-zeroed
        outs = [_run(m, n, k, split_k=s, seed=seed) for s in (1, None, 3, 16)]
        for o in outs[1:]:
            assert torch.equal(outs[0], o)
    torch.cuda.synchronize()
    for buf in WORKSPACE.scratch.buffers():
        assert not buf.any(), "split-K left partial sums or arrivals behind"


def test_side_stream():
    a, b, a_s, b_s, bias = int8_gemm_inputs(16, 2048, 4096, seed=5)
    out = poisoned((16, 2048), torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run_int8_scaled_mm_sm80(a, b, a_s, b_s, bias, out, split_k=4)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    _check(out, a, b, a_s, b_s, bias)


def test_public_op_forces_sm80_kernel():
    from cute_kernels import int8_scaled_mm

    a, b, a_s, b_s, bias = int8_gemm_inputs(77, 1032, 528, seed=9)
    out = int8_scaled_mm(a, b, a_s, b_s, bias, arch="sm80")
    torch.cuda.synchronize()
    _check(out, a, b, a_s, b_s, bias)
