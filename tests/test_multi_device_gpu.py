"""GPU tier, two or more GPUs in one process: every op on tensors of a GPU that is not the current device.

A model split across GPUs in one process (``device_map="auto"``, pipeline stages) calls a layer's op while another GPU
is current. Each op must run on its operands' GPU and return a result there, equal to the float64 reference, and
leave the current device as it was. (No device switch in our code: the compiled functions launch on the operands'
device themselves. Session 35 tried a switch and ran this test without it on 2 x H100: passed either way.)
"""

import pytest
import torch

from cute_kernels import (awq_dequantize, awq_gemm, dequantize_weights, fp8_blockwise_scaled_mm, int8_scaled_mm,
                          quantized_mm)
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.reference import awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref, quantized_mm_ref
from tests.conftest import int8_gemm_inputs

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs 2 or more CUDA GPUs in one process")]


def _rel_err(out, ref):
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _ops(dev, m):
    """(name, call, float64 reference, tolerance) on tensors of ``dev``."""
    a8, b8, sa, sb, _ = int8_gemm_inputs(m, 1032, 512, bias=False, seed=m, device=dev)
    g = torch.Generator(device=dev).manual_seed(m)
    x = torch.randn(m, 512, device=dev, generator=g)
    af, af_s = quantize_fp8_per_token_group(x, 128)
    bf, bf_s = quantize_fp8_blockwise(torch.randn(1032, 512, device=dev, generator=g), 128)
    af_s, bf_s = to_mn_major(af_s), to_mn_major(bf_s)
    xh = x.half()
    wq, scale, gs = quantize_weights(torch.randn(1032, 512, device=dev, generator=g), 4, 128)
    qweight, qzeros, scales = awq_quantize(torch.randn(512, 1032, device=dev, generator=g), 128)
    return [
        ("int8_scaled_mm", lambda: int8_scaled_mm(a8, b8, sa, sb), lambda: int8_scaled_mm_ref(a8, b8, sa, sb),
         2 ** -7),
        ("fp8_blockwise_scaled_mm", lambda: fp8_blockwise_scaled_mm(af, bf, af_s, bf_s),
         lambda: fp8_blockwise_scaled_mm_ref(af, bf, af_s, bf_s, (1, 128, 128)), 1e-2),
        ("quantized_mm", lambda: quantized_mm(xh, wq, scale, 4, gs), lambda: quantized_mm_ref(xh, wq, scale, 4, gs),
         2e-3),
        ("awq_gemm", lambda: awq_gemm(xh, qweight, scales, qzeros), lambda: awq_gemm_ref(xh, qweight, scales, qzeros),
         2e-3),
        ("awq_dequantize", lambda: awq_dequantize(qweight, scales, qzeros),
         lambda: awq_gemm_ref(torch.eye(512, device=dev, dtype=torch.float64), qweight, scales, qzeros), 1e-3),
        ("dequantize_weights", lambda: dequantize_weights(wq, 4, 512, gs),
         lambda: quantized_mm_ref(torch.eye(512, device=dev, dtype=torch.float64), wq, 1.0, 4, gs).t(), 4e-3),
    ]


@pytest.mark.parametrize("m", [1, 16, 300])  # decode, WGMMA / split-K, large-M paths
def test_ops_on_a_gpu_that_is_not_current(m):
    other = torch.device("cuda", torch.cuda.device_count() - 1)
    side = torch.cuda.Stream(device=other)
    for name, call, ref, tol in _ops(other, m):
        with torch.cuda.stream(side):  # the operands' GPU's current stream: a side stream (this makes it current)
            torch.cuda.set_device(0)  # GPU 0 current again; the other GPU keeps ``side`` as its current stream
            out = call()
            out2 = call()  # the warm path too
            assert torch.cuda.current_device() == 0, f"{name} left another device current"
        side.synchronize()
        for o in (out, out2):
            assert o.device == other, f"{name}: result on {o.device}"
            err = _rel_err(o, ref())
            assert err < tol, f"{name} M={m} on {other} with cuda:0 current: error {err:.3e}"
