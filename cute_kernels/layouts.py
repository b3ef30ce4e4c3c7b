"""Readable printouts of the CuTe layouts a kernel config uses (for ``python -m cute_kernels layout``).

The layouts are built by the kernel's own setup code, traced in a throw-away ``@cute.jit`` with static shapes, so
what is printed is exactly what the kernel compiles with (no GPU needed).
"""

from __future__ import annotations

import io

from .configs import TileConfig


def sm90_gemm_layouts(config: TileConfig, a_dtype="Int8", out_dtype="BFloat16", swap_ab: bool | None = None) -> str:
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import cpasync
    from cutlass.tensor_utils import LayoutEnum

    from .epilogues import scaled_mm_tree
    from .sm90.gemm import Sm90GemmKernel

    ab_t, d_t = getattr(cutlass, a_dtype), getattr(cutlass, out_dtype)
    acc_t = cutlass.Int32 if ab_t.is_integer else cutlass.Float32
    kernel = Sm90GemmKernel(config, scaled_mm_tree("vector", "vector", True), acc_t)
    d_layout = LayoutEnum.COL_MAJOR if config.swap_ab else LayoutEnum.ROW_MAJOR
    buf = io.StringIO()

    @cute.jit
    def trace():
        kernel._setup(ab_t, ab_t, d_t, LayoutEnum.ROW_MAJOR, LayoutEnum.ROW_MAJOR, d_layout)
        bm, bn, bk = kernel.tile_mnk
        # A 4096^3 problem stands in for the real (dynamic) one: the TMA box does not depend on it.
        mA = cute.make_tensor(cute.make_ptr(ab_t, 0, cute.AddressSpace.gmem, assumed_align=16),
                              cute.make_layout((4096, 4096, 1), stride=(4096, 1, 0)))
        _, tA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mA,
                                            cute.slice_(kernel.sA_layout, (None, None, 0)), (bm, bk))
        print(f"config            : {config.describe()}", file=buf)
        print(f"CTA tile (M,N,K)  : {kernel.tile_mnk}   (K-tile = 4 WGMMA k-blocks)", file=buf)
        print(f"tiled MMA         : {kernel.tiled_mma.shape_mnk} over {kernel.num_mma_wg} consumer warpgroup(s); "
              f"atom layout {kernel.atom_layout_mnk}", file=buf)
        print(f"pipeline stages   : {kernel.ab_stages} (A+B per stage: "
              f"{(bm + bn) * bk * ab_t.width // 8} B), epilogue stages {kernel.epi_stages}", file=buf)
        print(f"smem A (staged)   : {kernel.sA_layout}", file=buf)
        print(f"smem B (staged)   : {kernel.sB_layout}", file=buf)
        print(f"TMA box A / B     : ({bm}, {bk}) / ({bn}, {bk}) elements; multicast A x{kernel.mcast_a}, "
              f"B x{kernel.mcast_b}", file=buf)
        print(f"TMA A coord view  : {tA.layout}", file=buf)
        print(f"epilogue tile     : {kernel.epi_tile}", file=buf)
        print(f"smem D (staged)   : {kernel.sD_layout}", file=buf)

    # The layouts are SM90's: trace for sm_90a whatever this machine has (without the option the DSL traces for
    # its import-time default, sm_100a on a machine without a GPU, and refuses the SM90 MMA atoms).
    cute.compile(trace, options="--gpu-arch sm_90a")
    return buf.getvalue()
