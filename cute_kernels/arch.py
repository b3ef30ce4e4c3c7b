"""Which GPU architecture a kernel is compiled for.

On a machine with a GPU the arch comes from the tensor's device; without one (CI, export) from ``CUTE_DSL_ARCH``
(e.g. ``sm_90a``), which the DSL itself also reads. Without either the DSL would silently target sm_100a.
"""

from __future__ import annotations

import functools
import os

import torch

SUPPORTED = {
    "sm_90a": "Hopper (H100/H200): warp-specialized TMA + WGMMA kernels",
    "sm_80": "Ampere A100: cp.async + mma.sync kernels",
    "sm_86": "Ampere GA10x (A10, RTX 30): cp.async + mma.sync kernels, <= 100 KB shared memory",
    "sm_89": "Ada (L4, L40, RTX 40): cp.async + mma.sync kernels, <= 100 KB shared memory",
}


def arch_of_capability(major: int, minor: int) -> str:
    if major == 9:
        return "sm_90a"
    return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def _device_arch(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return arch_of_capability(major, minor)


@functools.lru_cache(maxsize=None)
def sm_count(index: int | None) -> int:
    if index is None or not torch.cuda.is_available():
        return 132  # H100 SXM / H200: what CPU-side compiles assume
    return torch.cuda.get_device_properties(index).multi_processor_count


def current_arch(device: torch.device | None = None) -> str:
    if device is not None and device.type == "cuda":
        return _device_arch(device.index if device.index is not None else torch.cuda.current_device())
    forced = os.environ.get("CUTE_DSL_ARCH")
    if forced:
        return forced
    if torch.cuda.is_available():
        return _device_arch(torch.cuda.current_device())
    return "sm_90a"


def has_pdl(arch: str) -> bool:
    """Whether kernels for ``arch`` may use programmatic dependent launch (griddepcontrol: SM90 here)."""
    return arch == "sm_90a"


def unsupported(arch: str, what: str) -> ValueError:
    allowed = ", ".join(f"{a} ({d})" for a, d in SUPPORTED.items())
    return ValueError(f"{what} has no kernel for GPU arch {arch}; supported: {allowed}")
