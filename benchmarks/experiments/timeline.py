"""Session 26: where a decode-size GEMM's fixed cost goes - a per-CTA global-timer timeline of back-to-back calls.

The SM90 kernel built with ``Sm90GemmKernel.__call__(timeline=T)`` writes, per CTA, the global nanosecond timer at:
entry, after the PDL wait (``griddepcontrol.wait``), the first full stage a consumer gets, the end of its last mainloop,
the end of the consumer (epilogue stores drained) and of the producer, plus the CTA's work units and SM id
(``gemm.TL_*``). Here the int8 op's kernel (its own config and split plan) is compiled with that argument, checked
against float64, then run as a CUDA graph of CALLS back-to-back calls over weight copies rotated beyond L2, each call
with its own timeline buffer; ``--isolated`` puts a one-element torch kernel (no PDL) between the calls.

Per call (calls 2..CALLS; times relative to the previous call's last CTA end, ns): first CTA entry, median / last
PDL-wait release, median first data after the wait, median mainloop, median / last consumer end; and the call period
(last end to last end). A bare read of the weight bytes (copy_bandwidth's Triton read) is timed beside.

``python benchmarks/experiments/timeline.py`` (env TL_CASES "op,M,N,K;..." with op int8 / fp8 / awq / int1 / int2 /
int4 / int8wo, TL_CALLS, TL_ISOLATED "0,1", TL_DUMP=1 to keep each CTA's SM id and end time); writes
$OUT/timeline.json and prints a table.
"""
import itertools
import json
import os
import statistics
import sys

sys.path[:0] = ["benchmarks"]
import torch

OUT = os.environ.get("OUT", ".")
CASES = [(c.split(",")[0], *(int(v) for v in c.split(",")[1:])) for c in os.environ.get(
    "TL_CASES", "int8,16,4096,4096;int8,16,14336,4096;fp8,1,4096,7168;fp8,64,7168,16384;fp8,128,24576,1536;"
    "awq,16,4096,4096;awq,16,8192,8192;int1,16,8192,8192;int4,16,8192,8192").split(";")]
L2W = int(os.environ["TL_L2W"]) if os.environ.get("TL_L2W") else None  # override the ops' l2_warmup
DUMP = bool(int(os.environ.get("TL_DUMP", "0")))  # keep every CTA's SM id and end time (last replay)
TL_VARIANTS = os.environ.get("TL_VARIANTS", "static").split(",")
ISOLATED = tuple(bool(int(v)) for v in os.environ.get("TL_ISOLATED", "0,1").split(","))
CALLS = int(os.environ.get("TL_CALLS", "12"))
L2_MARGIN = 150 << 20


def build_int8_timeline(m, n, k, sms):
    """(compiled fn, split plan, cfg) of the int8 op's choice for (m, n, k), compiled with a timeline argument."""
    import cutlass
    import cutlass.cute as cute

    from cute_kernels.compile_utils import fake_tensor, fake_vector, kernel_view
    from cute_kernels.configs import raster_for, select_sm90_int8
    from cute_kernels.epilogues import scaled_mm_tree
    from cute_kernels.ops.int8_scaled_mm import L2_WARMUP_KTILES
    from cute_kernels.ops.split_k import resolve_split
    from cute_kernels.sm90.gemm import Sm90GemmKernel

    cfg, split = resolve_split(select_sm90_int8(m, n, k, 1, sms), m, n, k, 1, sms)
    cfg, split = apply_variant(cfg, split, (n, m) if cfg.swap_ab else (m, n), k // 128)
    tree = scaled_mm_tree("vector", "vector", "out", swap_ab=cfg.swap_ab, source=False)
    kernel = Sm90GemmKernel(cfg, tree, cutlass.Int32, sm_count=sms, l2_warmup=L2_WARMUP_KTILES,
                            raster=raster_for(cfg, m, n, k, 1, sms), clamp=(not cfg.swap_ab, cfg.swap_ab))
    _configure(kernel)
    sm_, sn, sk = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=16)
    fa = fake_tensor(cutlass.Int8, (sm_, sk), stride_div=16)
    fb = fake_tensor(cutlass.Int8, (sk, sn), contiguous_dim=-2, stride_div=16)
    fd = fake_tensor(cutlass.BFloat16, (sm_, sn), stride_div=8)
    f_as, f_bs = fake_vector(cutlass.Float32, sm_), fake_vector(cutlass.Float32, sn)
    f_bias = fake_vector(cutlass.BFloat16, sn, align=2)
    swap = cfg.swap_ab

    def views(a, b, d, a_scale, b_scale, bias):
        mA, mB = kernel_view(a, 0, 1), kernel_view(b, 1, 0)
        mA, mB, mD = (mB, mA, kernel_view(d, 1, 0)) if swap else (mA, mB, kernel_view(d, 0, 1))
        return mA, mB, mD, (a_scale, b_scale, bias)

    fn = _compile_with_timeline(kernel, views, (fa, fb, fd, f_as, f_bs, f_bias), split, ws_dtype=cutlass.Int32)
    return fn, split, cfg


VARIANTS = {"static": (False, 1), "dynamic": (True, 1), "static2x": (False, 2), "dynamic2x": (True, 2),
            "static4x": (False, 4), "dynamic4x": (True, 4)}
VARIANT = [False, 1]  # the one being built: (dynamic walk, K slices x factor)


def _configure(kernel):
    """The experiment's overrides of a constructed kernel: the walk (``dynamic``: only with the patch) and
    ``TL_L2W``."""
    kernel.dynamic = VARIANT[0]
    if L2W is not None:
        kernel.l2_warmup = L2W


def apply_variant(cfg, split, rows_cols, k_tiles):
    """(config, split plan) of the variant in ``VARIANT``: the production pick for "static"; otherwise the split
    kernel (a split-capable config) with the plan's K slices times the factor (at most 8 and the K-tiles), every
    position split (head 0), and one more semaphore word for the dynamic walk's counter."""
    from cute_kernels.configs import replace

    dynamic, factor = VARIANT
    if not dynamic and factor == 1:
        return cfg, split
    if dynamic:
        import inspect

        from cute_kernels.sm90.gemm import Sm90GemmKernel
        if "dynamic" not in inspect.signature(Sm90GemmKernel.__init__).parameters:
            raise SystemExit("the dynamic variants need dynamic_walk.patch applied (the data archive's "
                             "dropped/patches/; git apply)")
    positions = split[2] if split is not None else -(-rows_cols[0] // cfg.tile_m) * -(-rows_cols[1] // cfg.tile_n)
    slices = min(8, k_tiles, (split[0] if split is not None else 1) * factor)
    if not cfg.splits:
        cfg = replace(cfg, split_k=8)
    return cfg, (slices, positions * slices * cfg.tile_m * cfg.tile_n, positions + 1, 0)


def _compile_with_timeline(kernel, views, fakes, split, opts="--enable-tvm-ffi --gpu-arch sm_90a", ws_dtype=None):
    """Compile ``kernel`` behind a launch ``fn(operands, tl[, workspace, semaphores, slices, head])``: ``views``
    maps the operands to (mA, mB, mD, epi_tensors); ``fakes``: the operands' fake tensors; the split workspace
    holds the accumulator type (``ws_dtype``, Float32 unless given)."""
    import cutlass
    import cutlass.cute as cute

    from cute_kernels.compile_utils import fake_stream, fake_tensor
    from cute_kernels.sm90.gemm import TIMELINE_SLOTS

    f_tl = fake_tensor(cutlass.Int64, (cute.sym_int32(), TIMELINE_SLOTS))
    if split is None:
        @cute.jit
        def launch(ops: tuple, tl: cute.Tensor, stream):
            kernel(*views(*ops), stream, None, tl)

        return cute.compile(launch, tuple(fakes), f_tl, fake_stream(), options=opts)

    @cute.jit
    def launch_split(ops: tuple, tl: cute.Tensor, workspace: cute.Tensor, semaphore: cute.Tensor,
                     num_splits: cutlass.Int32, head: cutlass.Int32, stream):
        kernel(*views(*ops), stream, (workspace, semaphore, num_splits, head), tl)

    f_ws = fake_tensor(ws_dtype or cutlass.Float32, (cute.sym_int32(),))
    f_sem = fake_tensor(cutlass.Int32, (cute.sym_int32(),))
    return cute.compile(launch_split, tuple(fakes), f_tl, f_ws, f_sem, cutlass.Int32(1), cutlass.Int32(0),
                        fake_stream(), options=opts)


def build_fp8_timeline(m, n, k, sms):
    """The FP8 op's choice for (m, n, k), groupwise 1x128 / 128x128, a_scale TMA-staged where eligible."""
    import cutlass
    import cutlass.cute as cute

    from cute_kernels.compile_utils import fake_tensor, kernel_view
    from cute_kernels.configs import raster_for
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.ops import fp8_blockwise_scaled_mm as F
    from cute_kernels.ops.split_k import resolve_split
    from cute_kernels.sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    cfg, split = resolve_split(F.select_config(m, n, k, 1, sms), m, n, k, 1, sms)
    cfg, split = apply_variant(cfg, split, (n, m) if cfg.swap_ab else (m, n), k // 128)
    sfa_tma = not cfg.swap_ab  # the a_scale is passed in the TMA-aligned MN-major layout
    gran = (1, 128, 128)
    kernel = Fp8BlockwiseGemmSm90(cfg, EpilogueTree(Accumulator()), (128, 1, 128) if cfg.swap_ab else gran,
                                  sm_count=sms, sfa_tma=sfa_tma, l2_warmup=F.L2_WARMUP_KTILES,
                                  raster=raster_for(cfg, m, n, k, 1, sms))
    _configure(kernel)
    sm_, sn, sk = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=128)
    mb, nb, kb = cute.sym_int32(), cute.sym_int32(), cute.sym_int32()
    fa = fake_tensor(cutlass.Float8E4M3FN, (sm_, sk), stride_div=16)
    fb = fake_tensor(cutlass.Float8E4M3FN, (sn, sk), stride_div=16)
    fd = fake_tensor(cutlass.BFloat16, (sm_, sn), stride_div=8)
    f_sa = (fake_tensor(cutlass.Float32, (mb, kb), contiguous_dim=-2, stride_div=4, align=16) if sfa_tma
            else fake_tensor(cutlass.Float32, (mb, kb), contiguous_dim=None, align=4))
    f_sb = fake_tensor(cutlass.Float32, (nb, kb), contiguous_dim=None, align=4)
    swap = cfg.swap_ab

    def views(a, b, d, a_scale, b_scale):
        mA, mB, sA, sB = (kernel_view(t, 0, 1) for t in (a, b, a_scale, b_scale))
        return (mB, mA, kernel_view(d, 1, 0), (sB, sA)) if swap else (mA, mB, kernel_view(d, 0, 1), (sA, sB))

    return _compile_with_timeline(kernel, views, (fa, fb, fd, f_sa, f_sb), split), split, cfg, sfa_tma


def build_wo_timeline(fmt_key, m, n, k, group, sms):
    """The weight-only WGMMA path's choice for (m, n, k): ``wgmma.select_config`` and ``stage_options``."""
    import cutlass
    import cutlass.cute as cute

    from cute_kernels.compile_utils import fake_tensor, kernel_view
    from cute_kernels.epilogues import Accumulator, Compute, EpilogueTree, ScalarArgument
    from cute_kernels.sm90.weight_only_wgmma import WeightOnlyWgmmaSm90
    from cute_kernels.weight_only import wgmma
    from cute_kernels.weight_only.formats import format_by_key

    fmt = format_by_key(fmt_key)
    cfg = wgmma.select_config(m, n, k, sms)
    scaled = fmt.has_zeros or group is not None
    kernel = WeightOnlyWgmmaSm90(cfg, EpilogueTree(Accumulator() if fmt.has_zeros else Compute(
        "mul", Accumulator(), ScalarArgument("scale"))), fmt, group or wgmma.NO_GROUP, scaled, sm_count=sms,
        **dict(wgmma.stage_options(fmt.bits, cfg, n, k)))
    f_blob = fake_tensor(cutlass.Int64, (cute.sym_int32(), cute.sym_int32(divisibility=2)), stride_div=2)
    fx = fake_tensor(cutlass.Float16, (cute.sym_int32(), cute.sym_int32(divisibility=8)), stride_div=8)
    fo = fake_tensor(cutlass.Float16, (cute.sym_int32(), cute.sym_int32(divisibility=8)), stride_div=8)
    f_params = fake_tensor(cutlass.Int32, (cute.sym_int32(), cute.sym_int32(divisibility=8)), align=4)
    names = kernel.operand_names

    def views(blob, x, out, scale, params):
        named = {"scale": scale, "params": params}
        return (kernel_view(blob, 0, 1), kernel_view(x, 0, 1), kernel_view(out, 1, 0),
                tuple(named[nm] for nm in names))

    split = None
    if cfg.split_k > 1:
        tiles = -(-n // cfg.tile_m) * -(-m // cfg.tile_n)
        split = (cfg.split_k, tiles * cfg.split_k * cfg.tile_m * cfg.tile_n, tiles, 0)
    cfg, split = apply_variant(cfg, split, (n, m), k // wgmma.K_TILE)
    kernel = WeightOnlyWgmmaSm90(cfg, kernel.epilogue, fmt, group or wgmma.NO_GROUP, scaled, sm_count=sms,
                                 **dict(wgmma.stage_options(fmt.bits, cfg, n, k)))
    _configure(kernel)
    fn = _compile_with_timeline(kernel, views, (f_blob, fx, fo, cutlass.Float32(1.0), f_params if scaled else None),
                                split)
    return fn, split, cfg


def summarize(tls, calls):
    """Per-call phases (ns) relative to the previous call's last CTA end, medians over calls 2..N."""
    from cute_kernels.sm90.gemm import (TL_CONSUMER_END, TL_ENTRY, TL_FIRST_DATA, TL_MAINLOOP_END, TL_UNITS,
                                        TL_WAITED)
    rows = []
    for i in range(1, calls):
        prev, cur = tls[i - 1], tls[i]
        prev_end = int(prev[:, TL_CONSUMER_END].max())
        ent, wait = cur[:, TL_ENTRY], cur[:, TL_WAITED]
        first, ml, end = cur[:, TL_FIRST_DATA], cur[:, TL_MAINLOOP_END], cur[:, TL_CONSUMER_END]
        rows.append({
            "entry_first": int(ent.min()) - prev_end, "entry_last": int(ent.max()) - prev_end,
            "wait_median": int(wait.median()) - prev_end, "wait_last": int(wait.max()) - prev_end,
            "first_data_after_wait": int((first - wait).median()),
            "mainloop": int((ml - first).median()), "epilogue": int((end - ml).median()),
            "end_median": int(end.median()) - prev_end, "end_last": int(end.max()) - prev_end,
            "ctas": int(cur.shape[0]), "units_max": int((cur[:, TL_UNITS] & 0xFFFFFFFF).max()),
        })
    keys = rows[0].keys()
    return {k: statistics.median(r[k] for r in rows) for k in keys}, rows


def make_case(fam, m, n, k, sms, dev):
    """(fn(i, tl) launching call i on weight copy i % copies, check() -> relative error, config text, weight MB)."""
    copies = lambda nbytes: max(2, -(-L2_MARGIN // nbytes))  # noqa: E731
    if fam == "int8":
        fn, split, cfg = build_int8_timeline(m, n, k, sms)
        c = copies(n * k)
        bs = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev).t() for _ in range(c)]
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
        a_s, b_s = torch.rand(m, device=dev) + 0.5, torch.rand(n, device=dev) / 1000
        bias = torch.randn(n, device=dev).to(torch.bfloat16)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
        extra = _split_args(split, dev, torch.int32)

        def run(i, tl):
            fn((a, bs[i % c], out, a_s, b_s, bias), tl, *extra)

        def check():
            ref = (a.double() @ bs[0].double()) * a_s.double()[:, None] * b_s.double()[None, :] + bias.double()
            return ((out.double() - ref).abs().max() / ref.abs().max()).item()

        return run, check, cfg.describe(), n * k / 1e6
    if fam == "fp8":
        from cute_kernels.formats import to_tma_aligned_mn_major
        from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

        fn, split, cfg, sfa_tma = build_fp8_timeline(m, n, k, sms)
        c = copies(n * k)
        f8 = torch.float8_e4m3fn
        bs = [torch.randn(n, k, device=dev).to(f8) for _ in range(c)]
        a = torch.randn(m, k, device=dev).to(f8)
        sa = torch.rand(m, k // 128, device=dev) + 0.5
        sa_k = to_tma_aligned_mn_major(sa) if sfa_tma else sa
        sb = torch.rand(-(-n // 128), k // 128, device=dev) / 100
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
        extra = _split_args(split, dev, torch.float32)

        def run(i, tl):
            fn((a, bs[i % c], out, sa_k, sb), tl, *extra)

        def check():
            ref = fp8_blockwise_scaled_mm_ref(a.cpu(), bs[0].cpu(), sa.cpu(), sb.cpu()).double()
            return ((out.cpu().double() - ref).abs().max() / ref.abs().max()).item()

        return run, check, cfg.describe(), n * k / 1e6
    # weight-only WGMMA path, fp16 x: awq (g128) or intB (per-tensor scale)
    from cute_kernels.formats.awq import awq_quantize
    from cute_kernels.formats.bitpack import quantize_weights
    from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
    from cute_kernels.weight_only import awq_sm90, wgmma

    bits = 4 if fam == "awq" else int(fam[3:])
    group = 128 if fam == "awq" else None
    fn, split, cfg = build_wo_timeline(fam, m, n, k, group, sms)
    c = copies(n * k * bits // 8)
    ws = []
    for _ in range(c):
        if fam == "awq":
            q, z, sc = awq_quantize(torch.randn(k, n, device=dev) * 0.05, 128, torch.float16)
            # the blob and parameter words awq_gemm's WGMMA path reads on SM90 (awq_sm90: from the checkpoint's
            # codes; the repack's blob, which this case used before session 48, is another code order)
            aw = awq_sm90.weights(q, sc, z, 128)
            ws.append(((q, sc, z), aw.blob, aw.params("awq", torch.float16), 1.0))
        else:
            w, sc, _ = quantize_weights(torch.randn(n, k, device=dev), bits, None)
            ws.append(((w,), wgmma.cached_blob(w, bits, fam, k), None, float(sc)))
    x = torch.randn(m, k, device=dev).to(torch.float16)
    xp = torch.nn.functional.pad(x, (0, 0, 0, wgmma.x_rows(m, cfg.tile_n) - m))
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device=dev)
    extra = _split_args(split, dev, torch.float32)

    def run(i, tl):
        src, blob, params, scale = ws[i % c]
        fn((blob, xp, out, scale, params), tl, *extra)

    def check():
        src, _, _, scale = ws[0]
        if fam == "awq":
            ref = awq_gemm_ref(x.cpu(), *(t.cpu() for t in src)).double()
        else:
            ref = quantized_mm_ref(x.cpu(), src[0].cpu(), scale, bits).double()
        return ((out.cpu().double() - ref).abs().max() / ref.abs().max()).item()

    return run, check, cfg.describe(), n * k * bits / 8e6


def _split_args(split, dev, dtype):
    if split is None:
        return ()
    return (torch.zeros(split[1], dtype=dtype, device=dev), torch.zeros(split[2], dtype=torch.int32, device=dev),
            split[0], split[3] if len(split) > 3 else 0)


def main():
    from copy_bandwidth import read_sized
    from cute_kernels import arch as _arch
    from cute_kernels.sm90.gemm import TIMELINE_SLOTS

    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    sms = _arch.sm_count(0)
    results = {"device": torch.cuda.get_device_name(), "calls": CALLS, "cases": []}
    read_cache = {}
    for isolated, (fam, m, n, k), variant in itertools.product(ISOLATED, CASES, TL_VARIANTS):
        VARIANT[:] = VARIANTS[variant]
        run, check, cfg_text, mb = make_case(fam, m, n, k, sms, dev)
        tls = [torch.zeros(132 * 4, TIMELINE_SLOTS, dtype=torch.int64, device=dev) for _ in range(CALLS)]
        run(0, tls[0])
        torch.cuda.synchronize()
        err = check()
        assert err < 2e-2, (fam, m, n, k, err)
        pad = torch.zeros(1, device=dev)

        def calls():
            for i in range(CALLS):
                if isolated:
                    pad.add_(1.0)
                run(i, tls[i])

        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            calls()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            calls()
        summaries = []
        for _rep in range(5):
            for t in tls:
                t.zero_()
            g.replay()
            torch.cuda.synchronize()
            used = [t[: int((t[:, 0] != 0).sum())].cpu() for t in tls]
            summaries.append(summarize(used, CALLS)[0])
        summ = {key: statistics.median(sm[key] for sm in summaries) for key in summaries[0]}
        stamps = torch.cat([u[:, :6].flatten() for u in used]).unique()
        res = int((stamps[1:] - stamps[:-1]).min()) if len(stamps) > 1 else -1
        if round(mb, 1) not in read_cache:
            read_cache[round(mb, 1)] = read_sized(mb)["us"]
        if DUMP:  # per CTA of the last replay's calls 2..N: SM id, then every stamp - the call's median end (ns)
            from cute_kernels.sm90.gemm import TL_CONSUMER_END, TL_UNITS
            per_cta = [[[int(u[c, TL_UNITS]) >> 32] + [int(u[c, j] - u[:, TL_CONSUMER_END].median()) if u[c, j]
                                                      else None for j in range(TL_UNITS)]
                        for c in range(u.shape[0])] for u in used[1:]]
        row = {"fam": fam, "variant": variant, "m": m, "n": n, "k": k, "isolated": isolated, "config": cfg_text, "weight_MB": mb,
               "rel_err": err, "timer_res_ns": res, **summ, "bare_read_us": read_cache[round(mb, 1)]}
        if DUMP:
            row["per_cta"] = per_cta
        results["cases"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "per_cta"}), flush=True)
    with open(os.path.join(OUT, "timeline.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\nns after the previous call's last CTA end; medians over calls and 5 replays")
    print("| op | M | N | K | iso | variant | config | entry 1st | wait med/last | 1st data after wait | mainloop | epilogue "
          "| end med/last | bare read ns |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["cases"]:
        print(f"| {r['fam']} | {r['m']} | {r['n']} | {r['k']} | {int(r['isolated'])} | {r['variant']} | {r['config']} | "
              f"{r['entry_first']:.0f} | {r['wait_median']:.0f}/{r['wait_last']:.0f} | {r['first_data_after_wait']:.0f}"
              f" | {r['mainloop']:.0f} | {r['epilogue']:.0f} | {r['end_median']:.0f}/{r['end_last']:.0f} | "
              f"{1000 * r['bare_read_us']:.0f} |")


if __name__ == "__main__":
    main()
