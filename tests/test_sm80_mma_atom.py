"""The custom int8 warp MMA atom (cute_kernels/sm80/mma_int8.py): signed PTX on CPU, exact int32 math on a GPU.

A single warp computes one 16x8x32 tile: C[m, n] = sum_k A[m, k] * B[n, k] (both operands K-major), loaded from
gmem straight into the MMA fragments, so the test pins the atom itself and not the GEMM around it.
"""

import pytest
import torch

import cutlass
import cutlass.cute as cute

from cute_kernels.sm80.mma_int8 import MMA_SHAPE_MNK, MmaInt8Op

M, N, K = MMA_SHAPE_MNK


@cute.kernel
def _one_tile_kernel(tiled_mma: cute.TiledMma, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    thr = tiled_mma.get_slice(tidx)
    tCgA, tCgB, tCgC = thr.partition_A(mA), thr.partition_B(mB), thr.partition_C(mC)
    tCrA, tCrB = tiled_mma.make_fragment_A(tCgA), tiled_mma.make_fragment_B(tCgB)
    tCrC = tiled_mma.make_fragment_C(tCgC)
    cute.autovec_copy(tCgA, tCrA)
    cute.autovec_copy(tCgB, tCrB)
    tCrC.fill(0)
    cute.gemm(tiled_mma, tCrC, tCrA, tCrB, tCrC)
    cute.autovec_copy(tCrC, tCgC)


@cute.jit
def _one_tile(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, stream):
    _one_tile_kernel(cute.make_tiled_mma(MmaInt8Op()), mA, mB, mC).launch(grid=[1, 1, 1], block=[32, 1, 1],
                                                                          stream=stream)


def _compile(target: str, dump_dir=None):
    fake = cute.runtime.make_fake_tensor
    args = (
        fake(cutlass.Int8, (M, K), stride=(K, 1), assumed_align=16),
        fake(cutlass.Int8, (N, K), stride=(K, 1), assumed_align=16),
        fake(cutlass.Int32, (M, N), stride=(N, 1), assumed_align=16),
        cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True),
    )
    keep = f" --keep-ptx --dump-dir {dump_dir}" if dump_dir else ""  # without --dump-dir the PTX lands in the cwd
    return cute.compile(_one_tile, *args, options=f"--enable-tvm-ffi --gpu-arch {target}{keep}")


def test_atom_emits_signed_int8_mma_ptx(tmp_path):
    ptx = _compile("sm_80", tmp_path).artifacts.PTX
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx
    assert ".u8" not in ptx, "a signless/unsigned operand type would silently compute unsigned products"


def test_atom_rejects_non_8bit_types():
    with pytest.raises(TypeError, match="a_dtype must be cutlass.Int8 or cutlass.Uint8"):
        MmaInt8Op(a_dtype=cutlass.Float16)


@pytest.mark.gpu
def test_atom_matches_int32_matmul_on_gpu():
    major, minor = torch.cuda.get_device_capability()
    fn = _compile(f"sm_{major}{minor}" + ("a" if major >= 9 else ""))
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device="cuda", generator=g)
        b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda", generator=g)
        a[0, :] = -128  # the extremes: read as unsigned these would be +128
        b[0, :] = 127
        c = torch.full((M, N), -(2**31), dtype=torch.int32, device="cuda")
        fn(a, b, c)
        torch.cuda.synchronize()
        ref = a.cpu().long() @ b.cpu().long().t()  # exact; CUDA has no int64 matmul
        assert torch.equal(c.cpu().long(), ref)
