"""Command line: ``python -m cute_kernels {info,demo,export,layout,bench}`` (each answers --help)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _parse_config(text: str | None):
    """``128x256`` or ``128x256x2x1`` (tile_m x tile_n x cluster_m x cluster_n), optional ``:swap``."""
    if not text:
        return None
    from .configs import TileConfig

    swap = text.endswith(":swap")
    parts = [int(p) for p in text.removesuffix(":swap").split("x")]
    if len(parts) not in (2, 4):
        raise SystemExit(f"--config must look like 128x256 or 128x256x2x1[:swap]; got {text!r}")
    cm, cn = (parts[2], parts[3]) if len(parts) == 4 else (1, 1)
    return TileConfig(tile_m=parts[0], tile_n=parts[1], cluster_m=cm, cluster_n=cn, swap_ab=swap)


def cmd_info(args) -> int:
    import cutlass
    import torch

    from . import __version__, arch, jit_cache

    print(f"cute_kernels {__version__}")
    print(f"nvidia-cutlass-dsl {cutlass.__version__}, torch {torch.__version__}")
    if _has_gpu():
        dev = torch.cuda.current_device()
        print(f"GPU: {torch.cuda.get_device_name(dev)} -> arch {arch.current_arch(torch.device('cuda', dev))}, "
              f"{arch.sm_count(dev)} SMs")
    else:
        forced = os.environ.get("CUTE_DSL_ARCH")
        print(f"GPU: none; compile target {arch.current_arch()} "
              f"({'from CUTE_DSL_ARCH' if forced else 'default; set CUTE_DSL_ARCH to change'})")
    print(f"cache dir: {jit_cache.cache_dir()} (disk cache {'on' if jit_cache.disk_cache_enabled() else 'off'})")
    print(f"fingerprint: {jit_cache.source_fingerprint()}")
    entries = jit_cache.entries()
    print(f"entries for this fingerprint: {len(entries)}")
    for desc, size in entries:
        print(f"  {size / 1024:8.1f} KiB  {desc}")
    return 0


def cmd_demo(args) -> int:
    import torch

    from . import int8_scaled_mm
    from .configs import select_sm90_int8

    m, n, k = args.m, args.n, args.k
    cfg = select_sm90_int8(m, n, k)
    print(f"int8_scaled_mm  M={m} N={n} K={k}, bf16 out, per-token + per-channel scales + bias; config {cfg.describe()}")
    if not _has_gpu():
        from .export import ExportSpec, export

        out = args.out or "cute_kernels_demo"
        print("no GPU here: compiling for sm_90a and exporting the cubin instead")
        t0 = time.perf_counter()
        manifest = export("int8_scaled_mm", ExportSpec(arch="sm_90a", m=m, n=n, k=k), out)
        print(f"compiled in {time.perf_counter() - t0:.1f} s -> {out}/ ({', '.join(manifest['files'])})")
        sass = manifest["sass"]
        print(f"SASS: {sass['tensor_core_ops']}, {sass['registers']} registers/thread, "
              f"{sass['local_memory_ops']} local-memory ops")
        return 0
    from .reference import int8_scaled_mm_ref

    dev = "cuda"
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev).t()
    a_scale = torch.rand(m, device=dev) * 0.01
    b_scale = torch.rand(n, device=dev) * 0.01
    bias = torch.randn(n, device=dev).bfloat16()
    t0 = time.perf_counter()
    out = int8_scaled_mm(a, b, a_scale, b_scale, bias)
    torch.cuda.synchronize()
    print(f"first call (compile or cache load + run): {time.perf_counter() - t0:.2f} s")
    ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
    err = ((out.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
    ok = err < 2 ** -7 + 1e-3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        int8_scaled_mm(a, b, a_scale, b_scale, bias)
    iters = 50
    start.record()
    for _ in range(iters):
        int8_scaled_mm(a, b, a_scale, b_scale, bias)
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) / iters * 1e3
    print(f"check vs float64 reference: max rel err {err:.2e} -> {'OK' if ok else 'FAILED'}")
    print(f"time {us:.1f} us, {2 * m * n * k / us / 1e6:.0f} TOPS on {torch.cuda.get_device_name()}")
    return 0 if ok else 1


def cmd_export(args) -> int:
    from .export import ExportSpec, export

    spec = ExportSpec(arch=args.arch, config=_parse_config(args.config), m=args.m, n=args.n, k=args.k,
                      out_dtype=args.out_dtype, a_scale=args.a_scale, b_scale=args.b_scale, bias=not args.no_bias,
                      batched=args.batched, bits=args.bits, x_dtype=args.x_dtype, epilogue_bias=args.bias,
                      zero_point=args.azp, groups=args.groups,
                      granularity=tuple(int(g) for g in args.granularity.split(",")))
    manifest = export(args.kernel, spec, args.out)
    print(json.dumps(manifest, indent=2))
    return 0


LAYOUT_KERNELS = ("int8_scaled_mm", "fp8_blockwise_scaled_mm", "quantized_mm", "awq_gemm")


def cmd_layout(args) -> int:
    from .configs import select_sm90_int8
    from .layouts import sm90_gemm_layouts

    if args.kernel not in LAYOUT_KERNELS:
        print(f"layout: unknown kernel {args.kernel!r}; available: {', '.join(LAYOUT_KERNELS)}", file=sys.stderr)
        return 2
    if args.kernel in ("quantized_mm", "awq_gemm"):
        return _layout_weight_only(args)

    if args.kernel == "fp8_blockwise_scaled_mm" or args.granularity:
        from .formats.scale_layouts import describe_scale_layouts

        gran = tuple(int(x) for x in (args.granularity or "1,128,128").split(","))
        print(describe_scale_layouts(args.m, args.n, args.k, gran))
        if args.kernel != "fp8_blockwise_scaled_mm":
            return 0
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    if args.kernel == "fp8_blockwise_scaled_mm":
        from .ops.fp8_blockwise_scaled_mm import select_config as select
        dtype = "Float8E4M3FN"
    else:
        select, dtype = select_sm90_int8, "Int8"
    cfg = _parse_config(args.config) or select(args.m, args.n, args.k)
    print(sm90_gemm_layouts(cfg, a_dtype=dtype), end="")
    print(f"schedule          : {_describe_schedule(cfg, args.m, args.n, args.k)}")
    return 0


def _layout_weight_only(args) -> int:
    """quantized_mm / awq_gemm: the path the dispatcher takes for the problem on an SM90 GPU, and the WGMMA kernel's
    layouts when it is that path (or when --config forces a WGMMA config)."""
    import torch

    from .weight_only import config as wo_config, wgmma

    awq = args.kernel == "awq_gemm"
    bits = 4 if awq else args.bits
    group = args.group if args.group is not None else (128 if awq else None)
    if bits not in (1, 2, 4, 8):
        print(f"layout: --bits must be 1, 2, 4 or 8; got {bits}", file=sys.stderr)
        return 2
    x_dtype = torch.float16 if args.x_dtype == "fp16" else torch.bfloat16
    eligible = wgmma.eligible(torch.empty((0, args.k), dtype=x_dtype, device="meta"), bits, args.n, args.k, group,
                              x_dtype, "sm_90a")
    decode_fmt = None
    if awq:  # as awq_gemm dispatches, with the format's tile (awq.decode_format for AutoAWQ-sized scales)
        path, tile = wo_config.awq_select_tile(args.m, args.n, args.k, 132, wgmma=eligible, group=group,
                                               x_dtype=x_dtype)
        if path == "decode":
            from .weight_only.awq import typical_format_and_tile

            fmt, tile = typical_format_and_tile(path, x_dtype, tile, group, args.k, args.n, 132)
            decode_fmt = f"decode format     : {fmt}"
    else:
        path, tile = wo_config.select_tile(bits, args.m, args.n, 132, scaled=group is not None, dense=True, k=args.k,
                                           wgmma=eligible)
    what = f"{'AWQ' if awq else f'{bits}-bit'}{f' g{group}' if group else ''}, x {args.x_dtype}"
    print(f"dispatch          : M={args.m} N={args.n} K={args.k} ({what}) on SM90 -> {path} path"
          + (f", tile {tile}" if tile is not None else ""))
    if decode_fmt:
        print(decode_fmt)
    cfg = _parse_config(args.config)
    if path != "wgmma" and cfg is None:
        print("(the decode and tensor-core tiles stage their weights per thread and the dense path is dequantize + "
              "cuBLAS: no CuTe shared-memory layouts to print; --config shows a WGMMA config's)")
        return 0
    if not eligible:
        print("layout: the WGMMA path cannot run this problem (wgmma.eligible: 1/2/4-bit, N and K multiples of 8, "
              "a group of 32 or a multiple of 64)", file=sys.stderr)
        return 2
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from .layouts import weight_only_wgmma_layouts

    cfg = cfg or wgmma.select_config(args.m, args.n, args.k)
    fmt_key = "awq" if awq else f"int{bits}"
    try:
        text = weight_only_wgmma_layouts(fmt_key, group is not None, group or wgmma.NO_GROUP, cfg,
                                         "Float16" if args.x_dtype == "fp16" else "BFloat16",
                                         wgmma.stage_options(bits, cfg, args.n, args.k))
    except ValueError as e:  # a --config the kernel cannot run (clusters, a swap): its own message
        print(f"layout: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def _describe_schedule(cfg, m: int, n: int, k: int) -> str:
    """The persistent schedule the op runs for this problem: K slices and tile order (configs.raster_for)."""
    from .configs import raster_for
    from .ops.split_k import resolve_split

    cfg, split = resolve_split(cfg, m, n, k, 1, 132)
    if split is not None and split[3] == 0:
        return f"split-K, {split[0]} K slices per output tile, plain M-fastest tile order"
    swizzle, along_m = raster_for(cfg, m, n, k)
    if swizzle == 1:
        text = "plain M-fastest tile order" if along_m else "plain N-fastest tile order (A exceeds L2, B does not)"
    else:
        text = (f"swizzled: {swizzle} {'N' if along_m else 'M'} clusters at a time, rastering along "
                f"{'M' if along_m else 'N'} (fewer operand panels per wave)")
    if split is not None:
        text += (f"; the first {split[3]} cluster positions whole, the last wave's {split[2]} tiles in {split[0]} K "
                 f"slices each")
    return text


def cmd_bench(args) -> int:
    from .bench import run_benchmark

    return run_benchmark(args.kernel, args.out, quick=args.quick)


def _add_problem_size(parser) -> None:
    """--m/--n/--k: the problem whose shape bucket picks the tile config (and, for demo, the problem run)."""
    for dim in ("m", "n", "k"):
        parser.add_argument(f"--{dim}", type=int, default=4096, help=f"problem {dim.upper()} (default 4096)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cute_kernels", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("info", help="DSL version, detected/forced arch, cache dir and entries")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("demo", help="run int8_scaled_mm on a default problem (GPU) or compile + export it (no GPU)")
    _add_problem_size(s)
    s.add_argument("--out", help="export directory when there is no GPU (default ./cute_kernels_demo)")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("export", help="compile a kernel config for an arch; write .cubin, .ptx, SASS summary, manifest")
    s.add_argument("kernel", help="kernel family: int8_scaled_mm, fp8_scaled_mm, fp8_blockwise_scaled_mm, "
                                  "fp8_blockwise_grouped_mm, quantized_mm, awq_gemm")
    s.add_argument("--arch", default="sm_90a")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--config", help="tile config, e.g. 128x256x2x1 or 128x16:swap (default: the table's pick)")
    _add_problem_size(s)
    s.add_argument("--out-dtype", default="bf16", choices=["bf16", "fp16"])
    s.add_argument("--a-scale", default="vector", choices=["vector", "scalar"])
    s.add_argument("--b-scale", default="vector", choices=["vector", "scalar"])
    s.add_argument("--no-bias", action="store_true")
    s.add_argument("--batched", action="store_true")
    s.add_argument("--bits", type=int, default=4, help="quantized_mm: weight bits (1, 2, 4, 8)")
    s.add_argument("--x-dtype", default="bf16", choices=["bf16", "fp16"], help="quantized_mm / awq_gemm activations")
    s.add_argument("--bias", action="store_true", help="quantized_mm / awq_gemm / fp8_blockwise_scaled_mm: the "
                   "variant that adds a bias in its epilogue (bias= of the ops; int8_scaled_mm / fp8_scaled_mm have "
                   "one unless --no-bias)")
    s.add_argument("--azp", choices=["tensor", "token"],
                   help="int8_scaled_mm: asymmetric activations, the zero point folded into azp_adj (tensor) or "
                        "per token (azp_adj and azp)")
    s.add_argument("--granularity", default="1,128,128", help="fp8_blockwise_scaled_mm / _grouped_mm: gM,gN,gK")
    s.add_argument("--groups", type=int, default=8, help="fp8_blockwise_grouped_mm: experts (--m is M_max)")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("layout", help="print the CuTe layouts a config uses (smem+swizzle, TMA boxes, MMA, epilogue)")
    s.add_argument("kernel", nargs="?", default="int8_scaled_mm")
    s.add_argument("--config", help="tile config, e.g. 128x256x2x1 (default: the table's pick for M, N, K)")
    _add_problem_size(s)
    s.add_argument("--granularity", help="FP8 scale granularity gM,gN,gK (prints the scale-factor layouts)")
    s.add_argument("--bits", type=int, default=4, help="quantized_mm: weight bits (1, 2, 4, 8)")
    s.add_argument("--group", type=int, help="quantized_mm / awq_gemm: group size of the group scales (awq: 128)")
    s.add_argument("--x-dtype", default="bf16", choices=["bf16", "fp16"], help="quantized_mm / awq_gemm activations")
    s.set_defaults(fn=cmd_layout)

    s = sub.add_parser("bench", help="benchmark a kernel family against torch baselines (needs a GPU)")
    s.add_argument("kernel", nargs="?", default="int8_scaled_mm")
    s.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="directory for the table/plot/json")
    s.add_argument("--quick", action="store_true", help="fewer shapes")
    s.set_defaults(fn=cmd_bench)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
