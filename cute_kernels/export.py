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

from .configs import TileConfig, raster_for, select_sm90_int8, weight_preload_ktiles
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
    bits: int = 4  # quantized_mm: weight width
    x_dtype: str = "bf16"  # quantized_mm / awq_gemm activations
    # quantized_mm / awq_gemm / fp8_blockwise_scaled_mm: the variant that adds a bias in its epilogue (int8 / FP8
    # scaled_mm: ``bias``)
    epilogue_bias: bool = False
    weight_only_bias: bool = False  # session 36's name of ``epilogue_bias`` (either turns it on)
    zero_point: str | None = None  # int8_scaled_mm: asymmetric activations, "tensor" or "token" (azp_adj / azp)
    granularity: tuple = (1, 128, 128)  # fp8_blockwise_scaled_mm scale granularity (gM, gN, gK)
    groups: int = 8  # fp8_blockwise_grouped_mm: experts (the batch the config is picked for; m is M_max)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.epilogue_bias = self.epilogue_bias or self.weight_only_bias


def _dtype(name: str, what: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"{what} must be one of {sorted(_DTYPES)}; got {name!r}")
    return _DTYPES[name]


def _build_fp8_rowwise(spec: ExportSpec, extra_options: str):
    """fp8_scaled_mm: int8_scaled_mm's SM90 kernel on e4m3 operands (an fp32 accumulator)."""
    if spec.arch != "sm_90a":
        raise ValueError(f"fp8_scaled_mm: only sm_90a has a kernel; got {spec.arch}")
    if spec.zero_point is not None:
        raise ValueError("fp8_scaled_mm has no zero points (--azp is int8_scaled_mm's)")
    return _build_int8(spec, extra_options, (torch.float8_e4m3fn, torch.float8_e4m3fn))


def _build_int8(spec: ExportSpec, extra_options: str, operand_dtypes=(torch.int8, torch.int8)):
    for name in ("a_scale", "b_scale"):
        if getattr(spec, name) not in ("vector", "scalar"):
            raise ValueError(f"{name} must be 'vector' or 'scalar'; got {getattr(spec, name)!r}")
    out_dtype = _dtype(spec.out_dtype, "out_dtype")
    if spec.zero_point not in (None, "tensor", "token"):
        raise ValueError(f"zero_point must be None, 'tensor' or 'token'; got {spec.zero_point!r}")
    fields = {"out_dtype": spec.out_dtype, "a_scale": spec.a_scale, "b_scale": spec.b_scale, "bias": spec.bias,
              "batched": spec.batched, "zero_point": spec.zero_point}
    if spec.arch in ("sm_80", "sm_86", "sm_87", "sm_89"):
        from .sm80.configs import select_config
        from .sm80.launch import build_kernel

        cfg = select_config(spec.arch, spec.m, spec.n)
        fn = build_kernel(spec.arch, cfg, out_dtype, spec.a_scale, spec.b_scale, spec.bias, split_k=False,
                          rank=3 if spec.batched else 2, options=extra_options, zero_point=spec.zero_point)
        return fn, {"config": str(cfg), **fields}
    if spec.arch != "sm_90a":
        raise ValueError(f"int8_scaled_mm: no kernel for arch {spec.arch}; sm_90a, sm_80, sm_86, sm_87, sm_89 exist")
    from .ops.int8_scaled_mm import build_sm90

    cfg, split_cluster = spec.config, 1
    if cfg is None:  # what the op runs for this problem: the table's row, unsplit when one K slice is planned
        from .ops.split_k import resolve_launch

        cfg, _, split_cluster = resolve_launch(select_sm90_int8(spec.m, spec.n, spec.k), spec.m, spec.n, spec.k, 1,
                                               132)
    raster = raster_for(cfg, spec.m, spec.n, spec.k)  # the schedule the op runs for this problem (configs.raster_for)
    preload = weight_preload_ktiles("int8", spec.m)  # what the op preloads at this M (configs.WEIGHT_PRELOAD)
    from .ops.split_k import cluster_rank1_share

    share = cluster_rank1_share("int8", spec.k, split_cluster)  # rank 1's sixteenths of K (8: halves)
    fn = build_sm90(3 if spec.batched else 2, spec.a_scale, spec.b_scale, spec.bias, out_dtype, cfg,
                    extra_options=extra_options, raster=raster, weight_preload=preload, split_cluster=split_cluster,
                    rank1_share=share, zero_point=spec.zero_point, operand_dtypes=operand_dtypes)
    return fn, {"config": cfg.describe(), "config_fields": dict(cfg.key), "raster": list(raster),
                "weight_preload": preload, "split_cluster": split_cluster, "rank1_share": share, **fields}



def _build_fp8(spec: ExportSpec, extra_options: str):
    from .ops.fp8_blockwise_scaled_mm import build_sm90, check_granularity, select_config

    if spec.arch != "sm_90a":
        raise ValueError(f"fp8_blockwise_scaled_mm: only sm_90a has a kernel; got {spec.arch}")
    gran = check_granularity(tuple(spec.granularity))
    cfg, split_cluster = spec.config, 1
    if cfg is None:  # what the op runs for this problem (unsplit when one K slice is planned)
        from .ops.split_k import resolve_launch

        cfg, _, split_cluster = resolve_launch(select_config(spec.m, spec.n, spec.k), spec.m, spec.n, spec.k, 1, 132)
    raster = raster_for(cfg, spec.m, spec.n, spec.k)
    preload = weight_preload_ktiles("fp8", spec.m)
    fn = build_sm90(3 if spec.batched else 2, _dtype(spec.out_dtype, "out_dtype"), gran, cfg, 132, extra_options,
                    raster=raster, weight_preload=preload, split_cluster=split_cluster, has_bias=spec.epilogue_bias)
    return fn, {"config": cfg.describe(), "granularity": list(gran), "out_dtype": spec.out_dtype,
                "raster": list(raster), "weight_preload": preload, "split_cluster": split_cluster,
                "bias": spec.epilogue_bias}


def _build_fp8_grouped(spec: ExportSpec, extra_options: str):
    """fp8_blockwise_grouped_mm: the blockwise kernel on the masked work list of ``groups`` experts of M_max = m."""
    from .ops.fp8_blockwise_grouped_mm import masked_config
    from .ops.fp8_blockwise_scaled_mm import build_sm90, check_granularity, select_config

    if spec.arch != "sm_90a":
        raise ValueError(f"fp8_blockwise_grouped_mm: only sm_90a has a kernel; got {spec.arch}")
    if isinstance(spec.groups, bool) or not isinstance(spec.groups, int) or spec.groups < 1:
        raise ValueError(f"groups must be a positive int; got {spec.groups!r}")
    gran = check_granularity(tuple(spec.granularity))
    cfg = masked_config(spec.config or select_config(spec.m, spec.n, spec.k, spec.groups))
    sfa_tma = gran[0] == 1 and not cfg.swap_ab  # the op's pick for a TMA-aligned a_scale
    fn = build_sm90(3, _dtype(spec.out_dtype, "out_dtype"), gran, cfg, 132, extra_options, sfa_tma=sfa_tma,
                    raster=raster_for(cfg, spec.m, spec.n, spec.k, spec.groups), masked=True)
    return fn, {"config": cfg.describe(), "granularity": list(gran), "out_dtype": spec.out_dtype,
                "groups": spec.groups, "m_max": spec.m, "sfa_tma": sfa_tma}


def _build_fp8_contiguous(spec: ExportSpec, extra_options: str):
    """fp8_blockwise_grouped_mm_contiguous: the blockwise kernel's row groups over M = m padded rows (the config the
    op picks for M tokens; the expert count is a run-time value)."""
    from .ops.fp8_blockwise_grouped_mm import CONTIGUOUS_RASTER, contiguous_config
    from .ops.fp8_blockwise_scaled_mm import build_sm90, check_granularity, select_config

    if spec.arch != "sm_90a":
        raise ValueError(f"fp8_blockwise_grouped_mm_contiguous: only sm_90a has a kernel; got {spec.arch}")
    gran = check_granularity(tuple(spec.granularity))
    cfg = contiguous_config(spec.config or select_config(spec.m, spec.n, spec.k, 1))
    sfa_tma = gran[0] == 1  # the op's pick for a TMA-aligned a_scale
    fn = build_sm90(2, _dtype(spec.out_dtype, "out_dtype"), gran, cfg, 132, extra_options, sfa_tma=sfa_tma,
                    raster=CONTIGUOUS_RASTER, row_groups=True)
    return fn, {"config": cfg.describe(), "granularity": list(gran), "out_dtype": spec.out_dtype, "m": spec.m,
                "sfa_tma": sfa_tma, "raster": list(CONTIGUOUS_RASTER)}


def _build_weight_only(fmt_key: str, bits: int, scaled: bool):
    def build(spec: ExportSpec, extra_options: str):
        from .weight_only.compile import compile_with_cubin
        from .weight_only.config import awq_select_tile, select_tile

        from .weight_only import wgmma

        x_dtype = _dtype(spec.x_dtype, "x_dtype")
        # the ops' own rule for the WGMMA path (only x's dtype is read from the tensor)
        on_wgmma = wgmma.eligible(torch.empty((0, spec.k), dtype=x_dtype, device="meta"), bits, spec.n, spec.k,
                                  128 if scaled else None, x_dtype, spec.arch)
        if fmt_key == "awq":  # as awq_gemm dispatches (its decode tile first on some long-K layers: session 52)
            path, tile = awq_select_tile(spec.m, spec.n, spec.k, 132, wgmma=on_wgmma, x_dtype=x_dtype)
        else:
            path, tile = select_tile(bits, spec.m, spec.n, 132, scaled=scaled, k=spec.k, wgmma=on_wgmma)
        if fmt_key == "awq":  # the format awq_gemm runs for scales below 0.25 (AutoAWQ's are; awq_fma's e = 0)
            if path == "wgmma":
                from types import SimpleNamespace

                fmt = wgmma.awq_format(x_dtype, SimpleNamespace(max_abs_scale=0.0, group=128), spec.m)
            else:
                from .weight_only.awq import typical_format_and_tile

                fmt, tile = typical_format_and_tile(path, x_dtype, tile, k=spec.k, n=spec.n, sm_count=132)
        else:
            fmt = wgmma.signed_format(bits, scaled, spec.m) if path == "wgmma" else fmt_key
        if path == "wgmma":
            cfg = spec.config or wgmma.select_config(spec.m, spec.n, spec.k)
            group = 128 if scaled else wgmma.NO_GROUP
            cfg, options, _ = wgmma.launch_variant(bits, cfg, 132, spec.m, spec.n, spec.k)  # what the ops run
            options = dict(options)
            fn = wgmma.build(fmt, x_dtype, x_dtype, scaled, group, cfg, extra_options=extra_options,
                             kernel_options=options, has_bias=spec.epilogue_bias)
            return fn, {"format": fmt, "bits": bits, "path": path, "config": cfg.describe(),
                        "kernel_options": options, "x_dtype": spec.x_dtype, "group_scales": scaled, "group": group,
                        "bias": spec.epilogue_bias}
        # compile_with_cubin keeps the artifacts itself, so extra_options is not needed here
        from .weight_only.quantized_mm import use_promoted_scales

        promote = use_promoted_scales(fmt, scaled, 128, x_dtype, tile)  # as the ops decide (group 128)
        fn = compile_with_cubin(fmt, x_dtype, x_dtype, x_dtype if scaled else None, tile, spec.arch, promote,
                                spec.epilogue_bias)
        layout = ("fragment order uint8 [N16, R64] (cute_kernels/weight_only/fragment_order.py, awq_repack.py)"
                  if tile.fragment_order else "row-major K-packed uint8 [N, K * bits / 8]")
        from .weight_only.config import tile_for_arch

        # the tile as the arch runs it (no PDL, L2 bulk prefetch or CTA cap before SM90: config.tile_for_arch)
        return fn, {"format": fmt, "bits": bits, "path": path, "tile": str(tile_for_arch(tile, spec.arch)),
                    "x_dtype": spec.x_dtype,
                    "group_scales": scaled, "promoted_scales": promote, "bias": spec.epilogue_bias,
                    "weight_layout": layout}
    return build


def _build_quantized_mm(spec: ExportSpec, extra_options: str):
    if spec.bits not in (1, 2, 4, 8):
        raise ValueError(f"bits must be 1, 2, 4 or 8; got {spec.bits}")
    return _build_weight_only(f"int{spec.bits}", spec.bits, False)(spec, extra_options)


def _build_dequantize(spec: ExportSpec, extra_options: str):
    from .weight_only.compile import _build_dequantize as build

    if spec.bits not in (1, 2, 4, 8):
        raise ValueError(f"bits must be 1, 2, 4 or 8; got {spec.bits}")
    out_dtype = _dtype(spec.x_dtype, "x_dtype")
    fn = build(spec.bits, out_dtype, None, spec.arch, extra_options)
    return fn, {"bits": spec.bits, "out_dtype": spec.x_dtype, "group_scales": False}


# name -> (builder(spec, extra_options) -> (compiled, manifest fields), one-line description)
_REGISTRY: dict[str, tuple[Callable, str]] = {
    "int8_scaled_mm": (_build_int8, "int8 GEMM with per-token/per-channel scales and bias (sm_90a: TMA+WGMMA; "
                                    "sm_80/86/89: cp.async+mma.sync)"),
    "fp8_scaled_mm": (_build_fp8_rowwise, "FP8 (e4m3) GEMM with per-token/per-channel scales and bias, int8's "
                                          "SM90 kernel with an fp32 accumulator (sm_90a)"),
    "fp8_blockwise_scaled_mm": (_build_fp8, "FP8 GEMM with 1x128 / 128x128 block scales (sm_90a)"),
    "fp8_blockwise_grouped_mm": (_build_fp8_grouped, "MoE experts' FP8 blockwise GEMM, masked layout (--groups "
                                                     "experts of up to --m tokens; sm_90a)"),
    "fp8_blockwise_grouped_mm_contiguous": (_build_fp8_contiguous, "MoE experts' FP8 blockwise GEMM, contiguous "
                                                                   "layout (--m padded rows of every expert; sm_90a)"),
    "quantized_mm": (_build_quantized_mm, "1/2/4/8-bit weight-only GEMM (--bits; decode, tensor-core or, on sm_90a "
                                          "for 1/2/4-bit, WGMMA kernel by --m)"),
    "awq_gemm": (_build_weight_only("awq", 4, True), "AWQ int4 GEMM with group scales and zero points"),
    "dequantize_weights": (_build_dequantize, "1/2/4/8-bit packed weights -> dense fp16/bf16 (--bits, --x-dtype "
                                              "picks the output dtype): quantized_mm's large-M dense path"),
}


def register(name: str, builder: Callable, description: str) -> None:
    _REGISTRY[name] = (builder, description)


def registered() -> dict[str, str]:
    return {k: v[1] for k, v in _REGISTRY.items()}


def export(name: str, spec: ExportSpec, out_dir: str | os.PathLike) -> dict:
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
