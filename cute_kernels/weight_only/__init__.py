"""Weight-only low-bit GEMMs: the 1/2/4/8-bit ``quantized_mm`` (seed 002) and AWQ (seed 003) on one kernel template.

* ``kernel.py``      the template (WeightOnlyGemm): decode in registers, mma.sync, fp32 accumulation
* ``formats.py``     weight formats as compile-time plug-ins (int8/int4/int2/int1, AWQ)
* ``activations.py`` activation fragments (fp16/bf16, fp32 as two bf16 terms)
* ``config.py``      tile shapes and the M dispatch (decode / tensor-core tiles / dense)
* ``quantized_mm.py``, ``awq.py``  host ops (``dequantize_weights`` and the dense path live in quantized_mm.py);
  ``awq_repack.py`` the cached checkpoint repack (mma.sync tiles), ``awq_sm90.py`` the SM90 blob both SM90 kernels read;
  ``awq_blob.py`` the ops on a blob the caller holds instead of qweight (``AwqLinear``'s ``"sm90_blob"`` layout)
* ``blob_decode.py``  the template's decode tiles reading that blob (BlobDecodeGemm)
* ``dequantize_kernel.py``         the 1/2/4/8-bit dequantize kernel (dense path of quantized_mm)
* ``awq_dequantize_kernel.py``     the AWQ dequantize kernel
"""

from .awq import awq_dequantize, awq_gemm, awq_linear
from .awq_blob import awq_blob, awq_blob_linear, awq_blob_to_qweight
from .quantized_mm import dequantize_weights, quantized_mm

__all__ = ["quantized_mm", "dequantize_weights", "awq_gemm", "awq_dequantize", "awq_linear", "awq_blob",
           "awq_blob_to_qweight", "awq_blob_linear", "clear_weight_caches"]


def clear_weight_caches() -> None:
    """Forget every layout derived from a weight (AWQ repacks, WGMMA code blobs, group-parameter words) and the call
    plans that point at them; the next call of each weight rebuilds them.

    Those layouts are cached per weight tensor and keyed on its storage and version counter, so an ordinary in-place
    update (``w.copy_(...)``, ``w[...] = ...``) rebuilds them by itself. Writes the version counter does not see -
    ``param.data.copy_(...)`` (weight loaders do this), an NCCL broadcast or a DLPack / IPC producer writing into the
    tensor - leave the cached layout stale: call this after them."""
    from . import awq_repack, awq_sm90, wgmma
    from .awq import _plans as awq_plans
    from .awq_blob import _plans as awq_blob_plans
    from .quantized_mm import _plans as quantized_mm_plans

    awq_repack.clear_cache()
    awq_sm90.clear_cache()
    wgmma.clear_cache()
    awq_plans.clear()
    awq_blob_plans.clear()
    quantized_mm_plans.clear()
