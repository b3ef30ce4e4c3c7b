"""cute_kernels: quantized GEMM kernels written in CUTLASS's CuTe DSL, JIT-compiled and cached per shape class.

Public functions only; each lives in its own module under ``cute_kernels.ops`` (host side) with its kernels under
``sm90/``, ``sm80/``, ``weight_only/`` and ``distributed/``. The same ops are registered as torch custom ops
(``torch.ops.cute_kernels.*``, ``torch_ops.py``) for code that runs under torch.compile or torch.export, and
wrapped as ``nn.Module`` layers holding quantized weights (``cute_kernels.nn``).
"""

from .configs import TileConfig
from .ops.fp8_blockwise_grouped_mm import fp8_blockwise_grouped_mm, fp8_blockwise_grouped_mm_contiguous
from .ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm
from .ops.int8_scaled_mm import fp8_scaled_mm, int8_scaled_mm
from .quantize import per_token_group_quant_fp8, per_token_quant_fp8, per_token_quant_int8, per_token_quant_int8_azp
from .weight_only import (awq_blob, awq_blob_linear, awq_blob_to_qweight, awq_dequantize, awq_gemm, awq_linear,
                          clear_weight_caches, dequantize_weights, quantized_mm)
from . import torch_ops  # noqa: F401 - registers torch.ops.cute_kernels.* (torch.compile / torch.export)
from . import nn  # noqa: F401 - linear layers over the ops (AwqLinear, QuantizedLinear, Int8Linear, Fp8Linear,
#                                            Fp8RowwiseLinear)

__version__ = "0.1.0"

__all__ = [
    "TileConfig",
    "awq_blob",
    "awq_blob_linear",
    "awq_blob_to_qweight",
    "awq_dequantize",
    "awq_gemm",
    "awq_linear",
    "clear_weight_caches",
    "dequantize_weights",
    "fp8_blockwise_grouped_mm",
    "fp8_blockwise_grouped_mm_contiguous",
    "fp8_blockwise_scaled_mm",
    "fp8_scaled_mm",
    "int8_scaled_mm",
    "per_token_group_quant_fp8",
    "per_token_quant_fp8",
    "per_token_quant_int8",
    "per_token_quant_int8_azp",
    "quantized_mm",
    "__version__",
]
