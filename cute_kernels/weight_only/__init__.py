"""Weight-only low-bit GEMMs: the 1/2/4/8-bit ``quantized_mm`` (seed 002) and AWQ (seed 003) on one kernel template.

* ``kernel.py``      the template (WeightOnlyGemm): decode in registers, mma.sync, fp32 accumulation
* ``formats.py``     weight formats as compile-time plug-ins (int8/int4/int2/int1, AWQ)
* ``activations.py`` activation fragments (fp16/bf16, fp32 as two bf16 terms)
* ``config.py``      tile shapes and the M dispatch (decode / tensor-core tiles / dense)
* ``quantized_mm.py``, ``awq.py``  host ops (``dequantize_weights`` and the dense path live in quantized_mm.py);
  ``awq_repack.py`` the cached checkpoint repack
* ``dequantize_kernel.py``         the 1/2/4/8-bit dequantize kernel (dense path of quantized_mm)
* ``awq_dequantize_kernel.py``     the AWQ dequantize kernel
"""

from .awq import awq_dequantize, awq_gemm, awq_linear
from .quantized_mm import dequantize_weights, quantized_mm

__all__ = ["quantized_mm", "dequantize_weights", "awq_gemm", "awq_dequantize", "awq_linear"]
