"""A tiny TVM-FFI kernel for the compile-cache tests (compiles in well under a second after the first)."""

import sys

import cutlass
import cutlass.cute as cute

from cute_kernels import jit_cache
from cute_kernels.compile_utils import fake_stream


@cute.kernel
def _scale_kernel(x: cute.Tensor, alpha: cutlass.Float32):
    i, _, _ = cute.arch.thread_idx()
    if i < cute.size(x):
        x[i] = x[i] * alpha


@cute.jit
def _scale(x: cute.Tensor, alpha: cutlass.Float32, stream):
    _scale_kernel(x, alpha).launch(grid=[1, 1, 1], block=[128, 1, 1], stream=stream)


def build():
    x = cute.runtime.make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), stride=(1,), assumed_align=4)
    return cute.compile(_scale, x, cutlass.Float32(1.0), fake_stream(), options="--enable-tvm-ffi --gpu-arch sm_90a")


def get(tag="probe"):
    return jit_cache.cached_compile("cache_probe", (tag,), build)


if __name__ == "__main__":
    get(sys.argv[1] if len(sys.argv) > 1 else "probe")
    s = jit_cache.stats
    print(jit_cache.entry_dir())
    print(f"compiles={s.compiles} disk_hits={s.disk_hits} memory_hits={s.memory_hits} corrupt={s.corrupt_entries}")
