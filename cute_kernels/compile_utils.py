"""Fake (symbolic) tensors for compiling once per shape class, and trace-time views in the kernels' (X, Y, L) order.

Kernels are compiled from fake tensors whose extents are symbolic, so one compiled object serves every M, N, K, L.
The same SymInt object used in two tensors means "equal at run time"; TVM-FFI checks that, the dtypes, the
static unit strides and the declared divisibility/alignment on every call.
"""

from __future__ import annotations

import contextlib

import cutlass.cute as cute


def fake_tensor(dtype, shape, contiguous_dim: int | None = -1, stride_div: int = 1, align: int = 16):
    """A fake tensor of ``shape`` whose ``contiguous_dim`` has stride 1 and whose other strides are symbolic."""
    nd = len(shape)
    if contiguous_dim is not None and contiguous_dim < 0:
        contiguous_dim += nd
    stride = tuple(1 if i == contiguous_dim else cute.sym_int64(divisibility=stride_div) for i in range(nd))
    return cute.runtime.make_fake_tensor(dtype, shape, stride=stride, assumed_align=align)


def fake_vector(dtype, length, align: int = 4):
    return cute.runtime.make_fake_tensor(dtype, (length,), stride=(1,), assumed_align=align)


def fake_zero_points(zero_point, m, n) -> tuple:
    """(azp_adj [N], azp [M]) int32 fake tensors of a ``ZERO_POINT_KINDS`` variant, None where it reads neither."""
    import cutlass

    adj = fake_vector(cutlass.Int32, n, align=4) if zero_point else None
    return adj, fake_vector(cutlass.Int32, m, align=4) if zero_point == "token" else None


def fake_stream():
    """The kernel launches on the caller's current stream (TVM-FFI's environment stream)."""
    return cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)


def kernel_view(t: cute.Tensor, x_mode: int, y_mode: int) -> cute.Tensor:
    """View a 2-D (rank 2) or batched (rank 3, batch first) tensor as (X, Y, L) with the given source modes.

    ``x_mode``/``y_mode`` index the matrix modes (0 or 1, not counting the batch). A 2-D tensor gets a unit batch
    mode with stride 0.
    """
    if cute.rank(t.layout) == 2:
        shape, stride = t.layout.shape, t.layout.stride
        layout = cute.make_layout((shape[x_mode], shape[y_mode], 1), stride=(stride[x_mode], stride[y_mode], 0))
    else:
        layout = cute.select(t.layout, mode=[x_mode + 1, y_mode + 1, 0])
    return cute.make_tensor(t.iterator, layout)


@contextlib.contextmanager
def target_smem_per_sm(arch: str):
    """Compile for ``arch`` on a machine without a CUDA driver (CI, ``export``): a kernel that declares
    ``min_blocks_per_mp > 1`` makes the DSL read the device's shared memory per SM from the driver at compile time
    (it attaches it to the kernel); here it is given the target arch's instead (``sm80.configs.SMEM_PER_SM``, H100 /
    H200 for sm_90a), the value the driver reports on such a GPU. With a GPU present nothing changes."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    from cutlass.cutlass_dsl import cutlass as dsl_cutlass

    from .sm80.configs import SMEM_PER_SM

    helpers = dsl_cutlass.cuda_helpers
    wanted = helpers.cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    smem = SMEM_PER_SM[arch.rstrip("a")]
    real = helpers.get_device_attribute

    def get_device_attribute(attribute, device_id: int = 0):
        if attribute == wanted:
            return smem
        return real(attribute, device_id)

    helpers.get_device_attribute = get_device_attribute
    try:
        yield
    finally:
        helpers.get_device_attribute = real
