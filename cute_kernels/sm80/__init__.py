"""SM80-class (A100 / RTX 30 / A10 / A40 / RTX 40 / L40) int8 scaled_mm: cp.async + ldmatrix + mma.sync kernels.

Public to the library: ``run_int8_scaled_mm_sm80`` (called by ``int8_scaled_mm``), ``Sm80TileConfig`` and the
per-arch tables, ``choose_split_k``. Modules: mma_int8 (the int8 warp MMA atom), configs (tile tables), split_k
(decision + workspace), kernel (the CuTe DSL kernel), launch (compile cache + entry point).
"""

from cute_kernels.sm80.configs import SUPPORTED_ARCHS, Sm80TileConfig, all_configs, normalize_arch, select_config
from cute_kernels.sm80.launch import run_int8_scaled_mm_sm80
from cute_kernels.sm80.split_k import choose_split_k

__all__ = ["SUPPORTED_ARCHS", "Sm80TileConfig", "all_configs", "choose_split_k", "normalize_arch",
           "run_int8_scaled_mm_sm80", "select_config"]
