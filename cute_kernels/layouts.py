"""Readable printouts of the CuTe layouts a kernel config uses (for ``python -m cute_kernels layout``).

The layouts are built by the kernel's own setup code, traced in a throw-away ``@cute.jit`` with static shapes, so
what is printed is exactly what the kernel compiles with (no GPU needed).
"""

from __future__ import annotations

import io

from .configs import TileConfig


def _traced_for_sm90(body) -> str:
    """The lines ``body(line)`` prints (``line(label, text)``) while it runs inside a throw-away ``@cute.jit``."""
    import cutlass.cute as cute

    buf = io.StringIO()

    def line(label: str, text) -> None:
        print(f"{label:<18}: {text}", file=buf)

    @cute.jit
    def trace():
        body(line)

    # The layouts are SM90's: trace for sm_90a whatever this machine has (without the option the DSL traces for
    # its import-time default, sm_100a on a machine without a GPU, and refuses the SM90 MMA atoms).
    cute.compile(trace, options="--gpu-arch sm_90a")
    return buf.getvalue()


def _epilogue_lines(kernel, line) -> None:
    line("epilogue tile", kernel.epi_tile)
    line("smem D (staged)", kernel.sD_layout)


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

    def body(line):
        kernel._setup(ab_t, ab_t, d_t, LayoutEnum.ROW_MAJOR, LayoutEnum.ROW_MAJOR, d_layout)
        bm, bn, bk = kernel.tile_mnk
        # A 4096^3 problem stands in for the real (dynamic) one: the TMA box does not depend on it.
        mA = cute.make_tensor(cute.make_ptr(ab_t, 0, cute.AddressSpace.gmem, assumed_align=16),
                              cute.make_layout((4096, 4096, 1), stride=(4096, 1, 0)))
        _, tA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mA,
                                            cute.slice_(kernel.sA_layout, (None, None, 0)), (bm, bk))
        line("config", config.describe())
        line("CTA tile (M,N,K)", f"{kernel.tile_mnk}   (K-tile = 4 WGMMA k-blocks)")
        line("tiled MMA", f"{kernel.tiled_mma.shape_mnk} over {kernel.num_mma_wg} consumer warpgroup(s); atom layout "
                          f"{kernel.atom_layout_mnk}")
        line("pipeline stages", f"{kernel.ab_stages} (A+B per stage: {(bm + bn) * bk * ab_t.width // 8} B), epilogue "
                                f"stages {kernel.epi_stages}")
        line("smem A (staged)", kernel.sA_layout)
        line("smem B (staged)", kernel.sB_layout)
        line("TMA box A / B", f"({bm}, {bk}) / ({bn}, {bk}) elements; multicast A x{kernel.mcast_a}, "
                              f"B x{kernel.mcast_b}")
        line("TMA A coord view", tA.layout)
        _epilogue_lines(kernel, line)

    return _traced_for_sm90(body)


def weight_only_wgmma_layouts(fmt_key: str, scaled: bool, group: int, config: TileConfig,
                              x_dtype: str = "BFloat16", options: tuple = ()) -> str:
    """The layouts of the weight-only WGMMA kernel (``sm90/weight_only_wgmma.py``) for one format and config: the
    staged blob of packed codes (A: read by the threads into registers, so unswizzled), x (B), the group parameters'
    decode-context words and the epilogue; ``group`` is only read when ``scaled`` or for AWQ."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.tensor_utils import LayoutEnum

    from .epilogues import Accumulator, EpilogueTree
    from .sm90.weight_only_wgmma import WeightOnlyWgmmaSm90
    from .weight_only.formats import format_by_key

    fmt = format_by_key(fmt_key)
    xt = getattr(cutlass, x_dtype)
    kernel = WeightOnlyWgmmaSm90(config, EpilogueTree(Accumulator()), fmt, group, scaled or fmt.has_zeros,
                                 **dict(options))  # options: the host's ``wgmma.stage_options`` for the problem

    def view(dtype, shape, stride):  # the host's kernel views (weight_only/wgmma.py build), on a stand-in problem
        return cute.make_tensor(cute.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=16),
                                cute.make_layout(shape, stride=stride))

    def body(line):
        blob = view(cutlass.Int64, (64, 4096, 1), (4096, 1, 0))  # (row blocks, int64 words, L)
        x = view(xt, (4096, 4096, 1), (4096, 1, 0))  # (M, K, L)
        out_t = view(xt, (4096, 4096, 1), (1, 4096, 0))  # out^T: (N, M, L), N contiguous
        kernel._setup(cutlass.Int64, xt, xt, LayoutEnum.from_tensor(blob), LayoutEnum.from_tensor(x),
                      LayoutEnum.from_tensor(out_t))
        bm, bn, bk = kernel.tile_mnk
        line("kernel", f"WeightOnlyWgmmaSm90, format {fmt.name} ({fmt.bits}-bit), x {x_dtype}")
        line("config", config.describe())
        line("CTA tile", f"{bm} weight rows x {bn} tokens x {bk} K per stage ({kernel.kps} K-tile(s) of 64)")
        line("tiled MMA", f"{kernel.tiled_mma.shape_mnk} over {kernel.num_mma_wg} consumer warpgroup(s), A from "
                          f"registers (decoded), {kernel.a_buffers} A fragments")
        line("pipeline stages", f"{kernel.ab_stages} (per stage: codes {kernel.a_stage_bytes()} B, x "
                                f"{bn * bk * xt.width // 8} B, group parameters {kernel.stage_extra_bytes} B), "
                                f"epilogue stages {kernel.epi_stages}")
        line("shared memory", f"{kernel.shared_storage.size_in_bytes()} B (of {kernel.smem_bytes}"
                              + (f": {config.ctas_per_sm} CTAs per SM" if config.ctas_per_sm > 1 else "") + ")")
        line("registers", f"producer {kernel.producer_regs}, consumers {kernel.consumer_regs} per thread (setmaxnreg)")
        line("smem A (codes)", kernel.sA_layout)
        words = kernel.a_tile[1]
        split_a = f"; issued as {kernel.a_tile[0] * -(-words // 256)} boxes of (1, 256)" if words > 256 else ""
        line("TMA tile A", f"{kernel.a_tile} (64-row blocks, int64 words of one block's K-tiles{split_a})")
        line("smem B (x)", kernel.sB_layout)
        boxes_b = bk * xt.width // 8 // 128  # 128-byte swizzled rows: one TMA box per 128 bytes of K
        line("TMA tile B", f"({bn}, {bk}) elements" + (f" as {boxes_b} boxes of ({bn}, {bk // boxes_b})"
                                                        if boxes_b > 1 else ""))
        if kernel.groups_per_tile:
            line("group parameters", f"{kernel.words_per_group} int32 decode-context word(s) per (row, group of "
                                     f"{group}); TMA box {kernel.param_box()} of the [groups * W, N] words")
            line("smem parameters", kernel.param_stage_layout())
        _epilogue_lines(kernel, line)

    return _traced_for_sm90(body)
