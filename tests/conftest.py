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


def poisoned(shape, dtype, device="cuda"):
    """An output buffer full of NaN, so a kernel that skips an element cannot pass by accident."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)
