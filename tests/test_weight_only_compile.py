"""CPU tier: the weight-only template compiles for sm_90a in every specialization the dispatch ships, as ONE kernel.

"One template": kernel.py holds the only ``@cute.kernel`` of the weight-only GEMM, the four widths (and AWQ) are
specializations of it (same kernel function, format a trace-time constant), and the formats module holds no kernel.
The SASS checks pin the tensor-core instruction (HMMA.16816, fp32 accumulate) and the absence of register spills.
"""

import ast
import re
import inspect
from dataclasses import replace

import pytest
import torch

from cute_kernels.sass import summarize_cubin
from cute_kernels.weight_only import awq, config, formats, kernel
from cute_kernels.weight_only.compile import compile_with_cubin
from cute_kernels.weight_only.quantized_mm import check_group_scales, use_promoted_scales

_SOURCE_NAME = "WeightOnlyGemm"  # the kernel function's class, which the DSL puts in every mangled kernel name


def _cute_kernels_in(module) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if ast.unparse(dec) in ("cute.kernel", "kernel"):
                    found.append(node.name)
    return found


def test_single_kernel_definition():
    from cute_kernels.weight_only import blob_decode

    assert _cute_kernels_in(kernel) == ["kernel"]
    assert _cute_kernels_in(formats) == []
    assert _cute_kernels_in(blob_decode) == []  # the blob reader overrides the template's hooks, not its kernel


def _sass(fmt_key, x_dtype, scale_dtype, tile):
    compiled = compile_with_cubin(fmt_key, x_dtype, x_dtype, scale_dtype, tile)
    return summarize_cubin(compiled.artifacts.CUBIN)


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_every_width_compiles_from_the_one_template(bits):
    tile = config.decode_tile(bits, m=1, n=8192, sm_count=132)
    s = _sass(f"int{bits}", torch.bfloat16, None, tile)
    (name,) = s.kernels
    assert _SOURCE_NAME in name
    assert s.mma.get("HMMA.16816.F32.BF16", 0) > 0, s.mma
    assert not s.spills, f"{s.local_memory_ops} local-memory ops (register spills)"
    assert "ACQBULK" in s.instructions, "griddepcontrol.wait (programmatic dependent launch) missing"


def test_decode_l2_prefetch_rule_and_sass():
    """Session 10's rule: 4-bit (2-bit and AWQ up to 8 tokens) decode tiles on layers with N >= K ask L2 for the leading
    bytes of their rows before the PDL wait (one bulk prefetch per row: UBLKPF); since session 32 AWQ also on N < K
    layers whose decode grid is one wave; other formats and shapes do not."""
    on = config.decode_tile(4, m=1, n=8192, sm_count=132, k=8192)
    assert on.l2_prefetch_mb == config.DECODE_L2_PREFETCH_MB > 0
    assert config.decode_tile(4, m=16, n=14336, sm_count=132, scaled=True, k=4096).l2_prefetch_mb > 0
    assert config.decode_tile(2, m=8, n=8192, sm_count=132, k=8192).l2_prefetch_mb > 0
    assert config.decode_tile("awq", m=4, n=14336, sm_count=132, scaled=True, k=4096,
                              blob_reader=True).l2_prefetch_mb > 0  # the ring tile of the repack reader has none
    for n, k in ((4096, 14336), (1536, 8960)):  # N < K, 256 / 96 CTAs: one wave
        assert config.decode_tile("awq", m=1, n=n, sm_count=132, scaled=True, k=k).l2_prefetch_mb > 0
    for fmt, m, n, k in ((4, 1, 4096, 14336), (2, 16, 8192, 8192), (1, 1, 8192, 8192), (8, 1, 8192, 8192),
                         ("awq", 16, 8192, 8192), ("awq", 1, 5120, 13824), ("awq", 9, 4096, 14336),
                         ("awq", 4, 14336, 4096),
                         (4, 1, 8192, None)):
        assert config.decode_tile(fmt, m=m, n=n, sm_count=132, k=k).l2_prefetch_mb == 0, (fmt, m, n, k)
    s = _sass("int4", torch.bfloat16, None, on)
    assert s.instructions.get("UBLKPF", 0) > 0 and not s.spills
    assert "UBLKPF" not in _sass("int4", torch.bfloat16, None, replace(on, l2_prefetch_mb=0)).instructions


def test_decode_cta_cap_rule_and_smem():
    """Session 12's rule: one-tile-per-warp decode tiles of the 4- and 8-bit formats on grids of <= 2 CTAs per SM run
    at most 2 CTAs per SM (the launch asks for enough shared memory that a third does not fit); not unscaled 1/2-bit,
    larger tiles or multi-wave grids. Session 50's: AWQ's and grouped 1/2-bit tiles of <= 8 tokens too, where their
    shared memory leaves room (DECODE_CTA_CAP_GROUPED_FORMATS). The capped tiles compile with low register counts
    (the reason for the cap)."""
    capped = [(4, 1, 4096, 4096, False), (4, 8, 4096, 4096, True), (4, 1, 4096, 14336, True),
              (8, 16, 4096, 4096, False), (8, 1, 4096, 14336, False), ("awq", 1, 4096, 4096, True),
              ("awq", 8, 4096, 14336, True), ("awq", 1, 14336, 4096, True), (2, 1, 4096, 14336, True),
              (1, 8, 4096, 4096, True)]
    for fmt, m, n, k, scaled in capped:
        assert config.decode_tile(fmt, m, n, 132, scaled=scaled, k=k).max_ctas_per_sm == 2, (fmt, m, n, k)
    for fmt, m, n, k, scaled in ((2, 1, 4096, 4096, False), (1, 4, 4096, 4096, False), ("awq", 16, 14336, 4096, True),
                                 ("awq", 12, 4096, 4096, True), (8, 1, 8192, 8192, False), (4, 1, 8192, 8192, False),
                                 (4, 16, 4096, 4096, False), (4, 16, 8192, 8192, True)):
        assert config.decode_tile(fmt, m, n, 132, scaled=scaled, k=k).max_ctas_per_sm == 0, (fmt, m, n, k)
    smem = kernel.TileShape.cap_smem_bytes(2) + kernel.SMEM_RESERVED_PER_CTA
    assert 2 * smem <= kernel.SM90_SMEM_PER_SM < 3 * smem
    tile = config.decode_tile(4, 1, 4096, 132, k=4096)
    assert tile.launch_smem_bytes() == kernel.TileShape.cap_smem_bytes(2)
    assert replace(tile, max_ctas_per_sm=0).launch_smem_bytes() is None
    with pytest.raises(ValueError, match="already exceeds"):
        replace(tile, stages=4, nt=4, max_ctas_per_sm=2).launch_smem_bytes()
    s = _sass("int4", torch.bfloat16, None, tile)
    assert max(s.kernels.values()) <= 85 and not s.spills  # registers for > 2 CTAs of 256 threads: the cap matters


def test_awq_one_cta_per_sm_rule_and_sass():
    """Session 51: AWQ's <= 8-token decode grids of more than one wave (16-row CTAs, N / 16 > 2 x SMs) whose SMs would
    hold at most 8 row tiles each run one CTA per SM - warps_n = ceil(N / 16 / SMs) side by side, min(8, 24 //
    warps_n) along K, no CTA cap, folded scales - and nothing else changes: not the one-wave grids, not the
    side-by-side ring tiles, not 14 row tiles per SM, not 9-16 tokens, not the blob reader, not other formats, and not
    the paths (awq_decode_multi_wave still calls such a grid multi-wave). The tiles compile without spills at the
    registers their CTA size leaves."""
    from cute_kernels.weight_only.quantized_mm import use_promoted_scales

    for (n, k), warps in {(11008, 4096): (6, 4), (13824, 5120): (7, 3), (5120, 13824): (3, 8),
                          (10240, 8192): (5, 4), (15360, 5120): (8, 3), (4240, 2048): (3, 8)}.items():
        assert config.one_cta_per_sm_warps("awq", n, k, 132) == warps
        for m in (1, 5, 8):
            tile = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
            assert (tile.warps_n, tile.warps_k, tile.max_ctas_per_sm, tile.stages) == (*warps, 0, 0), (n, k, m)
            assert config.DECODE_THREADS < tile.threads <= 768
            for fmt in ("awq", "awq_fma"):
                assert not use_promoted_scales(fmt, True, 128, torch.float16, config.tile_for_format(fmt, tile))
        assert config.tile_for_format("awq_fma", tile).acc_chains == config.AWQ_DECODE_ACC_CHAINS
        assert config.decode_tile("awq", 16, n, 132, scaled=True, k=k).threads == config.DECODE_THREADS
        assert config.decode_tile("awq", 1, n, 132, scaled=True, k=k, blob_reader=True).warps_n == 1
        assert config.decode_tile(4, 1, n, 132, scaled=True, k=k).threads == config.DECODE_THREADS
    for n, k in ((4224, 2048), (4096, 14336), (14336, 4096), (16384, 4096), (28672, 4096)):
        assert config.decode_tile("awq", 1, n, 132, scaled=True, k=k).threads == config.DECODE_THREADS, (n, k)
    assert config.one_cta_per_sm_warps("awq", 28672, 4096, 132) is None
    assert config.awq_decode_multi_wave(5120, 4096, 132) and config.awq_decode_multi_wave(11008, 4096, 132)
    assert not config.awq_decode_multi_wave(4096, 14336, 132)
    for fmt, dtype, (n, k) in (("awq_fma", torch.float16, (11008, 4096)), ("awq", torch.bfloat16, (15360, 5120))):
        tile = config.tile_for_format(fmt, config.awq_repack_tile(config.decode_tile("awq", 1, n, 132, k=k)))
        s = _sass(fmt, dtype, dtype, tile)
        assert s.mma and not s.spills and max(s.kernels.values()) <= 65536 // tile.threads, s.as_dict()


def test_sm80_class_tiles_compile_without_sm90_features():
    """The weight-only kernel compiles for the SM80-class GPUs (config.tile_for_arch): mma.sync (HMMA) without
    programmatic dependent launch (no ACQBULK), L2 bulk prefetches (UBLKPF) or spills, the shared memory within the
    arch's per-CTA limit (sm_89: 99 KB, so the 9-16-token rings lose stages); SM90 tiles unchanged; other archs refused
    by name. The SM counts are the archs' flagships (A100 108, L40 142)."""
    from cute_kernels.sm80.configs import NOMINAL_SMS, SMEM_PER_BLOCK

    ring = config.decode_tile(2, 12, 14336, 132, k=4096)
    assert config.tile_for_arch(ring, "sm_90a") is ring
    small = config.tile_for_arch(ring, "sm_89")
    assert ring.ring_bytes + ring.reduction_bytes > SMEM_PER_BLOCK["sm_89"] >= small.ring_bytes + small.reduction_bytes
    assert 2 <= small.stages < ring.stages and config.tile_for_arch(ring, "sm_80").stages == ring.stages
    with pytest.raises(ValueError, match="weight-only GEMM.*no kernel for GPU arch sm_100a"):
        config.tile_for_arch(ring, "sm_100a")
    for arch in ("sm_80", "sm_89"):
        sms = NOMINAL_SMS[arch]
        cases = [("awq_fma", torch.float16, True, config.decode_tile("awq", 1, 4096, sms, scaled=True, k=4096)),
                 ("awq", torch.bfloat16, True, config.decode_tile("awq", 12, 14336, sms, scaled=True, k=4096)),
                 ("int4", torch.float16, True, config.decode_tile(4, 1, 4096, sms, scaled=True, k=4096)),
                 ("int2", torch.bfloat16, False, ring),
                 ("awq", torch.float16, True, config.tensor_core_tile(64, True, "awq"))]
        for fmt, dtype, scaled, tile in cases:
            s = summarize_cubin(compile_with_cubin(fmt, dtype, dtype, dtype if scaled else None,
                                                   config.awq_repack_tile(tile) if "awq" in fmt else tile,
                                                   arch).artifacts.CUBIN)
            assert s.mma and not s.spills, (arch, fmt, s.as_dict())
            assert "ACQBULK" not in s.instructions and "UBLKPF" not in s.instructions, (arch, fmt)
            ran = config.tile_for_arch(tile, arch)
            assert ran.ring_bytes + ran.reduction_bytes <= SMEM_PER_BLOCK[arch] and not ran.max_ctas_per_sm


# Shipped tiles that spill (local-memory ops on sm_90a, session 51): the unscaled 1/2-bit tensor-core tiles (4 x 4
# tiles per warp), which SM90 runs only for fp32 x (fp16 / bf16 take the WGMMA path there) and SM80-class GPUs from 17
# tokens. docs/weight_only.md "Missing / next".
KNOWN_SPILLS = {("int1", False, config.TENSOR_CORE_TILE), ("int1", False, config.TENSOR_CORE_SPLIT_K_TILE),
                ("int2", False, config.TENSOR_CORE_TILE), ("int2", False, config.TENSOR_CORE_SPLIT_K_TILE)}


@pytest.mark.parametrize("key,scaled,tile", config.shipped_tiles(),
                         ids=lambda v: v if isinstance(v, str) else "g128" if v is True else "plain" if v is False
                         else f"nt{v.nt}mt{v.mt}w{v.warps_n}x{v.warps_k}s{v.stages}")
def test_every_shipped_tile_compiles_clean(key, scaled, tile):
    """Every tile of config.shipped_tiles (the dispatch's picks on sample layers, every format; AWQ as awq_gemm runs
    it) compiles for sm_90a: its MMAs, the PDL wait, registers that let its CTA launch, and no spills outside
    KNOWN_SPILLS."""
    dtype = torch.float16 if key in ("awq_fma", "awq_zmma") else torch.bfloat16
    promote = use_promoted_scales(key, scaled, 128, dtype, tile)
    s = summarize_cubin(compile_with_cubin(key, dtype, dtype, dtype if scaled else None, tile,
                                           promote_scales=promote).artifacts.CUBIN)
    assert s.mma and "ACQBULK" in s.instructions, s.as_dict()
    assert max(s.kernels.values()) <= 65536 // tile.threads
    known = (key, scaled, tile) in KNOWN_SPILLS
    assert s.spills == known, (s.local_memory_ops, "spills" if s.spills else "no longer spills: update KNOWN_SPILLS")


@pytest.mark.parametrize("n,k", [(8192, 8192), (14336, 4096)], ids=["register", "ring"])
def test_awq_zero_mma_sass(n, k, monkeypatch):
    """awq_zmma (session 52) on the tiles that promote the scales: one correction HMMA per HMMA of ``awq``, and the
    decode without its packed fp16 op per pair (the K step's 32 HADD2 / HFMA2: u - z) - the instruction mix the format
    is for - no spills, and the dispatch runs it for fp16 x there."""
    from cute_kernels.weight_only.awq import decode_format

    monkeypatch.setattr(config, "AWQ_PARAM_WORDS_WARPS_N", None)  # (the words: test_awq_param_words_rule_...)
    tile = config.tile_for_format("awq_zmma", config.decode_tile("awq", 1, n, 132, scaled=True, k=k))
    assert tile.fields_in_place and use_promoted_scales("awq_zmma", True, 128, torch.float16, tile)
    assert not use_promoted_scales("awq_zmma", True, 64, torch.float16, tile)

    class KW:
        group, max_abs_scale = 128, 0.01

    assert decode_format("decode", torch.float16, KW, tile) == "awq_zmma"
    assert decode_format("decode", torch.bfloat16, KW, tile) == ("awq_zmma" if tile.stages == 0 else "awq")
    s = {f: summarize_cubin(compile_with_cubin(f, torch.float16, torch.float16, torch.float16, tile,
                                               promote_scales=True).artifacts.CUBIN) for f in ("awq", "awq_zmma")}
    assert sum(s["awq_zmma"].mma.values()) == 2 * sum(s["awq"].mma.values())
    half = {f: s[f].instructions["HADD2"] + s[f].instructions["HFMA2"] for f in s}
    assert half["awq_zmma"] <= half["awq"] - 32 and not s["awq_zmma"].spills, half
    if tile.stages == 0:  # bf16 runs it there too
        bf = summarize_cubin(compile_with_cubin("awq_zmma", torch.bfloat16, torch.bfloat16, torch.bfloat16, tile,
                                                promote_scales=True).artifacts.CUBIN)
        assert sum(bf.mma.values()) == sum(s["awq_zmma"].mma.values()) and not bf.spills
    with pytest.raises(ValueError, match="needs promote_scales"):
        compile_with_cubin("awq_zmma", torch.float16, torch.float16, torch.float16, tile, promote_scales=False)


def test_group_index_multiplier_is_exact():
    """kernel.group_of's arithmetic (floor(k / 32) * group_multiplier(group) >> 30) equals k // group at every K
    offset the kernels form (multiples of 16) for groups that are multiples of 32, up to GROUP_INDEX_MAX_K; the host
    refuses longer K with more than one group."""
    k_max = kernel.GROUP_INDEX_MAX_K
    for group in (32, 64, 96, 128, 160, 256, 1024, 4096, 32 * 997, k_max // 2):
        mul = kernel.group_multiplier(group)
        step = max(1, k_max // group // 64)
        ks = [j * group + d for j in range(0, k_max // group + 1, step) for d in (-32, -16, 0, 16)]
        ks += [k_max - 16, k_max]
        for k in (k for k in ks if 0 <= k <= k_max):
            assert ((k >> 5) * mul) >> kernel.GROUP_MUL_SHIFT == k // group, (group, k)
    with pytest.raises(ValueError, match="K <= "):
        check_group_scales(torch.ones(8, 2), 8, k_max + 64)  # two groups of 2^19 + 32
    with pytest.raises(ValueError, match="IC <= "):
        awq._check_group(64, k_max + 64)


def test_decode_loop_has_no_integer_division():
    """The K loop of a grouped decode tile finds its groups without a division (kernel.group_of): no IABS, the
    signature of a signed integer division, in the block that holds the MMAs."""
    tile = config.tile_for_format("awq_fma", config.awq_repack_tile(config.decode_tile("awq", 1, 4096, 132, k=14336)))
    text = _sass("awq_fma", torch.float16, torch.float16, tile).text
    blocks = re.split(r"\n\s*\.L_x_\d+:", text)
    loops = [b for b in blocks if "HMMA" in b and "BRA" in b]
    assert loops and all("IABS" not in b for b in loops)


def test_scaled_16_token_short_k_split_rule():
    """Session 12: 4-bit with group scales and AWQ at 9-16 tokens on layers of <= 40 K steps per row run 2 tiles per
    warp with twice the warps side by side instead of 4 tiles (AWQ from a ring); not on long K, not unscaled 4-bit."""
    for n, k, wn in ((14336, 4096, 2), (11008, 4096, 2), (28672, 4096, 4), (13824, 5120, 2)):
        t = config.decode_tile(4, 16, n, 132, scaled=True, k=k)
        assert (t.nt, t.warps_n, t.warps_k, t.rows_per_cta) == (2, wn, 8 // wn, 32 * wn), (n, k, t)
    assert config.decode_tile(4, 16, 8192, 132, scaled=True, k=8192).nt == 4
    assert config.decode_tile(4, 8, 14336, 132, scaled=True, k=4096).nt == 2  # the M <= 8 plan: unchanged
    awq = config.decode_tile("awq", 16, 14336, 132, scaled=True, k=4096)  # AWQ: split and from a 3-stage ring
    assert (awq.nt, awq.warps_n, awq.stages, awq.x_ahead) == (2, 2, config.SCALED_16_SPLIT_RING_STAGES, False)
    assert config.decode_tile("awq", 16, 8192, 132, scaled=True, k=8192).nt == 4
    assert config.decode_tile("awq", 16, 14336, 132, scaled=True, k=4096, ring=False).nt == 4  # forced registers
    assert config.decode_tile(4, 16, 14336, 132, k=4096).nt == 2


def test_awq_and_fp32_variants_compile():
    s = _sass("awq", torch.float16, torch.float16, config.decode_tile(4, m=16, n=4096, sm_count=132))
    assert _SOURCE_NAME in next(iter(s.kernels)) and s.mma.get("HMMA.16816.F32", 0) > 0
    s = _sass("int4", torch.float32, torch.float32, config.decode_tile(4, m=1, n=4096, sm_count=132))
    assert s.mma.get("HMMA.16816.F32.BF16", 0) > 0 and not s.spills


def test_awq_promoted_side_by_side_tile_compiles():
    """AWQ's multi-wave decode tiles (warps side by side) promote the group scales (quantized_mm.use_promoted_scales):
    the shipped tile compiles promoted, without spills, and its decode drops the per-pair scale multiply."""
    tile = config.decode_tile("awq", 1, 14336, 132, scaled=True, k=4096)
    assert tile.warps_n > 1
    folded = summarize_cubin(compile_with_cubin("awq", torch.float16, torch.float16, torch.float16, tile)
                             .artifacts.CUBIN)
    promoted = summarize_cubin(compile_with_cubin("awq", torch.float16, torch.float16, torch.float16, tile,
                                                  promote_scales=True).artifacts.CUBIN)
    assert promoted.mma.get("HMMA.16816.F32", 0) > 0 and not promoted.spills
    assert promoted.instructions.get("HMUL2", 0) < folded.instructions.get("HMUL2", 0)


def test_tensor_core_path_sass():
    s = _sass("int4", torch.bfloat16, None, config.TENSOR_CORE_TILE)
    tile = config.TENSOR_CORE_TILE
    # one K step of a warp: nt x mt tiles x (512 / bits / 16) k16 blocks of 16x8x16 MMAs
    assert s.mma.get("HMMA.16816.F32.BF16", 0) >= tile.nt * tile.mt * (512 // 4 // 16)
    assert not s.spills
    assert "LDS" not in s.instructions  # no split-K reduction through shared memory on this path


@pytest.mark.parametrize("fmt,x_dtype,scale_dtype", [("awq", torch.float16, torch.float16),
                                                      ("int4", torch.bfloat16, torch.float32),
                                                      ("int4", torch.float16, torch.float16)])
def test_scaled_tensor_core_tiles_do_not_spill(fmt, x_dtype, scale_dtype):
    for m in (64, 4096):
        tile = config.tensor_core_tile(m, scaled=True, fmt="awq" if fmt == "awq" else 4)
        assert tile.fields_in_place
        s = _sass(fmt, x_dtype, scale_dtype, tile)
        assert not s.spills, f"M={m}: {s.local_memory_ops} local-memory ops (register spills)"


@pytest.mark.parametrize("fmt,x_dtype,tile", [
    ("int2", torch.float16, config.decode_tile(2, m=1, n=8192, sm_count=132)),
    ("int2", torch.bfloat16, config.decode_tile(2, m=1, n=8192, sm_count=132)),
    ("int4", torch.float16, config.tensor_core_tile(64, fmt=4)),
], ids=["int2-decode-f16", "int2-decode-bf16", "int4-tensor-core"])
def test_fields_in_place_take_fewer_instructions(fmt, x_dtype, tile):
    """The shipped in-place tiles (config.FIELDS_IN_PLACE_NOTE) drop per-pair shifts (SHF, or IMAD.SHL where ptxas
    moves a shift to the FMA pipe) and instructions overall, against the same tile decoding per pair; no spills.
    (sm_90a, DSL 4.8.1: int2 decode 1648 -> 1376 / 1416 instructions, SHF 354 -> 70 / 117.)"""
    import dataclasses

    assert tile.fields_in_place
    in_place = _sass(fmt, x_dtype, None, tile)
    per_pair = _sass(fmt, x_dtype, None, dataclasses.replace(tile, fields_in_place=False))
    assert not in_place.spills

    def shifts(s):
        return s.instructions.get("SHF", 0) + s.instructions.get("IMAD", 0)

    assert shifts(in_place) < 0.9 * shifts(per_pair), (shifts(in_place), shifts(per_pair))
    assert sum(in_place.instructions.values()) < sum(per_pair.instructions.values())


def test_one_bit_in_place_decode_is_lop3_and_fma():
    """1-bit in place (the 9-16-token narrow plan): each pair is a lop3 and a packed fma. Its per-pair decode already
    ran its shifts as IMAD.SHL on the FMA pipe, so this is not fewer instructions (1648 -> 1744 here); it ships on
    measurement alone (config.FIELDS_IN_PLACE_NOTE)."""
    tile = config.decode_tile(1, m=16, n=4096, sm_count=132)
    assert tile.fields_in_place and tile.token_major
    s = _sass("int1", torch.bfloat16, None, tile)
    assert not s.spills
    assert s.instructions.get("HFMA2", 0) >= 512  # one per pair: 2 row slots x 4 tiles x 4 words x 16 pairs


def test_awq_side_by_side_ring_rule_and_sass():
    """Session 43's rule (config.AWQ_SIDE_BY_SIDE_RING): AWQ's 1-8 token tiles with 4 warps side by side run from a
    3-stage cp.async ring, first steps preloaded before the PDL wait, no L2 prefetch; other AWQ tiles, the blob reader's
    tiles and a forced register pipeline keep the register double buffer. The ring tile compiles (promoted, as
    quantized_mm.use_promoted_scales picks for side-by-side warps) without spills, its first copies before ACQBULK."""
    rule = config.AWQ_SIDE_BY_SIDE_RING
    for n, k in ((14336, 4096), (16384, 2048), (15360, 3072)):
        for m in (1, 4, 8):
            tile = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
            assert tile.warps_n >= rule["min_warps_n"], (n, k, m)
            assert (tile.stages, tile.preload_weights, tile.l2_prefetch_mb) == (rule["stages"], True, 0), (n, k, m)
            blob = config.decode_tile("awq", m, n, 132, scaled=True, k=k, blob_reader=True)
            assert blob.stages == 0 and blob.warps_n == tile.warps_n and blob.l2_prefetch_mb > 0
            assert config.decode_tile("awq", m, n, 132, scaled=True, k=k, ring=False).stages == 0
        path, chosen = config.select_tile(4, 1, n, 132, scaled=True, awq=True, k=k, wgmma=True)
        assert path == "decode" and chosen.stages == rule["stages"]
        assert config.select_tile(4, 1, n, 132, scaled=True, awq=True, k=k, wgmma=True, blob_reader=True)[1].stages == 0
    for n, k in ((4096, 4096), (4096, 14336), (8192, 4096), (11008, 4096)):  # fewer warps side by side
        tile = config.decode_tile("awq", 1, n, 132, scaled=True, k=k)
        assert tile.stages == 0, (n, k)
        # 11008 x 4096: one CTA per SM (config.one_cta_per_sm_warps), 6 warps side by side in registers
        assert tile.warps_n < rule["min_warps_n"] or tile.threads > config.DECODE_THREADS, (n, k)
    tile = config.decode_tile("awq", 1, 14336, 132, scaled=True, k=4096)
    for x_dtype in (torch.float16, torch.bfloat16):
        s = summarize_cubin(compile_with_cubin("awq", x_dtype, x_dtype, x_dtype, tile, promote_scales=True)
                            .artifacts.CUBIN)
        head = s.text[:s.text.index("ACQBULK")]
        assert "LDGSTS" in head and "UBLKPF" not in s.instructions and not s.spills, x_dtype
        assert s.mma.get("HMMA.16816.F32" + (".BF16" if x_dtype == torch.bfloat16 else ""), 0) > 0


def test_awq_decode_swap_rule_and_sass():
    """Session 53's rule (config.AWQ_DECODE_SWAP_MIN_STEPS, applied by the call: config.tile_for_format with the
    layer's K): the capped <= 8-token register tiles declare two CTAs per SM to ptxas (TileShape.min_ctas_hint) and
    swap their register buffers - bf16's awq on one-warp-across tiles always, fp16's awq_fma there (one accumulator
    set) and awq_zmma on two warps side by side where a warp walks >= 8 K steps; not the ring, not the 9-16-token
    tiles, not without K for the formats with a minimum. The PTX carries .minnctapersm 2 and the SASS stays within
    the hint's 128 registers without spills (compiled without a GPU: compile_utils.target_smem_per_sm)."""
    def rule(fmt_key, n, k, m=1, with_k=True):
        t = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
        t = config.tile_for_format(fmt_key, t, k if with_k else None)
        return t.min_ctas_hint == config.DECODE_CTAS_PER_SM and t.swap_registers, t

    for m in (1, 4, 8):
        for n, k in ((4096, 14336), (2048, 8192), (4096, 11008)):
            on, t = rule("awq_fma", n, k, m)
            assert on and t.acc_chains == 1 and t.warps_n == 1, (n, k, m)
            assert rule("awq", n, k, m)[0] and rule("awq", n, k, m, with_k=False)[0]
            assert not rule("awq_fma", n, k, m, with_k=False)[0]
        assert not rule("awq_fma", 4096, 4096, m)[0] and rule("awq", 4096, 4096, m)[0]  # 4 K steps a warp
        for n, k in ((8192, 8192), (7168, 4096), (8192, 4096)):
            assert rule("awq_zmma", n, k, m)[0] and rule("awq_zmma", n, k, m)[1].warps_n == 2, (n, k, m)
        assert rule("awq_zmma", 8192, 2048, m)[1].param_words  # (session 54: with the words at any K)
        assert not rule("awq", 14336, 4096, m)[0] and rule("awq", 14336, 4096, m)[1].stages == 3  # bf16's ring
        assert rule("awq_zmma", 14336, 4096, m)[1].stages == 0  # (session 55: as the register pipeline, the words)
    assert not rule("awq", 4096, 4096, 16)[0] and not rule("awq_zmma", 8192, 8192, 16)[0]
    assert config.decode_tile("awq", 1, 4096, 132, scaled=True, k=14336).min_ctas_hint == 0  # the call's to add
    for fmt_key, x_dtype, (n, k) in (("awq_fma", torch.float16, (4096, 14336)), ("awq", torch.bfloat16, (4096, 4096)),
                                     ("awq_zmma", torch.float16, (8192, 8192)),
                                     ("awq_zmma", torch.bfloat16, (8192, 8192))):
        t = rule(fmt_key, n, k)[1]
        art = compile_with_cubin(fmt_key, x_dtype, x_dtype, x_dtype, t, promote_scales=fmt_key == "awq_zmma").artifacts
        ptx = art.PTX if isinstance(art.PTX, str) else art.PTX.decode()
        assert ".minnctapersm 2" in ptx, fmt_key
        s = summarize_cubin(art.CUBIN)
        assert s.local_memory_ops == 0 and max(s.kernels.values()) <= 128, (fmt_key, s.kernels)


def test_awq_param_words_rule_host_words_and_sass():
    """Session 54's parameter words (config.AWQ_PARAM_WORDS_WARPS_N, awq.DECODE_PARAM_WORDS_DTYPES): fp16 AWQ on the
    capped <= 8-token register tiles of one or two warps side by side runs awq_zmma with TileShape.param_words, the
    two-CTA hint and swapped buffers at any K; bf16 keeps its formats (awq one warp across), and its awq_zmma tiles
    take the words; not the ring, not the 16-token tiles. The host words hold -(M_0 + z) and the scale bit for bit
    (M_0 - M_j added gives each field position's correction exactly), and the compiled tiles stay within 128
    registers without spills, loading one word per row and K step (no byte loads of zero points)."""
    from cute_kernels.weight_only import awq as awq_mod
    from cute_kernels.weight_only.awq_repack import AwqKernelWeights
    from cute_kernels.weight_only.formats import AWQ_ZERO_MMA, F16

    def dispatched(n, k, m, dtype):
        path, t = config.awq_select_tile(m, n, k, 132)
        return awq_mod.typical_format_and_tile(path, dtype, t, k=k)

    for m in (1, 4, 8):
        for n, k in ((4096, 4096), (4096, 14336), (8192, 8192), (8192, 2048), (2048, 8192)):
            fmt_key, t = dispatched(n, k, m, torch.float16)
            assert fmt_key == "awq_zmma" and t.param_words and t.min_ctas_hint == 2 and t.swap_registers, (n, k, m)
        fmt_key, t = dispatched(4096, 14336, m, torch.bfloat16)
        assert fmt_key == "awq" and not t.param_words
        fmt_key, t = dispatched(8192, 8192, m, torch.bfloat16)
        assert fmt_key == "awq_zmma" and t.param_words
    assert not dispatched(8192, 8192, 16, torch.float16)[1].param_words
    # host words: 0..15 zero points, scales of both signs
    zeros = torch.arange(16, dtype=torch.uint8).repeat(2, 1)
    for dtype in (torch.float16, torch.bfloat16):
        scales = torch.linspace(-0.3, 0.2, 32).to(dtype).reshape(2, 16)
        kw = AwqKernelWeights(w=torch.zeros(1, dtype=torch.uint8), scales=scales, zeros=zeros, in_features=128 * 16,
                              group=128)
        words = kw.param_words()
        assert words.dtype == torch.int32 and words.shape == (2, 16) and kw.param_words() is words
        lo = (words & 0xFFFF).to(torch.int16).view(dtype).double()
        hi = ((words >> 16) & 0xFFFF).to(torch.int16).view(dtype)
        magic = 1024.0 if dtype == torch.float16 else 128.0
        assert torch.equal(hi, scales) and torch.equal(lo, -(magic + zeros.double()))
    lo16 = torch.tensor([-(1024.0 + z) for z in range(16)], dtype=torch.float16)
    assert torch.equal((lo16 + 960.0).double(), -(64.0 + torch.arange(16).double()))  # fp16's j = 4 correction
    assert AWQ_ZERO_MMA.param_words_host(F16, torch.tensor([0x3C00]), torch.tensor([3])).item() == 0x3C00E403
    with pytest.raises(ValueError, match="param_words"):
        compile_with_cubin("awq_fma", torch.float16, torch.float16, torch.float16,
                           dispatched(4096, 4096, 1, torch.float16)[1], promote_scales=False)
    for dtype, (n, k) in ((torch.float16, (4096, 4096)), (torch.float16, (8192, 8192)), (torch.bfloat16, (8192, 8192))):
        fmt_key, t = dispatched(n, k, 1, dtype)
        s = summarize_cubin(compile_with_cubin(fmt_key, dtype, dtype, dtype, t, promote_scales=True).artifacts.CUBIN)
        assert s.local_memory_ops == 0 and max(s.kernels.values()) <= 128, (dtype, n, k, s.kernels)
        assert not re.search(r"LDG\.E\.U8", s.text), "zero points are loaded as bytes"


def test_awq_param_words_wide_tiles_rule_and_sass(monkeypatch):
    """Session 55 (config.AWQ_PARAM_WORDS_WIDE_TILES): fp16 AWQ's multi-wave decode tiles take the parameter words
    too - the tiles of 4 warps side by side run the register pipeline (no cp.async ring) with the two-CTA hint and
    swapped buffers, the one-CTA-per-SM tiles awq_zmma with one accumulator set and their prefetch order, not those of
    AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N; bf16 keeps its ring and its folded awq; () restores session 54's tiles.
    tile_for_format is idempotent on them. The compiled tiles fit their CTAs per SM without spills or byte loads."""
    from cute_kernels.weight_only import awq as awq_mod

    def dispatched(n, k, m, dtype, sm_count=None):
        path, t = config.awq_select_tile(m, n, k, 132, x_dtype=dtype)
        assert path == "decode", (n, k, m)
        return awq_mod.typical_format_and_tile(path, dtype, t, k=k, n=n, sm_count=sm_count)

    for m in (1, 4, 5):
        for n, k in ((14336, 4096), (16384, 2048), (13824, 3072)):
            fmt_key, t = dispatched(n, k, m, torch.float16)  # N / SMs unknown: session 55's tile in two-CTA slots
            assert config.awq_param_words_kind(config.decode_tile("awq", m, n, 132, scaled=True, k=k)) == "side_ring"
            assert (fmt_key, t.stages, t.warps_n, t.param_words, t.min_ctas_hint, t.swap_registers, t.acc_chains,
                    t.l2_prefetch_mb) == ("awq_zmma", 0, 4, True, 2, True, 1, 0), (n, k, m)
            assert config.tile_for_format(fmt_key, t, k) == t
            fmt_key, t = dispatched(n, k, m, torch.bfloat16)
            assert fmt_key == "awq" and t.stages == 3 and not t.param_words
        for n, k, pf_last in ((11008, 4096, True), (13824, 5120, False), (5120, 8192, False)):
            fmt_key, t = dispatched(n, k, m, torch.float16)
            assert config.is_one_cta_per_sm(t) and t.warps_n != 5, (n, k)
            assert (fmt_key, t.param_words, t.acc_chains, t.min_ctas_hint, t.swap_registers, t.prefetch_last) == (
                "awq_zmma", True, 1, 0, False, pf_last), (n, k, m)
            assert config.tile_for_format(fmt_key, t, k) == t
            assert not dispatched(n, k, m, torch.bfloat16)[1].param_words
        fmt_key, t = dispatched(10240, 4096, m, torch.float16)  # 5 warps side by side: not measured faster
        assert t.warps_n in config.AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N and fmt_key == "awq_fma" and not t.param_words
    monkeypatch.setattr(config, "AWQ_PARAM_WORDS_WIDE_TILES", ())
    assert dispatched(14336, 4096, 1, torch.float16)[1].stages == 3
    assert dispatched(11008, 4096, 1, torch.float16)[0] == "awq_fma"
    monkeypatch.undo()
    for n, k in ((14336, 4096), (16384, 2048), (11008, 4096), (13824, 5120)):
        fmt_key, t = dispatched(n, k, 1, torch.float16, 132)
        s = summarize_cubin(compile_with_cubin(fmt_key, torch.float16, torch.float16, torch.float16, t,
                                               promote_scales=True).artifacts.CUBIN)
        per_sm = 1 if config.is_one_cta_per_sm(t) else config.DECODE_CTAS_PER_SM
        assert s.local_memory_ops == 0 and max(s.kernels.values()) * t.threads * per_sm <= 65536, (n, k, s.kernels)
        assert not re.search(r"LDG\.E\.U8", s.text) and "LDGSTS" not in s.text, (n, k)


def test_awq_side_by_side_one_cta_rule():
    """Session 56 (config.AWQ_SIDE_BY_SIDE_ONE_CTA): where N and the SM count are known (awq_gemm, the CLIs), fp16's
    side-by-side word tile runs one CTA per SM - ceil(N / 16 / SMs) warps side by side x 2 along K, the one-CTA hint,
    swapped buffers, no cap, no L2 prefetch - unless that takes more than 8 warps side by side (fewer SMs), where the
    4 x 2 tile in two-CTA slots stays; None turns it off; bf16 keeps its ring; the result is a one-CTA word tile that
    tile_for_format leaves as it is; the other word tiles do not change."""
    from cute_kernels.weight_only import awq as awq_mod

    def dispatched(n, k, m, dtype, sm_count):
        path, t = config.awq_select_tile(m, n, k, sm_count, x_dtype=dtype)
        assert path == "decode", (n, k, m)
        return awq_mod.typical_format_and_tile(path, dtype, t, k=k, n=n, sm_count=sm_count)

    for n, k, warps in ((14336, 4096, 7), (13824, 4096, 7), (16384, 4096, 8), (15360, 3072, 8), (14328, 2176, 7)):
        assert config.side_by_side_one_cta_warps(n, 132) == warps
        for m in (1, 4):
            assert config.awq_param_words_kind(config.decode_tile("awq", m, n, 132, scaled=True, k=k)) == "side_ring"
            fmt_key, t = dispatched(n, k, m, torch.float16, 132)
            assert (fmt_key, t.warps_n, t.warps_k, t.stages, t.max_ctas_per_sm, t.min_ctas_hint, t.swap_registers,
                    t.param_words, t.acc_chains, t.l2_prefetch_mb) == (
                "awq_zmma", warps, 2, 0, 0, 1, True, True, 1, 0), (n, k, m, t)
            assert config.is_one_cta_per_sm(t) and config.awq_param_words_kind(t) == "one_cta"
            assert -(-n // t.rows_per_cta) <= 132  # one CTA per SM at most
            assert config.tile_for_format(fmt_key, t, k, n, 132) == t
            fmt_key, t = dispatched(n, k, m, torch.bfloat16, 132)
            assert fmt_key == "awq" and t.warps_n == 4 and t.stages == config.AWQ_SIDE_BY_SIDE_RING["stages"]
    assert config.side_by_side_one_cta_warps(14336, 100) is None  # 9 row tiles an SM: more than 16 warps of 128
    path, t = config.awq_select_tile(1, 14336, 4096, 132, x_dtype=torch.float16)
    assert (config.tile_for_format("awq_zmma", t, 4096, 14336, 100).warps_n,
            config.tile_for_format("awq_zmma", t, 4096, 14336, 100).min_ctas_hint) == (4, 2)
    for n, k in ((4096, 4096), (8192, 8192), (11008, 4096)):  # capped and one-CTA word tiles: as before
        path, t = config.awq_select_tile(1, n, k, 132, x_dtype=torch.float16)
        assert dispatched(n, k, 1, torch.float16, 132) == awq_mod.typical_format_and_tile(path, torch.float16, t, k=k)
    old = config.AWQ_SIDE_BY_SIDE_ONE_CTA
    try:
        config.AWQ_SIDE_BY_SIDE_ONE_CTA = None
        assert dispatched(14336, 4096, 1, torch.float16, 132)[1].warps_n == 4
    finally:
        config.AWQ_SIDE_BY_SIDE_ONE_CTA = old


def test_awq_decode_acc_chains_rule_and_sass():
    """Session 44's rule (config.AWQ_DECODE_ACC_CHAINS, applied by the call: config.tile_for_format): AWQ's decode
    tiles with one warp across on the register pipeline alternate their MMAs between 2 accumulator sets for awq_fma
    (fp16) only; bf16's awq, the side-by-side ring tiles, tiles with 2 warps side by side and the tiles decode_tile
    gives (the blob reader's among them) keep one. In the SASS the step's 8 MMAs write two accumulator sets (4 each),
    no spills (both AWQ formats compile with it)."""
    import re

    chains = config.AWQ_DECODE_ACC_CHAINS
    for n, k in ((4096, 4096), (4096, 14336), (2048, 8192)):
        for m in (1, 4, 8):
            tile = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
            assert tile.warps_n == 1 and tile.stages == 0 and tile.acc_chains == 1, (n, k)
            assert config.tile_for_format("awq_fma", tile).acc_chains == chains, (n, k, m)
            assert config.tile_for_format("awq", tile).acc_chains == 1, (n, k, m)
            assert config.decode_tile("awq", m, n, 132, scaled=True, k=k, blob_reader=True).acc_chains == 1
    for n, k in ((14336, 4096), (8192, 8192)):  # the ring tile; 2 warps side by side
        assert config.tile_for_format("awq_fma", config.decode_tile("awq", 1, n, 132, scaled=True, k=k)).acc_chains == 1
    assert config.decode_tile(4, 1, 4096, 132, scaled=True, k=4096).acc_chains == 1
    tile = config.tile_for_format("awq_fma", config.decode_tile("awq", 1, 4096, 132, scaled=True, k=4096))
    for fmt_key, x_dtype in (("awq_fma", torch.float16), ("awq", torch.bfloat16)):
        s = summarize_cubin(compile_with_cubin(fmt_key, x_dtype, x_dtype, x_dtype, tile).artifacts.CUBIN)
        dsts = [m.group(1) for m in re.finditer(r"HMMA\.16816\.F32\S*\s+(R\d+),", s.text)]
        assert len(dsts) == 8 and sorted(dsts.count(r) for r in set(dsts)) == [4, 4], (fmt_key, dsts)
        assert not s.spills, fmt_key


def test_decode_preload_rule_and_sass(monkeypatch):
    """``TileShape.preload_weights`` (config.DECODE_PRELOAD_FORMATS, session 27): a cp.async-ring decode tile issues
    its first weight copies (LDGSTS) before the PDL wait (ACQBULK) with it and none without; the off switch
    (configs.WEIGHT_PRELOAD_ENABLED) clears it."""
    from cute_kernels import configs

    tile = config.decode_tile(8, m=1, n=4096, sm_count=132, k=4096)
    assert tile.stages > 0 and tile.preload_weights
    assert not config.decode_tile(1, m=1, n=4096, sm_count=132, k=4096).preload_weights
    assert not config.decode_tile(4, m=1, n=8192, sm_count=132, k=8192).preload_weights  # int4's register plan
    for preload in (True, False):
        s = _sass("int8", torch.float16, None, replace(tile, preload_weights=preload))
        head = s.text[:s.text.index("ACQBULK")]
        assert ("LDGSTS" in head) == preload, preload
        assert not s.spills
    monkeypatch.setattr(configs, "WEIGHT_PRELOAD_ENABLED", False)
    assert not config.decode_tile(8, m=1, n=4096, sm_count=132, k=4096).preload_weights
    assert not config.decode_tile("awq", m=1, n=4096, sm_count=132, scaled=True, k=4096).preload_weights


def test_awq_register_plan_preload_stays_above_the_wait():
    """Session 47 (``config.DECODE_PRELOAD_REGISTER_FORMATS``): AWQ's register-pipeline decode tiles preload their
    first K step's weights and group parameters. ptxas sinks read-only (.nc) loads below griddepcontrol.wait (ACQBULK),
    so the preloaded vectors are plain loads: with the preload the SASS has the two 128-bit weight loads and the
    four scale / zero-point loads before ACQBULK, without it no load at all; the loop's loads stay read-only. The
    blob's reader (``blob_reader``) does not preload, and BlobDecodeGemm refuses a preloading tile."""
    import cutlass

    from cute_kernels.weight_only import blob_decode, formats

    for n, k in ((4096, 4096), (4096, 14336), (2048, 2048)):
        tile = config.decode_tile("awq", m=1, n=n, sm_count=132, scaled=True, k=k)
        assert tile.stages == 0 and tile.x_ahead and tile.preload_weights, (n, k)
        assert not config.decode_tile("awq", m=1, n=n, sm_count=132, scaled=True, k=k, blob_reader=True).preload_weights
    tile = config.tile_for_format("awq_fma", config.decode_tile("awq", m=1, n=4096, sm_count=132, scaled=True, k=4096))
    for fmt_key, x_dtype in (("awq_fma", torch.float16), ("awq", torch.bfloat16)):
        for preload in (True, False):
            s = summarize_cubin(compile_with_cubin(fmt_key, x_dtype, x_dtype, x_dtype,
                                                   replace(tile, preload_weights=preload)).artifacts.CUBIN)
            head, loop = s.text[:s.text.index("ACQBULK")], s.text[s.text.index("ACQBULK"):]
            loads = re.findall(r"LDG\.E\.\S+", head)
            if preload:
                assert sorted(loads) == sorted(["LDG.E.NA.128"] * 2 + ["LDG.E.U16"] * 2 + ["LDG.E.U8"] * 2) \
                    if fmt_key == "awq_fma" else loads.count("LDG.E.NA.128") == 2, (fmt_key, loads)
            else:
                assert not loads, (fmt_key, loads)
            assert "LDG.E.NA.128.CONSTANT" in loop and not s.spills, fmt_key
    with pytest.raises(ValueError, match="without preload"):
        blob_decode.BlobDecodeGemm(formats.format_by_key("awq_fma"), cutlass.Float16, cutlass.Float16, tile)


def test_awq_prefetch_last_order_and_rule():
    """Session 49 (``config.DECODE_PREFETCH_LAST_MAX_K``): AWQ's preloading register-plan tiles on layers with
    K <= 4096 issue the rows' L2 prefetch (UBLKPF) after the preloaded step's loads, still before the PDL wait
    (ACQBULK), in the fp16 one-fma format (``DECODE_PREFETCH_LAST_FORMATS``); other tiles keep it first. Deeper layers, ring tiles and the blob's reader (no preload) do not take it."""
    for n, k, m, want in ((4096, 4096, 1, True), (4096, 4096, 4, True), (2048, 2048, 1, True),
                          (4096, 2048, 4, True), (4096, 14336, 1, False), (14336, 4096, 1, False)):
        tile = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
        assert tile.prefetch_last == want and config.tile_for_format("awq_fma", tile).prefetch_last == want, (n, k, m)
        assert not config.tile_for_format("awq", tile).prefetch_last  # bf16's exact format keeps the prefetch first
    assert not config.decode_tile("awq", 1, 4096, 132, scaled=True, k=4096, blob_reader=True).prefetch_last
    tile = config.tile_for_format("awq_fma", config.decode_tile("awq", m=1, n=4096, sm_count=132, scaled=True, k=4096))
    assert "pflast" in tile.key and "pflast" not in replace(tile, prefetch_last=False).key
    for last in (True, False):
        s = summarize_cubin(compile_with_cubin("awq_fma", torch.float16, torch.float16, torch.float16,
                                               replace(tile, prefetch_last=last)).artifacts.CUBIN)
        head = s.text[:s.text.index("ACQBULK")]
        prefetch, preload = head.index("UBLKPF"), head.index("LDG.E.NA.128")
        assert (prefetch > preload) == last and s.text.count("UBLKPF") == 1 and not s.spills, last


def test_awq_repack_reader_tiles_take_fragment_order_and_compile():
    """Session 45: every tile that reads AWQ's repack has TileShape.fragment_order (config.tile_for_format, and
    config.awq_repack_tile for forced tiles), with the 2 MB L2 prefetch where the dispatch's tile prefetches; the
    decode, ring and tensor-core tiles compile to their HMMAs in fragment order without spills (thread_setup's tile
    addressing), and the weight loads stay 128-bit."""
    for n, k, m in ((4096, 4096, 1), (4096, 14336, 4), (14336, 4096, 1), (4096, 4096, 16)):
        tile = config.decode_tile("awq", m, n, 132, scaled=True, k=k)
        for fmt_key in ("awq_fma", "awq"):
            t = config.tile_for_format(fmt_key, tile)
            assert t.fragment_order and "frag" in t.key, (n, k, m)
            assert t.l2_prefetch_mb == (config.AWQ_FRAGMENT_L2_PREFETCH_MB if tile.l2_prefetch_mb else 0)
    forced = kernel.TileShape(nt=2, mt=2, warps_n=1, warps_k=4)
    assert config.awq_repack_tile(forced) == replace(forced, fragment_order=True)
    tc = config.awq_repack_tile(config.tensor_core_tile(64, scaled=True, fmt="awq"))
    ring = config.tile_for_format("awq", config.decode_tile("awq", 1, 14336, 132, scaled=True, k=4096))
    one = config.tile_for_format("awq_fma", config.decode_tile("awq", 1, 4096, 132, scaled=True, k=4096))
    for fmt_key, x_dtype, tile, hmma in (("awq_fma", torch.float16, one, 8), ("awq", torch.bfloat16, one, 8),
                                         ("awq", torch.float16, ring, 8), ("awq", torch.float16, tc, 64)):
        s = summarize_cubin(compile_with_cubin(fmt_key, x_dtype, x_dtype, x_dtype, tile,
                                               promote_scales=fmt_key == "awq" and tile.warps_n > 1
                                               and tile.tokens_per_cta <= 16).artifacts.CUBIN)
        assert sum(s.mma.values()) == hmma and not s.spills, (fmt_key, tile)
        assert "LDG.E.128.CONSTANT" in s.text or "LDGSTS.E.BYPASS.128" in s.text, (fmt_key, tile)


@pytest.mark.parametrize("fragment_order", [False, True])
def test_compiled_signature_gives_a_fragment_ordered_w_its_own_rows(monkeypatch, fragment_order):
    """The compiled function checks its arguments' shapes against the fake tensors it was built with: in fragment
    order w has N rounded up to 16 rows (awq_repack), so its rows must not be tied to out's N (session 45: every AWQ
    call with OC % 16 != 0 was refused on the GPU; the CPU emulation does not run those checks)."""
    import cutlass.cute as cute

    from cute_kernels.weight_only import compile as wo_compile

    seen = {}
    monkeypatch.setattr(cute, "compile", lambda kernel, fx, fw, fo, *rest, **kw: seen.update(fw=fw, fo=fo))
    tile = replace(config.decode_tile("awq", 1, 40, 132, scaled=True, k=256), fragment_order=fragment_order)
    wo_compile._build("awq", torch.float16, torch.float16, torch.float16, tile, "sm_90a")
    assert (seen["fw"].shape[0] is seen["fo"].shape[1]) == (not fragment_order)
