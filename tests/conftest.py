import os

import pytest
import torch

# Compile-only tests target Hopper unless the caller picked an arch; without this the DSL defaults to sm_100a.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

HAS_GPU = torch.cuda.is_available()

requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (run the gpu tier on the device machine)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on the device machine)"))


def under_compute_sanitizer() -> bool:
    """Whether this process runs under compute-sanitizer (it injects itself through these variables)."""
    return ("sanitizer" in os.environ.get("NVTX_INJECTION64_PATH", "")
            or "NV_SANITIZER_INJECTION_PORT_BASE" in os.environ)


def poisoned(shape, dtype, device="cuda"):
    """An output buffer full of NaN, so a kernel that skips an element cannot pass by accident."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def int8_gemm_inputs(m, n, k, batch=None, a_kind="vector", b_kind="vector", bias=True, out_dtype=torch.bfloat16,
                     seed=0, device="cuda"):
    """Fresh random operands of int8_scaled_mm: a [.., M, K], b [.., K, N] column-major (the weight stored row-major
    [N, K]), scales [M]/[N] (or [1]), bias [N] in the output dtype (or None)."""
    g = torch.Generator(device=device).manual_seed(seed)
    lead = () if batch is None else (batch,)
    a = torch.randint(-128, 128, (*lead, m, k), dtype=torch.int8, device=device, generator=g)
    w = torch.randint(-128, 128, (*lead, n, k), dtype=torch.int8, device=device, generator=g)
    a_scale = torch.rand(m if a_kind == "vector" else 1, device=device, generator=g) * 0.02 + 0.001
    b_scale = torch.rand(n if b_kind == "vector" else 1, device=device, generator=g) * 0.02 + 0.001
    bias_t = (torch.randn(n, device=device, generator=g) * 4).to(out_dtype) if bias else None
    return a, w.transpose(-1, -2), a_scale, b_scale, bias_t
