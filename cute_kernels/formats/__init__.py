"""Host-side quantization formats (pure torch, any device): packing, quantizers and dequantizers.

* ``bitpack``       1/2/4/8-bit weight-only packed weights (uint8 [N, K*bits/8]).
* ``awq``           AutoAWQ GEMM int4 checkpoints (int32 qweight/qzeros, fp16/bf16 scales).
* ``fp8``           DeepSeek-style FP8 with per-token-group (1x128) and blockwise (128x128) scales, and by rows.
* ``int8``          int8 by rows (per-token activations, per-channel weights of int8_scaled_mm): symmetric, or
                    asymmetric with an int32 zero point per row (vLLM's asymmetric activations).
* ``scale_layouts`` the FP8 scale-factor layouts in CuTe notation.

Each module's docstring states its bit layout; docs/formats.md collects them with examples.
"""

from .awq import (awq_dequantize_reference, awq_pack, awq_quantize, awq_unpack, check_awq_tensors)
from .bitpack import (dequantize_weights, pack_weights, quantize_weights, unpack_weights)
from .fp8 import (dequantize_fp8_blockwise, dequantize_fp8_per_token_group, dequantize_fp8_rowwise,
                  quantize_fp8_blockwise, quantize_fp8_per_token_group, quantize_fp8_rowwise)
from .int8 import (dequantize_int8_rowwise_asymmetric, quantize_int8_rowwise,
                   quantize_int8_rowwise_asymmetric)
from .scale_layouts import (describe_scale_layouts, is_mn_major, make_scale_factor_layout, scale_factor_layout,
                            smem_atom_layout, to_mn_major, to_tma_aligned_mn_major)

__all__ = [
    "pack_weights", "unpack_weights", "quantize_weights", "dequantize_weights",
    "awq_pack", "awq_unpack", "awq_quantize", "awq_dequantize_reference", "check_awq_tensors",
    "quantize_fp8_per_token_group", "dequantize_fp8_per_token_group",
    "quantize_fp8_blockwise", "dequantize_fp8_blockwise", "quantize_fp8_rowwise", "dequantize_fp8_rowwise", "quantize_int8_rowwise",
    "quantize_int8_rowwise_asymmetric", "dequantize_int8_rowwise_asymmetric",
    "scale_factor_layout", "make_scale_factor_layout", "smem_atom_layout", "describe_scale_layouts",
    "to_mn_major", "to_tma_aligned_mn_major", "is_mn_major",
]
