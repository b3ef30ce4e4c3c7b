"""What the in-kernel split-K fix-up costs the decode-size int8 GEMM, session 13 (timing only).

int8 M = 1, N = K = 4096 runs 64 x 16 swapped tiles split 8 ways: 512 work tiles on 132 persistent CTAs, so each
CTA ends ~4 work tiles with ``Sm90GemmKernel.split_k_fixup`` (partial to the workspace, fence, semaphore atomic;
the last slice reads the others' stripes). The GEMM takes ~1.3x a bare read of its weight bytes
(int8_vs_read.py), ~2.2 µs more. This swaps the fix-up for other versions:
  fences    the fix-up before session 13: a GPU-scope fence by every thread after its stores and again before the
            last slice's loads, plus the acq_rel atomic (three MEMBAR.ALL.GPU in a row on the path)
  shipped   the library's fix-up (session 13: barrier, one acq_rel atomic by one thread, barrier: one MEMBAR)
  nofence   the same stores / atomic / reads with a relaxed atomic and no fence (ordering not guaranteed)
  none      no memory traffic at all: slice 0 runs the epilogue on its own partial (wrong result)
  late_epi  only with epilogue_early_fetch.patch (the data archive's dropped/patches/) applied (session 13, not
            shipped: the epilogue's first operands loaded before the mainloop / fix-up): that patch's switch off,
            i.e. the shipped order
Results of the last two are not checked (they need not be right); fences and shipped are checked against float64.
FP8 blockwise (same base kernel, same fix-up) is timed too at three split rows (M = 1 and 64).
Run one variant per process (the JIT compiles the patched method; disk cache off):
``CUTE_KERNELS_DISK_CACHE=0 python benchmarks/experiments/int8_fixup_cost.py VARIANT`` prints one JSON line.
"""
import json
import sys

sys.path[:0] = ["benchmarks", "benchmarks/experiments"]
import cutlass
import cutlass.cute as cute
import torch

from cute_kernels.sm90.gemm import Sm90GemmKernel
from bench_fp8_blockwise import GROUPWISE, operands, ours, rel_err
from cute_kernels.bench import graph_time_us
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref
from int8_vs_read import gemm_us

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "shipped"


def make_fixup(fenced: bool):
    """The fix-up before session 13 (``fenced``: every thread fences after its stripe stores and again before the last
    slice's loads, around an acq_rel atomic), or the same stores / atomic / loads with a relaxed atomic and no fence
    (ordering not guaranteed: a timing bound only). The last slice adds the other stripes to its own partial for
    int32 and float32 alike (the library sums float stripes in slice order; the check's tolerance covers either)."""

    @cute.jit
    def fixup(self, acc, split, s_idx, tile_lin, mma_tidx, split_flag):
        ws, sem, num_splits = split
        frag = cute.size(acc)
        threads = self.num_mma_threads
        per_slice = threads * frag
        mine = (tile_lin * num_splits + s_idx) * per_slice + mma_tidx
        for i in cutlass.range_constexpr(frag):
            ws[mine + i * threads] = acc[i]
        if cutlass.const_expr(fenced):
            cute.arch.fence_acq_rel_gpu()
        self.epi_barrier.arrive_and_wait()
        if mma_tidx == 0:
            split_flag[0] = cute.arch.atomic_add(sem.iterator + tile_lin, cutlass.Int32(1),
                                                 sem="acq_rel" if fenced else "relaxed", scope="gpu")
        self.epi_barrier.arrive_and_wait()
        is_last = split_flag[0] == num_splits - 1
        if is_last:
            if cutlass.const_expr(fenced):
                cute.arch.fence_acq_rel_gpu()
            for other in range(num_splits):
                if other != s_idx:
                    self.add_stripe(acc, ws, (tile_lin * num_splits + other) * per_slice + mma_tidx, threads)
            if mma_tidx == 0:
                sem[tile_lin] = 0
        return is_last

    return fixup


@cute.jit
def fixup_none(self, acc, split, s_idx, tile_lin, mma_tidx, split_flag):
    return s_idx == 0


if VARIANT == "late_epi":  # with epilogue_early_fetch.patch (data archive) applied: that change switched off
    Sm90GemmKernel.prefetch_epilogue = False
elif VARIANT == "fences":
    Sm90GemmKernel.split_k_fixup = make_fixup(fenced=True)
elif VARIANT == "nofence":
    Sm90GemmKernel.split_k_fixup = make_fixup(fenced=False)
elif VARIANT == "none":
    Sm90GemmKernel.split_k_fixup = fixup_none

def fp8_us(m, n, k, check):
    sets = [operands(m, n, k, seed=s) for s in range(max(2, -(-200_000_000 // (n * k))))]
    calls = [ours(*ops) for ops in sets]
    if check:
        e = rel_err(calls[0](), fp8_blockwise_scaled_mm_ref(*sets[0], GROUPWISE))
        assert e < 1e-2, (m, n, k, e)
    return graph_time_us(calls)[0]


if __name__ == "__main__":
    rows = {}
    for m, n, k in [(1, 4096, 4096), (16, 4096, 4096), (1, 14336, 4096), (1, 4096, 14336)]:
        rows[f"{m}x{n}x{k}"] = gemm_us(m, n, k, check=VARIANT in ("shipped", "fences", "late_epi"))
    for m, n, k in [(1, 4096, 7168), (64, 4096, 7168), (1, 7168, 2048)]:
        rows[f"fp8 {m}x{n}x{k}"] = fp8_us(m, n, k, check=VARIANT in ("shipped", "fences", "late_epi"))
    print(json.dumps({"variant": VARIANT, "device": torch.cuda.get_device_name(), "us": rows}), flush=True)
