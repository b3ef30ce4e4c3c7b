"""CPU tier: the activation quantizers (cute_kernels/quantize): the torch fallback on CPU tensors (values and the FP8
scale's TMA-aligned layout), and the kernel's SASS for sm_90a (F2FP e4m3 / F2I int8, no local memory) and sm_80."""

import pytest
import torch

from cute_kernels import per_token_group_quant_fp8, per_token_quant_int8
from cute_kernels.formats.fp8 import quantize_fp8_per_token_group
from cute_kernels.formats.int8 import quantize_int8_rowwise


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


@pytest.mark.parametrize("arch,fp8", [("sm_90a", False), ("sm_90a", True), ("sm_80", False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel_sass(arch, fp8, dtype):
    from cute_kernels.quantize import build
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(lambda o: build(dtype, fp8, arch, o)).artifacts.CUBIN)
    assert not s.spills and s.local_memory_ops == 0
    if fp8:
        assert "F2FP.SATFINITE.E4M3.F32" in s.text
    else:
        assert s.instructions["F2I"] >= 16  # 16 codes per thread and pass
    assert "MUFU.RCP" in s.text and "FCHK" in s.text  # div.rn's IEEE path, not an approximate division
    assert s.text.count("LDG.E.128") >= 2  # the 16-byte loads
