"""Ahead-of-time export of compiled kernels: cubin, PTX, a SASS summary and a JSON manifest (no GPU needed).

Each kernel family registers a builder under its public name; ``export()`` compiles the chosen variant for the
chosen arch with the DSL's artifact options and writes the files. Later kernels register the same way.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .configs import TileConfig, select_sm90_int8
from .sass import summarize_cubin

_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


@dataclass
class ExportSpec:
    """What to compile: the options a family understands (unknown ones are rejected by its builder)."""

    arch: str = "sm_90a"
    config: TileConfig | None = None
    m: int = 4096  # picks the table's config when ``config`` is None
    n: int = 4096
    k: int = 4096
    out_dtype: str = "bf16"
    a_scale: str = "vector"
    b_scale: str = "vector"
    bias: bool = True
    batched: bool = False
    extra: dict = field(default_factory=dict)


def _build_int8(spec: ExportSpec, extra_options: str):
    from .ops.int8_scaled_mm import build_sm90

    if spec.arch != "sm_90a":
        sm80 = _REGISTRY.get("int8_scaled_mm_sm80")
        if sm80 is None:
            raise ValueError(f"int8_scaled_mm: no exporter for arch {spec.arch} (sm_90a is available)")
        return sm80[0](spec, extra_options)
    cfg = spec.config or select_sm90_int8(spec.m, spec.n, spec.k)
    if spec.out_dtype not in _DTYPES:
        raise ValueError(f"out_dtype must be one of {sorted(_DTYPES)}; got {spec.out_dtype!r}")
    for name in ("a_scale", "b_scale"):
        if getattr(spec, name) not in ("vector", "scalar"):
            raise ValueError(f"{name} must be 'vector' or 'scalar'; got {getattr(spec, name)!r}")
    fn = build_sm90(3 if spec.batched else 2, spec.a_scale, spec.b_scale, spec.bias, _DTYPES[spec.out_dtype], cfg,
                    extra_options=extra_options)
    return fn, {"config": cfg.describe(), "config_fields": dict(cfg.key), "out_dtype": spec.out_dtype,
                "a_scale": spec.a_scale, "b_scale": spec.b_scale, "bias": spec.bias, "batched": spec.batched}


# name -> (builder(spec, extra_options) -> (compiled, manifest fields), one-line description)
_REGISTRY: dict[str, tuple[Callable, str]] = {
    "int8_scaled_mm": (_build_int8, "int8 GEMM with per-token/per-channel scales and bias (SM90 TMA+WGMMA)"),
}


def register(name: str, builder: Callable, description: str) -> None:
    _REGISTRY[name] = (builder, description)


def registered() -> dict[str, str]:
    _load_optional_families()
    return {k: v[1] for k, v in _REGISTRY.items()}


def _load_optional_families():
    """Kernel families living in optional modules register themselves on import."""
    for mod in ("cute_kernels.sm80", "cute_kernels.ops.fp8_blockwise_scaled_mm", "cute_kernels.weight_only"):
        try:
            __import__(mod)
        except ImportError:
            pass


def export(name: str, spec: ExportSpec, out_dir: str | os.PathLike) -> dict:
    _load_optional_families()
    if name not in _REGISTRY:
        raise ValueError(f"unknown kernel {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    os.environ.setdefault("CUTE_DSL_ARCH", spec.arch)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as dump:
        fn, fields = _REGISTRY[name][0](spec, f"--keep-cubin --keep-ptx --dump-dir {dump}")
    compile_s = time.perf_counter() - t0
    cubin, ptx = fn.artifacts.CUBIN, fn.artifacts.PTX
    stem = f"{name}.{spec.arch}"
    (out / f"{stem}.cubin").write_bytes(cubin)
    (out / f"{stem}.ptx").write_text(ptx)
    summary = summarize_cubin(cubin)
    (out / f"{stem}.sass").write_text(summary.text)
    info = summary.as_dict()
    lines = [f"kernel(s): {', '.join(info['kernels'])}", f"registers/thread: {info['registers']}",
             f"local-memory ops (spills): {info['local_memory_ops']}",
             f"tensor-core ops: {info['tensor_core_ops']}", f"instructions: {info['total_instructions']}",
             "instruction mix:"] + [f"  {op:14s} {n}" for op, n in info["instruction_mix"].items()]
    (out / f"{stem}.sass_summary.txt").write_text("\n".join(lines) + "\n")
    import cutlass

    manifest = {"kernel": name, "arch": spec.arch, "dsl_version": cutlass.__version__, "compile_seconds": round(compile_s, 2),
                "files": [f"{stem}.cubin", f"{stem}.ptx", f"{stem}.sass", f"{stem}.sass_summary.txt"],
                "sass": {k: v for k, v in info.items() if k != "instruction_mix"}, **fields}
    (out / f"{stem}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
