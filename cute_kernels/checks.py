"""Argument checks shared by every op.

Each check raises a ``TypeError`` (wrong kind/dtype) or ``ValueError`` (wrong shape, layout, device, value)
whose message names the argument, what was passed and the rule. Kernels never see input that violates
what they were compiled for: TMA and cp.async would otherwise read out of bounds or misaligned.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        if hasattr(t, "__dlpack__"):
            return torch.from_dlpack(t)
        raise TypeError(f"{name} must be a torch.Tensor or a DLPack-capable array, got {type(t).__name__}")
    return t


def check_dtype(name: str, t: torch.Tensor, allowed: Sequence[torch.dtype]) -> None:
    if t.dtype not in allowed:
        raise TypeError(f"{name} must have dtype {_dtype_names(allowed)}; got {str(t.dtype).replace('torch.', '')}")


def check_ndim(name: str, t: torch.Tensor, allowed: Sequence[int]) -> None:
    if t.dim() not in allowed:
        want = " or ".join(f"{n}-D" for n in allowed)
        raise ValueError(f"{name} must be {want}; got a {t.dim()}-D tensor of shape {tuple(t.shape)}")


def check_shape(name: str, t: torch.Tensor, expected: Sequence[int], rule: str) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} ({rule}); got {tuple(t.shape)}")


def check_multiple(name: str, value: int, multiple: int, why: str) -> None:
    if value % multiple != 0:
        raise ValueError(f"{name} = {value} must be a multiple of {multiple} ({why})")


def check_gemm_pair(a: torch.Tensor, b: torch.Tensor) -> None:
    """a and b are both 2-D, or both 3-D with the same batch size L."""
    check_ndim("a", a, (2, 3))
    check_ndim("b", b, (a.dim(),))
    if a.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"batch sizes differ: a has L={a.shape[0]}, b has L={b.shape[0]}")


def check_inner_contiguous(name: str, t: torch.Tensor) -> None:
    """The last dimension must have stride 1 (the layout TMA and vector loads are compiled for)."""
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name} must be contiguous in its last dimension (stride 1); got strides {tuple(t.stride())} "
            f"for shape {tuple(t.shape)}; call .contiguous() first"
        )


def check_aligned(name: str, t: torch.Tensor, nbytes: int = 16) -> None:
    """Base pointer and every non-unit stride must be multiples of ``nbytes`` (TMA / 128-bit copies)."""
    if t.data_ptr() % nbytes != 0:
        raise ValueError(f"{name} must start at a {nbytes}-byte aligned address; got data_ptr % {nbytes} = "
                         f"{t.data_ptr() % nbytes} (a sliced view? call .contiguous())")
    for d, (size, stride) in enumerate(zip(t.shape, t.stride())):
        if stride != 1 and size > 1 and (stride * t.element_size()) % nbytes != 0:
            raise ValueError(f"{name} stride {stride} of dim {d} is {stride * t.element_size()} bytes; it must be a "
                             f"multiple of {nbytes} bytes")


def check_cuda(tensors: dict[str, torch.Tensor | None]) -> torch.device:
    """All given tensors must be CUDA tensors on one device; returns that device."""
    device = None
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor; got a tensor on {t.device}")
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            raise ValueError(f"{name} is on {t.device} but {first} is on {device}; all tensors must share one device")
    assert device is not None
    return device


def check_bias(bias, n: int, dtype: torch.dtype, device: torch.device | None = None):
    """None, or ``bias`` [N] in the output's ``dtype`` (a contiguous copy if its stride is not 1), on ``device``
    when one is given."""
    if bias is None:
        return None
    bias = check_tensor("bias", bias)
    check_dtype("bias", bias, (dtype,))
    check_ndim("bias", bias, (1,))
    if bias.shape[0] != n:
        raise ValueError(f"bias must have shape [N] = [{n}] (one value per output column); got {tuple(bias.shape)}")
    if device is not None and bias.device != device:
        raise ValueError(f"bias is on {bias.device} but the operands are on {device}; all tensors must share one "
                         f"device")
    return bias if bias.stride(0) == 1 else bias.contiguous()
