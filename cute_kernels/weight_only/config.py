"""Tile shapes and the M dispatch of the weight-only GEMM (numbers and their measurements: docs/weight_only.md).

Three paths: two tile families of the one GEMM kernel template (kernel.py), and for fp16/bf16 activations at
M >= ``DENSE_MIN_M`` the dense path (dequantize_kernel.py writes the dense weight, then one cuBLAS GEMM):

* decode path (M <= ``DECODE_MAX_M``): 1 or 2 token tiles of 8, 8 warps of in-CTA split-K. Rows per warp (``nt``)
  trade activation reuse (each x register feeds ``nt`` tiles) against CTA count: the largest allowed ``nt`` that still
  launches enough CTAs per SM (1.5 by default), so the weight stream has enough loads in flight on every SM. Per format
  and M, ``DECODE_PLANS`` picks the row cap, the weight pipeline (register double buffer or a cp.async shared-memory
  ring of up to 4 K steps) and whether x is prefetched a step ahead. Grids of several waves put 2 or 4 warps side by
  side along N instead (``side_by_side_warps``), so that one wave of CTAs streams longer runs of K.
* tensor-core path (larger M): 32 tokens x 64 rows per warp, two warps along N; each decoded weight fragment feeds 4
  MMAs and each activation fragment 4. Up to ``TENSOR_CORE_SPLIT_K_MAX_M`` tokens 4 warps also split K. Formats with
  group scales use 32-row warps (registers).
* dense path: no tile; the dequantize kernel is a flat elementwise map (its launch shape is fixed in its module).

``DECODE_MAX_M`` and ``awq_dense_min_tokens`` (awq_linear's switch to dequantize + torch.matmul) follow the
crossovers measured on the device (docs/weight_only.md), as does ``DENSE_MIN_M``. All can be overridden per call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .kernel import TileShape

DECODE_MAX_M = 16
# fp16/bf16 x from this many tokens on: dequantize to a dense weight + cuBLAS (the mma.sync tiles run at ~1/3 of
# cuBLAS's WGMMA rate at large M). Measured on the H200 (N = K = 8192, bf16, docs/weight_only.md), tensor-core tiles
# vs dense: M = 64: 42 vs 85 us (4-bit), 56 vs 92 (8-bit); M = 128: 78 vs 86 (4-bit), 104 vs 94 (8-bit); M = 256:
# 133 vs 92, 168 vs 101. The crossover sits at M ~ 100-160 depending on the width; 128 splits it.
DENSE_MIN_M = 128
# awq_linear switches to dequantize + torch.matmul at this many tokens; narrow layers (OC <= AWQ_NARROW_OC) switch
# right after the decode path, because the tensor-core grid of a narrow layer is too small to beat cuBLAS there.
AWQ_DENSE_MIN_TOKENS = 256
AWQ_NARROW_OC = 4096


@dataclass(frozen=True)
class DecodePlan:
    """How the decode tiles of one weight format run up to ``max_m`` tokens: at most ``nt`` 16-row tiles per warp
    (fewer when the grid would not fill the GPU, see ``decode_tile``), the weight pipeline (``ring``: cp.async ring in
    shared memory, else the register double buffer) and whether x and the group parameters are prefetched one K
    step ahead (``x_ahead``; costs registers: 8-32 words of x per token tile)."""

    max_m: int
    nt: int
    ring: bool
    x_ahead: bool
    token_major: bool = False  # M > 8: one token tile per CTA, token tiles adjacent in the grid (TileShape)
    min_ctas_per_sm: float = 1.5  # nt is halved while the grid has fewer CTAs than this per SM (0: never)
    # register pipeline: the buffers swap roles instead of the next step's being copied (TileShape). Measured on the
    # H200 (session 5, wo_swap.py, in the data archive's dropped/): 5-29% slower for the x_ahead plans (AWQ M = 1: 5.3
    # -> 7.2 us at 4096^2; int4 M = 16: 18.1 -> 24.1 us at 8192^2), -9% to +16% for the others; only 2-bit at M <= 8
    # gains consistently (two runs, the second in ABBA order: +3-9% on 5 of 6 points, -2% on one), so only its plan has
    # it.
    swap_registers: bool = False
    stages: int = 0  # ring stages (0: ``ring_stages(nt)``)
    # the plan to use instead of halving ``nt`` when this one would launch fewer than min_ctas_per_sm CTAs per SM
    narrow: "DecodePlan | None" = None
    fields_in_place: bool = False  # TileShape.fields_in_place (FIELDS_IN_PLACE_NOTE below)
    fields_in_place_min_nt: int = 0  # >0: in place too where the tile keeps at least this many tiles per warp


# Per format (bits, or "awq"), first plan whose max_m covers M. Measured on the H200 (N = K = 8192, 2026-11-22,
# docs/weight_only.md): prefetching x one step ahead takes 4-bit M = 1 from 13.1-13.4 to 11.6-12.1 us (3.06-3.15x
# bf16 matmul) and, with one tile per warp (twice the CTAs), 8-bit M = 1 from 23-25 to 20.2 us (3.33 TB/s); at
# M = 16 the extra x registers cost more than they hide (4-bit: 18.2 -> 22.1 us), and 2-/1-bit widths, whose x
# runs are 4-8x longer, lose at every M. Low widths keep up to 4 tiles per warp: more x reuse per loaded
# activation (x bytes per weight byte = 8/bits). 16-byte vectors of two K steps per row (whole 128-byte lines per
# warp) were measured too and lost everywhere (not kept). Token-major grids for 9-16 tokens (one token tile per CTA,
# the two CTAs of a row block adjacent so the second reads the weights from L2) win for 2-bit (M = 16: 25.8 vs
# 31.7 us) and 1-bit (26.2 vs 28.0) and lose for 8-bit, 4-bit and AWQ (22.4 vs 31-45, 17.8 vs 22-29, 23.6 vs 31-38).
#
# Session 7 (H200, benchmarks/experiments/wo_waves.py then wo_dispatch7.py, ABBA order, µs session 6 -> now) changed
# the 9-16-token plans of 4-bit and AWQ. 4-bit: 2 tiles per warp from a 3-stage ring and never halved (halving to 1
# tile at N = 4096 reads each activation fragment for half the rows): M = 16 4096 x 14336 29.8 -> 18.4, 4096^2
# 10.8 -> 7.6, 8192^2 18.1 -> 17.6, 6144 x 4096 11.3 -> 10.4, 11008 x 4096 18.1 -> 18.7. AWQ: 4 tiles per warp
# (64 rows) in registers where that launches >= 0.9 CTAs per SM, else the session-6 plan (``narrow``: its ring beat
# registers on 3 of 4 narrow layers, 5120 x 13824 M = 16 32.2 vs 41.1): M = 16 14336 x 4096 25.0 -> 21.4, 8192^2
# 23.5 -> 20.7, 11008 x 4096 23.6 -> 20.5, 13824 x 5120 28.9 -> 25.2 (M = 12: -3% to +14%). 8-bit: one tile from a
# 3-stage ring won at N = 4096 (4096^2 9.5 -> 8.1) and lost at N = 6144 (10.1 -> 11.6): unchanged.
# 1/2-bit at 9-16 tokens (benchmarks/experiments/wo_lowbit16.py): the token-major plan halved its 4 tiles per warp
# to 1 at N <= 8192 and lost to bf16 matmul on the narrow layers (4096 x 14336 M = 16: 2-bit 52.1 us vs 35.9). Now 4
# tiles per warp, never halved: both token tiles in each CTA from a 3-stage ring where that launches >= 0.9 CTAs per
# SM (each decoded weight feeds 16 tokens: 8192^2 M = 16 2-bit 25.6 -> 17.9, 1-bit 26.1 -> 18.5; 14336 x 4096 24.0 ->
# 18.8, 21.8 -> 17.0), else token-major in registers (4096 x 14336: 52.1 -> 18.1, 35.9 -> 17.7; 4096^2: 17.5 -> 7.1,
# 11.8 -> 6.5).
#
# FIELDS_IN_PLACE_NOTE. Session 8 (H200, benchmarks/experiments/wo_fields.py: the shipped tile of every problem with
# and without TileShape.fields_in_place, ABBA, N x K in {8192^2, 14336 x 4096, 4096 x 14336, 4096^2}, M in {1, 8,
# 16, 64}, fp16 and bf16 x). Fewer shifts is not faster everywhere: the 1-bit decode trades an ALU op for an fma
# per pair, and the AWQ decode holds one zero-point register per field position. Kept where it won on every layer:
# 2-bit at M <= 8 (M = 1: +4-9% on all 8 layer x dtype points, 8192^2 10.47 -> 10.08 us bf16; M = 8: -1% to +8%),
# 1-bit at 9-16 tokens on narrow layers, the token-major plan (4096 x 14336 M = 16 17.8 -> 15.5 us bf16, 18.1 ->
# 15.2 fp16; 4096^2 7.1 -> 6.3, 7.2 -> 6.1), and the tensor-core tiles of 4-bit and AWQ (M = 64: +4-7% on all 8
# points; the bf16 int4 decode is the same code either way), and 1-bit at M <= 8 where a warp keeps >= 2 tiles (the
# wide layers: M = 8 +4-10%, 8192^2 14.2 -> 13.1 us; M = 1 -2% to +3%; on narrow layers, 1 tile per warp, it was
# 15-28% slower). Not kept: 1/2-bit tensor-core tiles (bf16 4-7% slower), AWQ at M = 1 (8192^2 15.5 -> 17.1 us),
# int4 decode in fp16 (-6% to +7%).
_LOW_BIT_16 = DecodePlan(16, 4, True, False, stages=3, min_ctas_per_sm=0.9,
                         narrow=DecodePlan(16, 4, False, False, token_major=True, min_ctas_per_sm=0))
_ONE_BIT_16 = DecodePlan(16, 4, True, False, stages=3, min_ctas_per_sm=0.9,
                         narrow=DecodePlan(16, 4, False, False, token_major=True, min_ctas_per_sm=0,
                                           fields_in_place=True))
DECODE_PLANS = {
    8: (DecodePlan(8, 1, False, True), DecodePlan(16, 2, False, True)),
    4: (DecodePlan(8, 2, False, True), DecodePlan(16, 2, True, False, min_ctas_per_sm=0, stages=3)),
    2: (DecodePlan(8, 4, False, False, swap_registers=True, fields_in_place=True), _LOW_BIT_16),
    1: (DecodePlan(8, 4, False, False, fields_in_place_min_nt=2), _ONE_BIT_16),
    # AWQ at 9-16 tokens keeps 2 tiles per warp on narrow layers too (N = 4096: 128 CTAs): halving to 1 tile was
    # 10-17% slower there (H200, session 4: 4096 x 4096 10.3 vs 9.4 us, 4096 x 14336 27.5 vs 22.8).
    "awq": (DecodePlan(8, 1, False, True),
            DecodePlan(16, 4, False, False, min_ctas_per_sm=0.9,
                       narrow=DecodePlan(16, 2, True, False, min_ctas_per_sm=0))),
}
# With group scales (promoted onto the partial sums, kernel.promotes_scales) the 4-bit decode runs best from the
# cp.async ring with 2 tiles per warp (H200, session 4, N = K = 8192, group 128, bf16 x: M = 1 16.0 us vs 18.0 for
# the unscaled plan; M = 16 21.2 vs 25.3). At 9-16 tokens the narrow long-K layer (4096 x 14336) lost to bf16 with
# the tiles halved (35.2 us vs 34.2), so like AWQ that plan keeps 2 tiles per warp. Other widths with group scales
# use their unscaled plans (not measured). Session 7 (wo_waves.py): at 9-16 tokens 4 tiles per warp from a 3-stage
# ring where that keeps >= 0.9 CTAs per SM (8192^2 M = 16: 20.5 -> 18.4 us), else 2 (N = 4096, unchanged).
SCALED_DECODE_PLANS = {
    4: (DecodePlan(8, 2, True, False), DecodePlan(16, 4, True, False, min_ctas_per_sm=0.9, stages=3)),
}
RING_BYTES = 96 * 1024  # per CTA: 2 CTAs of 256 threads per SM still fit in 228 KB
TENSOR_CORE_TILE = TileShape(nt=4, mt=4, warps_n=2, warps_k=1)
# Up to this many tokens the tensor-core grid is too small to fill the GPU: split K over 4 warps of the CTA too
# (measured: 2.3x faster at M = 64, 14% slower at M = 256; the crossover in between is not measured).
TENSOR_CORE_SPLIT_K_MAX_M = 128
TENSOR_CORE_SPLIT_K_TILE = TileShape(nt=4, mt=4, warps_n=2, warps_k=4)
TENSOR_CORE_FIELDS_IN_PLACE = (4, "awq")  # formats whose tensor-core tiles decode in place (FIELDS_IN_PLACE_NOTE)
# With per-group scales (and AWQ zero points) the 4-tile warps need > 255 registers and spill (ptxas: 40-80
# local-memory ops); two tiles per warp fit (186-192 registers). Same CTA shape: 2 tiles x 4 warps along N.
SCALED_TENSOR_CORE_TILE = TileShape(nt=2, mt=4, warps_n=4, warps_k=1)
SCALED_TENSOR_CORE_SPLIT_K_TILE = TileShape(nt=2, mt=4, warps_n=4, warps_k=2)


# Session 14: the WGMMA path (sm90/weight_only_wgmma.py, host wgmma.py) for 1/2/4(/8)-bit formats with fp16/bf16 x on
# SM90, from DECODE_MAX_M + 1 to WGMMA_MAX_M tokens; the dense path (dequantize every call + cuBLAS) above. Measured
# on an H100 (2026-11-25, benchmarks/experiments/wo_wgmma.py, wo_wgmma_tune.py, bench_awq.py, bench_weight_only.py;
# docs/weight_only.md): against the dense path it replaces it is faster at every measured M from 17 to 4096 on
# every layer (4-bit N = K = 8192: M = 1024 164.6 vs 234.0 us, M = 4096 668 vs 730) except 14336 x 4096 at 1024
# tokens (AWQ 231.6 vs 223.4, int4 g128 219.3 vs 205.2: 4-7% slower); against the mma.sync tiles 1.2-4.8x at every
# M >= 17. Above 4096 tokens the dequantize pass is amortized over more work and cuBLAS's larger tiles win (not
# measured: the limit is where the measurements stop). Session 21 added 8-bit weights (from 17 tokens: no
# WGMMA_MIN_M entry; benchmarks/experiments/wo_int8_wgmma.py, H100, four layers: at 8-12 tokens the decode path was
# faster on 7 of 8 points, at 16 tokens 4-9% faster on 8192^2 and 4096^2 and 1-3% slower on the two 58.7M-weight
# layers): at 17-4096 tokens 1.4-4.8x faster than the mma.sync tiles and up to 4.4x than the dense path (8192^2,
# bf16 x, M = 128: 37.1 us against 101.9 / 124.2).
WGMMA_MAX_M = 4096
# AWQ on SM90 with one derived copy of the weight: the decode tiles read the WGMMA path's blob and parameter words
# (blob_decode.py) instead of a K-packed repack, so a layer holds the checkpoint + blob + ~0.12x of parameter words
# per format (2.1-2.2x the checkpoint) rather than + repack too (3.2-3.3x). Off by default: session 41 (H100,
# awq_ab41.py (data archive session43/moved/), 1 / 4 tokens on 4096^2, 14336 x 4096 and 4096 x 14336, fp16 / bf16, one
# process; docs/weight_only.md) measured the blob reader at 0.98-1.09x the repack reader's time (median 1.02x; 1.05x /
# 1.09x on 14336 x 4096 at one token) with bench_awq.py's rotation of 240 MB of weights, 0.95-1.05x with 120 MB.
# Set it before a layer's first call (or call clear_weight_caches() after): warm calls keep the path they took.
AWQ_ONE_COPY = False
# Session 15 (H100, wo_crossover.py in the data archive's session43/moved/, both paths forced through the ops, the four
# layers of the issues; docs/weight_only.md): with 16-token tiles, four K-tiles of WGMMAs in flight and two K-tiles per
# stage at 1/2 bits, the WGMMA path beats the decode path from 8 tokens on for 1/2-bit weights (M = 16, 8192^2: 1-bit
# 16.6 -> 11.7 us, 2-bit 17.8 -> 14.2; at 8 tokens 2-bit 8192^2 is the one layer 4% slower) and from 12 for 4-bit (M =
# 16 4096 x 14336: 19.6 -> 16.2; at 12 tokens 8192^2 3% slower, the other three layers faster or equal).
WGMMA_MIN_M = {1: 8, 2: 8, 4: 12}  # bits -> fewest tokens on the WGMMA path (formats without group parameters)
# Session 16 (same script and machine): once the WGMMA path's group parameters came with its TMA stages (they had
# been loaded from global memory by the consumers), weights with group scales and AWQ took it earlier. g128, bf16
# scales (AWQ: fp16), decode / wgmma µs: 1-bit at 4 tokens faster on 4 of 4 layers (8192^2 14.9 / 14.0); 2-bit at
# 8 on 4 of 4 (8192^2 18.7 / 16.4; at 4: 2 of 4); 4-bit at 12 on 2 of 4, one even, 8192^2 2% slower (4096 x 14336
# 22.4 / 17.8; 8192^2 20.1 / 20.5); AWQ at 12 on 4 of 4 (4096 x 14336 24.3 / 20.3; at 8: 1 of 4).
# Session 34 (H100, wo_cluster_layers.py, archive session40/moved/, both paths forced, with the one-fma decodes of
# formats.OneFma on the WGMMA path; docs/weight_only.md): grouped 4-bit weights and AWQ at 8 tokens ran 0.94x / 1.00x
# the decode path's time on 4096^2 and 0.75x / 0.69x on 5120^2 (which wins from one token: its decode grid is 1.2
# waves; no rule for that), so their small-layer entry moved from 12 to 8.
WGMMA_MIN_M_GROUPED = {1: 4, 2: 8, 4: 8}  # the same with group scales (AWQ: its 4-bit entry)
# Session 17 (same script and machine): with two 4-bit K-tiles per stage on 16-token tiles, grouped 4-bit weights and
# AWQ at 8 tokens are faster on the WGMMA path on the three layers of >= 58.7M weights (AWQ 14336 x 4096 18.7 /
# 15.9 us, 4096 x 14336 17.3 / 16.7, 8192^2 20.0 / 18.4; int4 g128 16.7 / 15.7, 18.5 / 16.0, 18.8 / 17.6) and slower
# on 4096^2 (16.8M weights; AWQ 7.3 / 8.2, int4 g128 7.5 / 8.0), where the WGMMA path's fixed cost is a larger share.
# Layers from WGMMA_LARGE_LAYER weights take these entries instead (the cut between the two measured sizes is a choice).
# Session 27 (same script, H100): once 1/2-bit weights preload their first stages before the PDL wait
# (configs.WEIGHT_PRELOAD), grouped 1/2-bit weights on those three layers are faster on the WGMMA path from one token
# (g128, decode / wgmma µs at M = 1: int1 14336 x 4096 13.6 / 11.8, 4096 x 14336 14.5 / 12.0, 8192^2 14.5 / 12.7;
# int2 15.1 / 13.1, 15.4 / 13.8, 15.8 / 14.6; the same at 2, 4 and 8 tokens), while on 4096^2 the decode path still
# wins below 8 tokens (int1 g128 M = 1 5.6 / 6.8). Without group parameters the large layers are split (int1 M = 1:
# 14336 x 4096 11.3 / 9.8, 8192^2 9.1 / 11.1), so those keep WGMMA_MIN_M.
# Session 32 (H100, wo_cluster_layers.py, archive session40/moved/, decode / WGMMA forced, seven layers of >= 2^25
# weights; docs/weight_only.md): at 6 tokens grouped 4-bit weights and AWQ ran 0.86-1.01x the decode path's time on
# the WGMMA path on all seven (AWQ 8192^2 17.7 / 16.4 us, 4096 x 14336 16.8 / 16.6, 14336 x 4096 16.8 / 15.7), so
# their entry moved from 8 to 6 tokens; and see WGMMA_CLUSTER_LONG_K.
# Session 34 (same script as session 34's entry above, five layers of >= 2^25 weights): with int4_fma, grouped int4
# took 0.84-0.99x the decode path's time at one token on all five (12288 x 4096 13.7 / 15.9 us, 14336 x 4096 14.5 /
# 14.8, 4096 x 14336 15.3 / 15.5), so it moved from 6 tokens to one; AWQ (awq_fma) won at one token on 14336 x 4096
# and the 12288-row layers (0.95-0.97x) but lost on 4096 x 14336 and 11008 x 4096 (1.06-1.09x), and keeps 6 there
# (WGMMA_MIN_M_AWQ_LARGE). The session's new entries (these, WGMMA_MIN_M_GROUPED[4], the many-wave ones) against
# session 33's through the dispatch on eight layers the fit had not seen (wo_rule34.py, archive session36/moved/: 8192 x
# 4096, 4096 x 11008, 13824 x 5120, 10240 x 4096, 6144 x 4096, 3584^2, 16384 x 4096, 12288 x 8192; 1-10 tokens): 0.74-
# 1.01x the time on 30 of the 32 points whose path moved (int4 g128 on 12288 x 8192 0.74-0.89x, AWQ 0.91-0.99x), 1.02x
# / 1.04x on 3584^2 at 8 tokens (int4 g128 / AWQ); the unmoved points 0.99-1.02x.
WGMMA_LARGE_LAYER = 1 << 25
WGMMA_MIN_M_GROUPED_LARGE = {1: 1, 2: 1, 4: 1}
WGMMA_MIN_M_AWQ_LARGE = 6
# Session 32 (same run): on layers whose WGMMA plan reduces its two K slices inside 2-CTA clusters (56-66 weight tiles
# of 128 rows: ``wgmma.cluster_split_ctas``) and whose K is at least this, AWQ is faster on the WGMMA path from one
# token. AWQ at 1 / 4 tokens, decode / WGMMA us: 8192 x 28672 53.7 / 49.4, 55.0 / 49.7; 8192 x 14336 29.1 / 27.1,
# 29.9 / 27.4; 7168 x 8192 16.3 / 15.4, 16.9 / 15.5; 8192^2 16.5 / 16.6, 16.6 / 16.4. int4 with g128 scales ran
# 0.92-0.97x on the three 8192-row layers (128 CTAs) and 1.03-1.04x on 7168 x 8192, whose 112 CTAs leave 20 SMs idle
# where the decode path uses all of them (its decode is cheaper than AWQ's, so that matters more): it takes the rule
# where the clusters fill at least WGMMA_CLUSTER_INT4_MIN_FILL of the SMs. With K = 4096 (8192 x 4096: AWQ 8.8 / 9.8
# at one token) and on layers split through the workspace or not split (4096 x 14336, 14336 x 4096: AWQ 1.02-1.09x
# at 1-2 tokens) the decode path stays ahead below 6 tokens. Through the dispatch, old -> new rule (wo_rule32.py,
# with four layers the fit had not seen): AWQ 0.77-1.01x the time at 1-7 tokens (7168 x 16384 at 4 tokens 33.2 ->
# 28.0 us, 8192^2 17.2 -> 16.7), int4 g128 0.85-1.01x where it moves and 1.00-1.05x at 1-4 tokens on the three
# 7168-row layers before WGMMA_CLUSTER_INT4_MIN_FILL excluded them. None turns the rule off (experiments).
WGMMA_CLUSTER_LONG_K = 8192
WGMMA_CLUSTER_INT4_MIN_FILL = 0.95
# Session 52 (H200, awq_ablate44.py, 5 rounds, µs at 1 / 2 / 4 / 6 / 8 tokens): with ``awq_zmma`` (the zero point by a
# second MMA, formats.AwqInt4ZeroMma) the decode tile with two warps side by side beats the cluster-split WGMMA plan
# above at up to 4 tokens. fp16: 8192^2 12.75 / 12.65 / 12.87 / 14.17 / 16.37 against 13.58 / 13.54 / 13.67 / 13.50 /
# 13.81; 7168 x 8192 12.81 / 12.82 / 12.93 / 14.03 / 15.98 against 13.44 / 13.37 / 13.34 / 13.21 / 13.26. bf16 (1 / 2
# / 4 / 6): 8192^2 13.78 / 13.53 / 13.80 / 14.71 against 14.95 / 14.65 / 14.92 / 14.79; 7168 x 8192 13.57 / 13.48 /
# 13.60 / 14.36 against 14.30 / 14.24 / 14.31 / 14.25. So AWQ on those layers takes the decode path up to this many
# tokens where its decode tile is one of those (``awq_zero_mma_decode_first``).
AWQ_ZERO_MMA_LONG_K_MAX_M = 4
# Session 31 (H100, benchmarks/experiments/wo_sync_mma.py; docs/weight_only.md): with mma.sync consumers at <= 8
# tokens (wgmma.SYNC_MMA_MAX_M) the WGMMA path overtakes the decode path earlier. Unscaled 1/2-bit weights on the three
# large layers at 4 tokens, decode / WGMMA us: int1 14336 x 4096 10.9 / 8.7, 4096 x 14336 12.2 / 9.8, 8192^2 9.7 /
# 9.1; int2 12.9 / 10.5, 13.7 / 11.3, 11.4 / 10.9. With two accumulator chains in those consumers 1-bit weights win
# from one token on two of the three (session 30's dispatch -> this one, wo_sync_dispatch.py, at M = 1: 14336 x 4096
# 11.0 -> 8.4 us, 8192^2 8.7 -> 8.4, 4096 x 14336 8.8 -> 9.2), 2-bit ones not (8192^2 decode 10.1 / WGMMA 10.4).
# Grouped 2-bit weights on 4096^2 at 4 tokens were faster on the forced WGMMA path (6.6 / 6.2 us) but not through the
# dispatch (6.9 -> 7.0-7.1 in two runs), so they keep WGMMA_MIN_M_GROUPED. Unscaled 4-bit weights and AWQ keep their
# entries (the decode path wins at 1-4 tokens on three of four layers).
WGMMA_MIN_M_LARGE = {1: 1, 2: 4}
# Session 32 (H100, wo_cluster_layers.py, archive session40/moved/, decode / WGMMA forced, unscaled int2 at 1-3 tokens):
# on large layers whose WGMMA tiles need no K split (>= 112 row tiles of 128: 14336 x 4096, 28672 x 4096, 13824 x 5120,
# 28672 x 8192) the WGMMA path ran 0.78-0.94x the decode path's time (14336 x 4096 at one token 12.3 / 10.2 us; the
# decode path's 2-bit tile on those layers, 64 rows per CTA, streams at ~1.2 TB/s), on the six split ones 0.88-1.28x
# at one token. Eight held-out layers measured after the rule was drawn: the four unsplit 0.78-0.91x (16384 x 4096,
# 16384 x 2048, 16384 x 6144, 14336 x 8192), the four split 1.01-1.21x (18432 x 7168, 22016 x 4096, 24576 x 1536,
# 9216 x 4096). So unscaled weights of these widths on unsplit large layers take the WGMMA path from these token counts.
# (Three of the split held-out layers are many-wave ones, which now run tail-split plans and take the small layers'
# entries, then WGMMA_MIN_M_MANY_WAVES.)
WGMMA_MIN_M_LARGE_UNSPLIT = {2: 1}
# Session 32 (same script; wo_cluster_layers_lowbit_waves.json, _grouped_waves.json, _grouped_waves_m8.json): the
# large-layer entries above were fitted on layers whose WGMMA plan is at most one wave of work units. On layers where
# splitting every tile would make more than ``wgmma.SPLIT_MAX_WAVES`` waves (``wgmma.many_waves``: 12288-24576 rows),
# measured with those every-tile plans, they lost at few tokens: unscaled int1 at one token 1.01-1.26x the decode path's
# time on all eight such layers measured (12288 x 4096 9.7 / 12.3 us), int1 / int2 at 4 tokens 0.97-1.20x (decode
# faster or even on 7 of 8 each); on five of them AWQ at 6 / 8 tokens 0.92-1.16x / 0.89-1.12x, int4 g128 at 8
# 0.95-1.11x, int2 g128 at one token 0.97-1.10x, int1 g128 0.79-1.09x; at the small layers' entries (WGMMA_MIN_M /
# WGMMA_MIN_M_GROUPED) the WGMMA path was ahead or even (AWQ at 12 tokens 0.87-1.00x, int4 g128 0.91-1.08x, int2
# g128 at 8 0.89-1.02x, int1 g128 at 4 0.77-1.02x). So those layers take the small layers' entries. Those layers now
# run tail-split plans, 1.1-1.4x faster (wgmma.SPLIT_MAX_WAVES), against which the decode path was measured only for
# int2 (one token: WGMMA 0.84-0.94x on five layers) and AWQ / int4 g128 at 8-16 tokens (WGMMA ahead on all measured):
# the entries may move earlier there once measured.
# Session 33 (H100, wo_many_wave_entries.py, archive session36/moved/; both paths forced through the ops, tail-split
# plans, the five layers above at 1-12 tokens; docs/weight_only.md), WGMMA / decode time at one token over the five:
# int1 0.68-0.86, int2 0.84-0.96, int1 g128 0.53-0.79, int2 g128 0.76-0.86. Then through the dispatch on six layers
# the fit had not seen (18944 x 3584, 12288 x 5120, 24576 x 2048, 17920 x 5120, 21504 x 3072, 12288 x 8192), these
# entries against the small layers' at 1-6 tokens: 0.62-0.99x the time on 83 of 84 points (1.12x once, int2 g128 on
# 12288 x 8192 at 2 tokens; 0.88x / 0.92x at 1 / 4). 4-bit weights were mixed at 1-6 tokens: AWQ 0.76-1.02x on the
# fitted five, 0.77-1.26x held out (slower on 12288 x 5120 and 12288 x 8192, whose 96 whole tiles leave 36 SMs idle),
# int4 g128 0.88-1.14x held out, unscaled int4 0.95-1.01x, so they keep the small layers' entries, except AWQ from 8
# tokens: 0.69-0.87x at 8 on the fitted five and 0.72-0.95x held out (int4 g128 at 8 held out: 0.84-1.06x; unscaled
# int4 0.94-1.07x). None: the small layers' entries for every width (session 32's rule; experiments).
# Session 34 (wo_cluster_layers.py with the one-fma decodes): on 12288 x 4096 and 12288 x 5120 grouped int4 ran
# 0.82-0.86x the decode path's time at 1-4 tokens and AWQ 0.92-0.95x, so both take the WGMMA path from one token
# on many-wave layers too (session 33's exact decodes lost there at 1-6 tokens).
WGMMA_MIN_M_MANY_WAVES = {1: 1, 2: 1}
WGMMA_MIN_M_GROUPED_MANY_WAVES = {1: 1, 2: 1, 4: 1}  # with group scales
WGMMA_MIN_M_AWQ_MANY_WAVES = 1
# AWQ's losses at 1-6 tokens above were on the 12288-row layers, whose 96 tiles fill 96 of the 132 CTA slots. On the
# many-wave layers whose 16-token plan has at least one full wave of whole tiles (``wgmma.full_wave``: >= 132 tiles of
# 128 rows), the WGMMA path was ahead at one token on all eight measured (0.76-0.95x forced on four fitted, 0.81-0.94x
# through the dispatch on four held out; 2 / 4 tokens: 1.02x / 1.01x once each). Drawn from those, the rule was then
# checked through the dispatch on six layers not measured before (19200 x 4096, 20480 x 5120, 22528 x 4096, 24576 x
# 4096, 17408 x 4096, 19456 x 2560; wo_many_wave_entries.py WO_AWQ_FULL_WAVE=1): 0.81-0.96x the time at 1, 2, 4 and 6
# tokens on all 24 points (22528 x 4096 at one token 0.86x), 12288 x 4096 unchanged. None: the 8 above there too.
WGMMA_MIN_M_AWQ_FULL_WAVE = 1
# Session 46 (H100, benchmarks/experiments/awq_decode_wgmma46.py: awq_gemm with path="decode" / "wgmma" forced and as
# dispatched, CUDA-graph medians of 5 interleaved rounds over 240 MB of rotating weight sets, float64-checked; fp16 and
# bf16 x; docs/weight_only.md "Status"): once the repack was stored in fragment order (session 45) the one-warp-across
# decode tiles overtook the WGMMA path at 6-8 tokens on some layers the entries above send to it. decode / WGMMA time:
# * small layers whose decode grid is at most one wave (16-row CTAs <= DECODE_CTAS_PER_SM x SMs, N <= 4224 on 132
#   SMs) with K <= WGMMA_AWQ_SMALL_MAX_K, at 8 tokens (fp16 / bf16): 4096^2 0.95 / 0.92, 3584^2 0.94 / 0.92, 3072^2
#   0.92 / 0.88, 2048 x 8192 0.99 / 0.97, 1024 x 4096 0.82 / 0.80; held out: 3840^2 0.94 / 0.91, 2048 x 5632 0.91 /
#   0.91, 4096 x 2048 0.79 / 0.80, 2048^2 0.62 / 0.62. Left out, where the WGMMA path stayed ahead: multi-wave
#   decode grids (5120 x 3072 1.37x, 6144 x 2048 1.21x, 8192 x 2048 1.15x at 8 tokens) and K > 8192 (1536 x 8960
#   1.05x / 1.02x, 2560 x 10240 1.26x). From 9 tokens the WGMMA path was ahead wherever measured except the two
#   smallest (2048^2, 4096 x 2048: not taken);
# * large layers whose decode grid is one full wave (``awq_decode_full_wave``: between AWQ_FULL_DECODE_WAVE of the
#   2-per-SM slots, N ~4013-4224 on 132 SMs), at 6 tokens: 4096 x 14336 0.94 / 0.91, 4096 x 11008 0.95 / 0.90,
#   4096 x 12288 0.92 / 0.89; held out: 4096 x 8192 0.94 / 0.90, 4096 x 16384 1.00 / 0.95, 4096 x 28672 0.96 / 0.93.
#   At 7 tokens 0.98-1.02 in fp16, so from 7. 3840 x 15360 (0.91 of a wave, held out) lost in fp16 (1.03x; bf16
#   0.96x), which set the bound's 0.95; 3584 x 18944 (0.85) 1.04 / 0.97. 14336 x 4096, 8192^2: WGMMA ahead from 6.
WGMMA_MIN_M_AWQ_SMALL = 9
WGMMA_AWQ_SMALL_MAX_K = 8192
# Session 48 (H100, awq_decode_wgmma46.py, fp16, decode / WGMMA forced, medians of 3 interleaved rounds; docs/
# weight_only.md "Status"): on short-K small layers the decode tiles stay ahead through 16 tokens, which the entry above
# sent to the WGMMA path from 9. decode / WGMMA time at 9 / 12 / 16 tokens: 2048^2 0.74 / 0.76 / 0.80, 1024 x 2048
# 0.80 / 0.82 / 0.85, 2048 x 1024 0.59 / 0.61 / 0.64, 1536 x 2048 0.75 / 0.76 / 0.80, 2560 x 2048 0.87 / 0.88 / 0.93,
# 3072 x 2048 0.91 / 0.93 / 0.98, 1024^2 0.66 / 0.67 / 0.67, 4096 x 1024 0.72 / 0.73 / 0.76, 1536^2 0.72 / 0.75 /
# 0.78; at the bounds 4096 x 2048 (8.4M weights) 0.96 / 0.99 / 1.01, and with K = 4096 the WGMMA path ahead (1024 x
# 4096 1.11-1.19, 2048 x 4096 1.05-1.15). So: K <= WGMMA_AWQ_SHORT_MAX_K and N * K <= WGMMA_AWQ_SHORT_MAX_WEIGHTS
# run the decode tiles at every M they take (<= DECODE_MAX_M). None turns it off (experiments).
WGMMA_AWQ_SHORT_MAX_K: int | None = 2048
WGMMA_AWQ_SHORT_MAX_WEIGHTS = 3072 * 2048
WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE = 7
AWQ_FULL_DECODE_WAVE = (0.95, 1.0)


# Session 46 (same script, H100, fp16; docs/weight_only.md "Status"): on small layers (< WGMMA_LARGE_LAYER weights)
# whose AWQ decode grid at one token is more than one wave of DECODE_CTAS_PER_SM x SMs CTAs (side-by-side warps
# included: decode_tile), the WGMMA path was ahead from one token: WGMMA / decode time at 1 / 4 / 6 tokens 5120 x 3072
# (1.2 waves) 0.86 / 0.82 / 0.78, 6144 x 2048 (1.45) 0.99 / 0.96 / 0.92 (session 34: 5120^2, 1.2 waves, 0.69-0.75
# with the exact decode); held out after the rule was drawn: 5120 x 4096 0.93 / 0.89 / 0.80, 4608 x 4096 0.94 / 0.89 /
# 0.80, 5632 x 2048 0.99 / 0.99 / 0.93, 6144 x 3072 1.04 / 1.00 / 0.87 (the one loss: 1.04x at one token). 8192 x
# 2048 and 7168 x 2048, whose side-by-side grids are one wave, keep the decode tiles (WGMMA 0.97-1.02x there).
WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE = 1


def awq_decode_multi_wave(n: int, k: int, sm_count: int) -> bool:
    """AWQ's one-token decode grid (``decode_tile``, side-by-side warps included) is more than one wave of 256-thread
    CTAs (as measured for WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE, i.e. before ``one_cta_per_sm_warps``)."""
    tile = decode_tile("awq", 1, n, sm_count, k=k)
    if is_one_cta_per_sm(tile):
        return True  # a multi-wave grid turned into one CTA per SM
    return -(-n // tile.rows_per_cta) > DECODE_CTAS_PER_SM * sm_count


def awq_decode_ctas(n: int) -> int:
    """CTAs of AWQ's 1-8 token decode grid where it is at most one wave: 16 rows each (one warp across)."""
    return -(-n // 16)


def awq_decode_full_wave(n: int, sm_count: int) -> bool:
    """AWQ's 1-8 token decode grid (16-row CTAs, one warp across) fills between AWQ_FULL_DECODE_WAVE of the
    DECODE_CTAS_PER_SM x SMs slots."""
    lo, hi = AWQ_FULL_DECODE_WAVE
    return lo * DECODE_CTAS_PER_SM * sm_count <= awq_decode_ctas(n) <= hi * DECODE_CTAS_PER_SM * sm_count


def wgmma_min_m(bits: int, scaled: bool = False, awq: bool = False, weights: int | None = None,
                n: int | None = None, k: int | None = None, sm_count: int = 132, blob_reader: bool = False) -> int:
    """Fewest tokens that take the WGMMA path (when eligible) instead of the decode path; ``weights``: N * K of the
    layer, if known (large layers switch earlier: ``WGMMA_MIN_M_GROUPED_LARGE``, ``WGMMA_MIN_M_LARGE``); ``n``, ``k``:
    the layer's shape, if known (grouped 4-bit weights on long-K layers split in clusters: ``WGMMA_CLUSTER_LONG_K``;
    unscaled 2-bit weights on large layers whose plan splits no tile of its full waves:
    ``WGMMA_MIN_M_LARGE_UNSPLIT``; layers whose every-tile split would make many waves: ``WGMMA_MIN_M_MANY_WAVES``;
    AWQ on short-K small layers: never below DECODE_MAX_M + 1 (``WGMMA_AWQ_SHORT_MAX_K``); on
    layers whose decode grid is one wave: ``WGMMA_MIN_M_AWQ_SMALL``, ``WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE``, on
    small layers whose decode grid is more than one: ``WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE``; measured on the repack's
    fragment-ordered tiles, so not for ``blob_reader`` (``config.AWQ_ONE_COPY``))."""
    from . import wgmma  # the plan-shaped rules ask the WGMMA path's planner (it imports this module)

    grouped = scaled or awq
    shape = n is not None and k is not None
    large = weights is not None and weights >= WGMMA_LARGE_LAYER
    if large and shape and wgmma.many_waves(n, k, sm_count):
        if awq and WGMMA_MIN_M_AWQ_MANY_WAVES is not None:
            if WGMMA_MIN_M_AWQ_FULL_WAVE is not None and wgmma.full_wave(n, k, sm_count):
                return WGMMA_MIN_M_AWQ_FULL_WAVE
            return WGMMA_MIN_M_AWQ_MANY_WAVES
        many = WGMMA_MIN_M_GROUPED_MANY_WAVES if grouped else WGMMA_MIN_M_MANY_WAVES
        if many is not None and bits in many:
            return many[bits]
        large = False  # the small layers' entries
    if grouped and bits == 4 and WGMMA_CLUSTER_LONG_K is not None and shape and k >= WGMMA_CLUSTER_LONG_K:
        ctas = wgmma.cluster_split_ctas(n, k, sm_count)
        if ctas and (awq or ctas >= WGMMA_CLUSTER_INT4_MIN_FILL * sm_count):
            return 1
    if grouped and large and bits in WGMMA_MIN_M_GROUPED_LARGE:
        if awq and WGMMA_MIN_M_AWQ_LARGE is not None:
            if (WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE is not None and n is not None and not blob_reader
                    and awq_decode_full_wave(n, sm_count)):
                return WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE
            return WGMMA_MIN_M_AWQ_LARGE
        return WGMMA_MIN_M_GROUPED_LARGE[bits]
    if not grouped and large and bits in WGMMA_MIN_M_LARGE_UNSPLIT and shape and not wgmma.splits_k(n, k, sm_count):
        return WGMMA_MIN_M_LARGE_UNSPLIT[bits]
    if not grouped and large and bits in WGMMA_MIN_M_LARGE:
        return WGMMA_MIN_M_LARGE[bits]
    small = shape and weights is not None and weights < WGMMA_LARGE_LAYER  # (not a many-wave layer, tables off)
    if (awq and WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE is not None and small and not blob_reader
            and awq_decode_multi_wave(n, k, sm_count)):
        return WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE
    if (awq and WGMMA_AWQ_SHORT_MAX_K is not None and small and not blob_reader and k <= WGMMA_AWQ_SHORT_MAX_K
            and n * k <= WGMMA_AWQ_SHORT_MAX_WEIGHTS):
        return DECODE_MAX_M + 1
    if (awq and WGMMA_MIN_M_AWQ_SMALL is not None and small and not blob_reader and k <= WGMMA_AWQ_SMALL_MAX_K
            and awq_decode_ctas(n) <= DECODE_CTAS_PER_SM * sm_count):
        return WGMMA_MIN_M_AWQ_SMALL
    table = WGMMA_MIN_M_GROUPED if grouped else WGMMA_MIN_M
    return table.get(bits, DECODE_MAX_M + 1)


def awq_dense_min_tokens(oc: int, wgmma: bool = False) -> int:
    """Tokens from which awq_linear runs dequantize + dense matmul; ``wgmma``: the fused GEMM can take the WGMMA
    path (then the dense path starts where it stops winning)."""
    if wgmma:
        return WGMMA_MAX_M + 1
    return DECODE_MAX_M + 1 if oc <= AWQ_NARROW_OC else AWQ_DENSE_MIN_TOKENS


def ring_stages(nt: int, threads: int = 256) -> int:
    return max(2, min(4, RING_BYTES // (2 * nt * threads * 16)))


def decode_plan(fmt: int | str, m: int, scaled: bool = False) -> DecodePlan:
    """``fmt``: the bit width of the signed formats, or "awq"; ``scaled``: the weights carry group scales."""
    plans = SCALED_DECODE_PLANS.get(fmt, DECODE_PLANS[fmt]) if scaled else DECODE_PLANS[fmt]
    for plan in plans:
        if m <= plan.max_m:
            return plan
    raise ValueError(f"the decode path handles M <= {plans[-1].max_m} tokens; got M = {m}")


# Weight bytes a decode grid should keep in flight per SM. A warp's K step of one 16-row tile is 1 KB (32 lanes x 2 rows
# x 16 B); the register pipeline keeps one step ahead, so an SM holds (CTAs per SM) x 8 warps x nt KB. Where the grid
# leaves that below this (N <= 4096: 256 CTAs of 16 rows, ~16 KB per SM), the M <= 8 plans of the 2/4/8-bit formats take
# the cp.async ring with two steps ahead (3 stages) instead. Measured on the H200 (session 6, wo_inflight.py, now in the
# data archive's session31/moved/, ABBA order, µs registers -> ring): 4096 x 14336 M = 1 int8 23.79 -> 22.57, int4 14.80
# -> 12.14, int2 13.08 -> 10.42; M = 8 int4 17.82 -> 14.76, int2 27.80 -> 21.20; 4096 x 4096 M = 1 int8 7.99 -> 7.31,
# int4 5.82 -> 5.15, int2 5.70 -> 4.81 (every 2/4/8-bit row at M in {1, 4, 8} gained 5-24%). 1-bit keeps its registers
# (ring: 8.35 -> 8.35 at M = 1, 5% slower at M = 4 / 8: its steps are long in compute). At N = K = 8192 (~32 KB per SM)
# the registers stay best (wo_depth.py: int4 11.64 vs 11.74 for a 3-stage ring with nt 2; deeper rings, 4-8 stages, were
# slower everywhere: 12.5-19.5).
DECODE_MIN_INFLIGHT_KB = 24

# Grids of several waves: warps side by side along N. A decode CTA runs 8 warps on the same rows, each taking every
# 8th K step, so a CTA's warps walk only K / (8 * step) steps each (4 at K = 4096 for 4-bit: 128 K values a step);
# where the grid needs more than one wave of CTAs, every wave pays the ramp of such short streams again. Putting
# ``warps_n`` = 2 or 4 warps side by side along N (8 / warps_n along K) turns the grid into one wave of CTAs whose
# warps walk 2-4x longer streams. Taken only where the new grid is one nearly full wave (``DECODE_ONE_WAVE`` of the
# ``DECODE_CTAS_PER_SM`` x SMs slots) and each warp walks at most ``DECODE_MAX_STEPS_PER_WARP`` steps; for the 4/8-bit
# formats and AWQ (the ones measured). Measured on the H200 (session 7, benchmarks/experiments/wo_waves.py, ABBA,
# µs): AWQ 14336 x 4096 M = 1 16.9 -> 15.2 (4 side by side), M = 4 17.9 -> 16.3; AWQ 8192^2 M = 1 16.0 -> 15.4 (2),
# M = 4 17.3 -> 16.4; int4 14336 x 4096 M = 1 12.2 -> 11.3 (2), with group-128 scales 16.1 -> 13.9, M = 16 (2 tiles)
# 18.8 -> 16.3 / 22.9 -> 18.7. Where the rule says no it also lost in the sweep: one-wave grids (N = 4096, int4 at
# 8192^2: 11.6 -> 16.5 with 2), 11008 x 4096 AWQ (2.6 waves -> 1.3: 13.1 -> 15.1), 8-bit with 32 steps per warp
# (8192^2: 19.8 -> 26.6).
DECODE_CTAS_PER_SM = 2  # 256-thread decode CTAs of <= 128 registers and <= 96 KB of ring
DECODE_ONE_WAVE = (0.8, 1.0)
DECODE_MAX_STEPS_PER_WARP = 16


def side_by_side_warps(fmt: int | str, rows_per_warp: int, n: int, k: int, sm_count: int) -> int:
    """``warps_n`` of a decode CTA (module comment above): 1, 2 or 4."""
    if fmt not in (4, 8, "awq"):
        return 1
    bits = 4 if fmt == "awq" else fmt
    slots = DECODE_CTAS_PER_SM * sm_count
    n_steps = -(-k * bits // 8 // 64)  # 64-byte K steps of a weight row
    if -(-n // rows_per_warp) <= slots:
        return 1
    for warps_n in (2, 4):
        ctas = -(-n // (rows_per_warp * warps_n))
        lo, hi = DECODE_ONE_WAVE
        if lo * slots <= ctas <= hi * slots and -(-n_steps // (8 // warps_n)) <= DECODE_MAX_STEPS_PER_WARP:
            return warps_n
    return 1


# Session 10 (docs/weight_only.md): the leading bytes of every weight row, DECODE_L2_PREFETCH_MB over the whole
# weight, asked of L2 before the wait for the previous grid (TileShape.l2_prefetch_mb). Measured twice: faster for
# the 4-bit formats (with or without group scales) at every decode M, for 2-bit and AWQ up to 8 tokens, on layers at
# least as wide as deep (N >= K); slower elsewhere (long K, 1-bit, int8 at 4096^2, AWQ and 2-bit at 16 tokens),
# hence the rule: format -> the most tokens it applies to.
# Session 32 (H100, benchmarks/experiments/wo_prefetch_long_k.py, the shipped tile with the prefetch toggled, 5
# interleaved rounds): on layers deeper than wide AWQ gains too wherever its decode grid is one wave (at most
# DECODE_CTAS_PER_SM CTAs per SM): 0.89-0.99x the time at 1-4 tokens on six such layers (4096 x 14336 at one token
# 15.35 -> 14.86 us, 1536 x 8960 7.90 -> 7.06), and on eight held-out ones measured after the rule was drawn, 0.885-
# 0.994x on the six one-wave grids (3072 x 8192, 2560 x 10240, 2048 x 5632, 1024 x 4096, 896 x 4864, 4096 x 12288)
# and 1.00-1.03x on the two multi-wave ones (5120 x 17920, 6144 x 16384; 5120 x 13824 in the first set alike).
# int4 with and without g128 scales lost 2-14% on five of the six first layers, as in session 10, so only the formats
# in DECODE_L2_PREFETCH_ONE_WAVE take it there.
DECODE_L2_PREFETCH_MB = 4
DECODE_L2_PREFETCH_MAX_M = {4: 16, 2: 8, "awq": 8}
DECODE_L2_PREFETCH_ONE_WAVE = ("awq",)  # formats that take it on N < K layers when the grid is one wave

# Session 12 (H100, benchmarks/experiments/wo_cta_cap.py, ABBA, µs shipped -> capped): the decode grids are sized for
# DECODE_CTAS_PER_SM CTAs per SM, but tiles of <= 85 registers with a small ring fit 3-5 per SM, and the block
# scheduler may then stack some SMs deeper than others (the likely cause; the CTA placement was not profiled). Capping
# them at 2 per SM (TileShape.max_ctas_per_sm, through the launch's shared memory) where the grid is at most one such
# wave, for the one-tile-per-warp (nt = 1: 48-80 registers) tiles of the 4- and 8-bit formats - a larger tile has
# registers for 2 CTAs at most, and the cap's shared memory would only shrink its L1 (not measured): 4-bit 4096^2 M =
# 1 / 4 / 8 6.02 / 6.27 / 7.30 -> 5.40 / 5.64 / 6.30, with group-128 scales 6.48 / 6.65 / 7.25 -> 6.02 / 6.33 / 7.00;
# 8-bit M = 16 on N = 4096 9.73 -> 9.31 (K = 4096), 29.27 -> 28.72 (K = 14336); within 1% on 4096 x 14336 at M <= 8
# (4/8-bit). Not taken: 2-bit (4096^2 2-4% slower capped), 1-bit (within 1.5%, slower on 5 of 6 rows), multi-wave
# grids (8-bit 14336 x 4096 and 8192^2 at M <= 8: 10-17% slower, fewer CTAs resident), AWQ (>= 90 registers: 2 per SM
# already).
DECODE_CTA_CAP_FORMATS = (4, 8)
# Session 50 (H200): once the group index became a multiply (kernel.group_of, instead of a division per K step)
# decode tiles with group parameters need fewer registers - AWQ at 1-8 tokens on 4096 x 14336 and 14336 x 4096
# 98-110 -> 80, int2 g128 on 4096 x 14336 90 -> 80 - which lets a third 256-thread CTA onto an SM, and the grids,
# sized for DECODE_CTAS_PER_SM, then ran up to 1.4x slower. So AWQ's and grouped 1/2-bit tiles of <= 8 tokens are
# capped where their shared memory leaves room for it (above it they fit two per SM anyway). Measured, µs at 1 / 4 /
# 8 tokens, CUDA-graph medians of 5-7 interleaved rounds over rotating weights beyond L2:
# * AWQ, fp16 x (awq_ablate44.py: before = olddiv, the division and no cap; uncapped = o:max_ctas_per_sm=0):
#   4096 x 14336 before 11.83 / 11.92 / 13.24, uncapped 15.52 / 15.44 / 16.90, capped 10.97 / 11.42 / 13.50;
#   14336 x 4096 13.39 / 13.45 / 16.94, 17.70 / 17.95 / 23.32, 12.73 / 13.10 / 16.83; 4096^2 4.62 / 5.00 / 5.58,
#   4.47 / 4.73 / 5.34, 4.46 / 4.74 / 5.39 (8192^2 decode 18.33 -> 13.78 at one token; its dispatch is WGMMA).
# * int1 / int2 g128 (wo_cap50.py, uncapped -> capped): 4096 x 14336 int1 13.22 / 16.23 / 27.90 -> 10.36 / 12.67 /
#   20.28, int2 13.87 / 17.31 / 28.98 -> 12.23 / 14.26 / 20.81; 4096^2 int1 4.79 / 6.13 / 9.49 -> 3.87 / 4.73 /
#   7.19, int2 5.26 / 6.50 / 9.80 -> 4.39 / 5.05 / 7.42 (the code before the change not timed for these).
# Not at 9-16 tokens: there the AWQ tiles were not faster capped (14336 x 4096 at 16 tokens: 22.1 µs, the tile's
# bf16-exact build crossing 128 registers, against 17.7 before; that layer's dispatch is WGMMA from one token). Not
# the SM90 blob reader's tiles (config.AWQ_ONE_COPY, not measured).
DECODE_CTA_CAP_GROUPED_FORMATS = ("awq", 1, 2)
DECODE_CTA_CAP_GROUPED_MAX_M = 8

# Session 51 (H200): one CTA per SM for AWQ's multi-wave decode grids. The one-warp-across tile of <= 8 tokens (16
# rows and 8 warps along K per CTA, 2 CTAs per SM) needs several waves once N / 16 exceeds 2 x SMs (N > 4224 on 132
# SMs), and side_by_side_warps turns only nearly full single waves into warps side by side. There the grid becomes one
# CTA per SM instead: warps_n = ceil(N / 16 / SMs) 16-row tiles side by side (at most every SM's share, 3% over the
# ideal on these layers) and warps_k = min(8, AWQ_ONE_CTA_PER_SM["warps_per_sm"] // warps_n) along K (<= 768 threads:
# the 896-thread CTAs of 28672 x 4096 spilled at ptxas's 72 registers and ran 1.4-1.6x slower), the rest of the tile
# as it was (register pipeline, preload, L2 prefetch; no cap - the grid has <= one CTA per SM; folded scales, i.e.
# awq_fma in fp16: quantized_mm.use_promoted_scales). benchmarks/experiments/awq_ablate44.py with
# "o:warps_n=R+warps_k=W+max_ctas_per_sm=0", CUDA-graph medians of 7 interleaved rounds over 240 MB of rotating
# weights, checked against awq_gemm (within 7e-4 of max|ref|, float64 error unchanged); µs shipped -> this at 1 / 4
# tokens, fp16: 11008 x 4096 (6 x 4) 11.62 / 12.04 -> 10.11 / 10.16, 13824 x 5120 (7 x 3) 17.05 / 18.14 -> 15.87 /
# 16.36 (7 x 2 in another run: 17.09 / 17.78 -> 15.70 / 15.84), 5120 x 13824 (3 x 8) 19.11 / 21.05 -> 15.49 / 15.98,
# 10240 x 8192 (5 x 4) 18.52 / 20.28 -> 14.67 / 15.58; bf16 (the exact format): 11008 x 4096 13.21 / 13.50 -> 10.46 /
# 10.49, 13824 x 5120 19.36 / 20.02 -> 16.03 / 16.28, 5120 x 13824 18.45 / 21.72 -> 15.94 / 16.01, 10240 x 8192 20.96
# / 23.04 -> 16.48 / 16.74 (held out: docs/weight_only.md "Status"). The same warps with promoted scales (``awq``) in
# fp16: 10.27-10.83, 16.55, 14.11 µs at one token (two of three slower than awq_fma). Not taken: the single-wave
# layers (4096 x 14336 and 4096^2 with 2 x 8 or 2 x 12: 1.04-1.06x slower), the ring tiles of 14336 x 4096 and 16384 x
# 4096 (7 x 2, 7 x 3, 8 x 3: 0.97-1.10x, in both formats), 28672 x 4096 (14 row tiles per SM; 2 CTAs of 7 x 2:
# 0.96-0.97x, two waves, not taken). Data archive session51/.
AWQ_ONE_CTA_PER_SM = {"max_row_tiles": 8, "warps_per_sm": 24}
DECODE_THREADS = 256  # the decode CTA of the plans: 8 warps (one CTA per SM tiles have more)


def is_one_cta_per_sm(tile: TileShape) -> bool:
    """Whether a decode tile is ``one_cta_per_sm_warps``'s (the only ones wider than DECODE_THREADS)."""
    return tile.threads > DECODE_THREADS


def row_tiles_per_sm(n: int, sm_count: int) -> int:
    """16-row tiles of N rows each SM takes when they are shared out evenly (the widest SM's count)."""
    return -(-(-(-n // 16)) // sm_count)


def one_cta_per_sm_warps(fmt: int | str, n: int, k: int | None, sm_count: int) -> tuple[int, int] | None:
    """(warps_n, warps_k) of the one-CTA-per-SM grid for AWQ's multi-wave decode layers (comment above), else None."""
    if fmt != "awq" or k is None:
        return None
    if -(-n // 16) <= DECODE_CTAS_PER_SM * sm_count:
        return None
    per_sm = row_tiles_per_sm(n, sm_count)
    if per_sm > AWQ_ONE_CTA_PER_SM["max_row_tiles"]:
        return None
    return per_sm, min(8, AWQ_ONE_CTA_PER_SM["warps_per_sm"] // per_sm)


# Session 43 (H100, awq_ring43.py, data archive session44/moved/: forced tiles through awq_gemm, CUDA-graph medians of 5
# interleaved rounds over 240 MB of rotating weight sets, float64-checked): AWQ's 1-8 token tiles with 4 warps side by
# side (layers of ~14-16K rows and K <= 4096, side_by_side_warps) run faster from a 3-stage cp.async ring whose first
# 2 steps load before the PDL wait (DECODE_PRELOAD), without the L2 prefetch, than from the register double buffer:
# 14336 x 4096 at 1 / 4 tokens fp16 15.16 / 15.35 -> 14.39 / 14.70 µs, bf16 15.08 / 15.37 -> 14.15 / 14.69; on six
# layers measured after the rule was drawn (16384 x 4096, 14336 x 2048 / 3584, 15360 x 3072, 13824 x 4096, 16384 x
# 2048) at 1 / 4 / 5 tokens 0.95-1.00x, median 0.965x. Not taken (same runs, time / shipped): 2 warps side by side
# (8192 x 4096 / 6144 0.99-1.00x; 8192^2 and 7168 x 8192 0.98-1.07x, slower at 4 tokens); one warp across (4096^2
# 1.05-1.26x; multi-wave K = 4096 layers 0.76-0.95x in fp16 but 1.05-1.10x in bf16; 18944 x 3584 1.02-1.23x); 4
# stages (1.00-1.02x the 3-stage ring); the ring with the 2-CTA cap (its shared memory shrinks L1: up to 1.36x the
# uncapped ring); a ring of 4 K steps in registers (the loop unrolled by 4: 1.05-1.24x; data archive
# session43/dropped/).
AWQ_SIDE_BY_SIDE_RING = {"min_warps_n": 4, "stages": 3}

# Session 44 (H100, benchmarks/experiments/awq_ablate44.py: the dispatch's tile compiled with and without the change,
# called directly on the repack, CUDA-graph medians of 5-7 interleaved rounds over 240 MB of rotating weight sets, fp16
# x): AWQ's decode tiles with one warp across (the register pipeline; 4096^2, 4096 x 14336 at 1 / 4 tokens) alternate
# their MMAs between 2 accumulator sets (TileShape.acc_chains), so consecutive MMAs of a step do not wait for each
# other: 0.98-1.00x in two runs (4096 x 14336 at 1 token 14.40 -> 14.14 and 14.35 -> 14.11 µs; 4096^2 at 1 token
# 5.34 -> 5.26, 5.45 -> 5.39); 4 sets 1.03-1.05x slower (124 registers). A third run at 1 / 4 / 8 tokens: fp16
# 0.985-1.00x (4096 x 14336 at 1 token 14.34 -> 14.12), but bf16 (the exact ``awq`` format) 1.014-1.03x slower
# (4096^2 at 4 tokens 5.81 -> 5.97): only the formats in AWQ_DECODE_ACC_CHAIN_FORMATS take the sets. The exact format
# is picked at the call (awq.decode_format), so the call applies the rule (``tile_for_format``), not decode_tile.
# Only tiles of one 16-row tile and one token tile per warp (those measured): the 9-16-token register plan (4 x 2
# tiles per warp) spilled with two sets (16 local-memory ops, session 51's compile of every shipped tile); SM90's
# dispatch never ran it (WGMMA there), SM80-class GPUs and a forced path="decode" do.
AWQ_DECODE_ACC_CHAINS = 2
AWQ_DECODE_ACC_CHAIN_FORMATS = ("awq_fma",)

# Session 53 (H200, benchmarks/experiments/awq_ablate44.py via run53b.sh / run53c.sh (archive session53/moved/),
# CUDA-graph medians of 7 interleaved rounds over 240 MB of rotating weights, outputs checked against awq_gemm;
# docs/weight_only.md "Status"). Nsight Compute's source view of two decode tiles at one token: on 8192^2's register
# pipeline (awq_zmma) 19% of the warps' stall samples sat on the copy of the next step's weight registers into the
# current ones (it waits for their load), on 14336 x 4096's ring 12% on the first use of x, whose "ahead" loads
# ptxas had sunk to the end of the step before (both kernels 3.3-3.7 active warps a scheduler, 0.48 issued a cycle).
# Declaring two CTAs per SM (TileShape.min_ctas_hint: .minnctapersm, a budget of 128 registers where ptxas had
# settled for 80-108) keeps those loads where they are written; with the register pipeline unrolled by two
# (swap_registers: no copy to wait on) the capped <= 8-token tiles ran, time with / without, at 1 / 4 tokens:
#   bf16's exact awq, one warp across: 4096^2 0.93 / 0.92, 4096 x 14336 0.89 / 0.89; held out 2048 x 8192 0.77 / 0.76,
#     4096 x 11008 0.87 / 0.87, 3584^2 0.88 / 0.91;
#   fp16's awq_fma, one warp across (one accumulator set: two spill at 128 registers): 4096 x 14336 0.99 / 0.98; held
#     out 2048 x 8192 0.91 / 0.90, 4096 x 11008 0.98 / 0.94, 3584^2 0.94 / 0.97, 1536 x 8960 0.86 / 0.84; but 4096^2
#     1.01 / 1.01 (4 K steps a warp);
#   awq_zmma, two warps side by side, fp16: 8192^2 0.99 / 1.00, 7168 x 4096 0.98 / 1.00, 8192 x 4096 0.99 / 1.01,
#     7168 x 8192 0.98 / 1.01, 8192 x 2048 1.03 / 1.02 (4 K steps a warp); bf16: 8192^2 0.98 / 1.00, 7168 x 4096
#     0.99 / 0.99, 8192 x 4096 0.99 / 1.00.
# The hint alone was 1.01-1.08x slower (the copies at the end of the step wait instead), on the cp.async ring
# (14336 x 4096, 13824 x 3072) 1.03-1.04x; the swap alone had been (session 50: ptxas sank x's loads to their uses).
# So those tiles take both - format -> {warps side by side, as measured: the fewest K steps a warp walks}
# (``awq_decode_swaps``).
AWQ_DECODE_SWAP_MIN_STEPS = {"awq": {1: 0}, "awq_fma": {1: 8}, "awq_zmma": {2: 8}}

# Session 54 (H200, benchmarks/experiments/awq_ablate44.py ParamWords prototype, 7 interleaved rounds, fp16, µs at
# 1 / 4 tokens): awq_zmma's group parameters as one precomputed word per (row, group) (TileShape.param_words: two
# loads a K step instead of four, no per-step conversion of the zero point; 265 instead of 291 SASS instructions per
# two K steps on 8192^2) on the register tiles with the two-CTA hint and swapped buffers: 8192^2 12.59 / 13.20 ->
# 11.74 / 12.41 (and 14.32 -> 13.37 at 6 tokens); one warp across, where fp16 ran awq_fma: 4096 x 14336 11.17 / 11.23
# -> 10.48 / 10.70, 4096^2 4.46 / 4.81 -> 4.23 / 4.63 (zmma with hint and swap but without the words 4.42 / 4.80;
# 8 tokens 5.31 -> 5.42), layers not used to choose 2048 x 8192 5.42 / 5.80 -> 5.29 / 5.67, 1536 x 8960 5.35 / 5.39
# -> 5.13 / 5.29. On 14336 x 4096's cp.async ring mixed (12.56 / 12.75 -> 12.40 / 13.29): not there. So fp16 x
# (awq.DECODE_PARAM_WORDS_DTYPES) runs these tiles in awq_zmma with the words, the hint and the swap, and so does any
# awq_zmma tile of that shape (bf16's two-warp tiles). None: off.
AWQ_PARAM_WORDS_WARPS_N = (1, 2)

# Session 55 (H200, awq_ablate44.py, 5 interleaved rounds, fp16, µs at 1 / 4 tokens, outputs equal to awq_gemm's or
# within 7e-4 of max|ref|, float64 error unchanged): the two multi-wave shapes of AWQ's decode tiles take the words
# too. "side_ring": the tiles of 4 warps side by side (AWQ_SIDE_BY_SIDE_RING, ~14-16K rows at K <= 4096) run the
# register pipeline with the words, the two-CTA hint and swapped buffers instead of their cp.async ring (224 CTAs of
# 64 rows: one wave): 14336 x 4096 12.54 / 13.24 -> 11.41 / 12.30 (5 tokens 13.33 -> 12.58; with a 2 / 4 MB L2
# prefetch 11.55 / 11.63: none); layers not used to choose (a 2 MB prefetch) 16384 x 4096 13.16 / 13.27 -> 11.91 /
# 12.25, 13824 x 3072 10.02 / 10.02 -> 9.19 / 9.28, 14336 x 2048 7.43 / 7.81 -> 6.74 / 7.22, 15360 x 3072 10.18 /
# 10.29 -> 9.37 / 9.46. (bf16, whose ring runs the exact awq: awq_zmma with the words 0.96-0.98x on 14336 / 16384 x
# 4096; not taken.) "one_cta": the one-CTA-per-SM tiles (one_cta_per_sm_warps) in awq_zmma with the words, one
# accumulator set, without the hint or the swap, with decode_tile's prefetch order (fp16 ran awq_fma): 11008 x 4096
# 10.23 / 10.16 -> 8.94 / 9.15 (with the swap 9.67 / 9.91; as dispatched but without prefetch_last 9.28 / 9.80).
# awq_gemm as dispatched with / without (benchmarks/experiments/awq_param_words54.py --before wide, 5 interleaved
# rounds, float64 error 2.2-4.2e-4 of max|ref| against 3.8-6.1e-4), time ratio at 1 / 4 / 5 tokens: side ring 14336
# x 4096 0.92 / 0.94 / 0.94, 16384 x 4096 0.91 / 0.92 / 0.93, 13824 x 4096 0.91 / 0.93 / 0.95, 14336 x 3584 0.91 /
# 0.92 / 0.93, 16384 x 2048 0.88 / 0.89 / 0.89, 14336 x 2048 (1 / 4 / 7) 0.90 / 0.92 / 0.90; one CTA per SM (warps
# side by side x along K) 11008 x 4096 (6 x 4) 0.88 / 0.91 / 0.95, 13824 x 5120 (7 x 3) 0.88 / 0.88 / 0.89, 14336 x
# 8192 (7 x 3) 0.87 / 0.88 / 0.88, 12800 x 3072 (7 x 3) 0.92 / 0.89 / 0.90, 6656 x 6144 (4 x 6) 0.89 / 0.91 / 0.92,
# 5120 x 8192 (3 x 8) 0.95 / 0.98 / 1.00, but 5 x 4 warps 10240 x 4096 0.97 / 1.01 / 1.03, 9216 x 4096 0.94 / 1.01 /
# 1.04: not those (AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N). Two 16-row tiles per warp (nt = 2) on the capped tiles
# were slower: 4096^2 4.26 / 4.50 -> 5.41 / 5.56 (4.47 / 4.74 declaring one CTA per SM), 4096 x 14336 10.49 / 10.53
# -> 14.18 / 14.51, 8192^2 11.70 / 12.05 -> 15.75 / 16.22. Which shapes take the words, besides
# AWQ_PARAM_WORDS_WARPS_N's (None there: none at all).
AWQ_PARAM_WORDS_WIDE_TILES = ("side_ring", "one_cta")
AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N = (5,)

# Session 56 (H200, awq_ablate44.py, 5 interleaved rounds, fp16, outputs equal to awq_gemm's, µs at 1 / 4 tokens):
# the side-by-side word tile above (4 x 2 warps of one 16-row tile each in two-CTA slots: 14336 x 4096's 224 CTAs on
# 132 SMs, so 92 SMs run two CTAs and 40 one) runs one CTA per SM instead: ceil(row tiles / SMs) warps side by side
# x AWQ_SIDE_BY_SIDE_ONE_CTA["warps_k"] along K, with the same per-warp code - the one-CTA hint (.minnctapersm 1:
# 128 registers, the same 264-instruction loop as the 4 x 2 tile's) and swapped buffers, no L2 prefetch: 14336 x
# 4096 (7 x 2, 128 CTAs) 11.42 / 12.13 -> 11.01 / 11.56 (another call 11.63 / 12.10 -> 11.23 / 11.56), 13824 x 4096
# (7 x 2) 11.52 / 11.97 -> 11.07 / 11.46, 14336 x 2048 6.87 / 6.99 -> 6.65 / 6.67, 16384 x 4096 (8 x 2) 11.64 /
# 12.33 -> 11.36 / 12.07, 15360 x 3072 (8 x 2) 9.17 / 9.42 -> 8.96 / 9.26, 16384 x 2048 6.84 / 6.88 -> 6.70 / 6.77
# (the same tiles at 7 tokens 0.91-1.00x). With a 2 MB L2 prefetch 0-1% slower on 14336 x 4096; without the hint
# (ptxas's 94-108 registers, loads sunk to their uses) 12.80-13.84, slower than the 4 x 2 tile (as session 51's 7 x 2
# ring had been). Not on the one-CTA tiles of multi-wave layers: 11008 x 4096 as 6 x 2 with hint and swap 1.05x its
# 6 x 4 (13824 x 5120 as 7 x 2 0.96x its 7 x 3: one layer, left). At most "max_warps_n" side by side (16 warps of
# 128 registers fill an SM's 64K), else (fewer SMs) the 4 x 2 tile stays. None: the 4 x 2 tile everywhere. awq_gemm as
# dispatched with / without (awq_param_words54.py --before side_one_cta) at 1 / 4 / 5 tokens: 14336 x 4096 0.96 / 0.96 /
# 0.94; not used to choose it: 14336 x 3584 0.96 / 0.97 / 0.95, 13824 x 3072 0.97 / 0.97 / 0.96, 15360 x 4096 0.97 /
# 0.99 / 0.99, 16384 x 3584 0.97 / 0.97 / 0.97.
AWQ_SIDE_BY_SIDE_ONE_CTA = {"warps_k": 2, "max_warps_n": 8}


def side_by_side_one_cta_warps(n: int | None, sm_count: int | None) -> int | None:
    """Warps side by side of the side-by-side word tile as one CTA per SM (AWQ_SIDE_BY_SIDE_ONE_CTA) for N rows on
    ``sm_count`` SMs, or None (the rule off, N / SMs unknown, or more warps than an SM holds)."""
    if AWQ_SIDE_BY_SIDE_ONE_CTA is None or n is None or not sm_count:
        return None
    per_sm = row_tiles_per_sm(n, sm_count)
    return per_sm if per_sm <= AWQ_SIDE_BY_SIDE_ONE_CTA["max_warps_n"] else None


def awq_param_words_kind(tile: TileShape) -> str | None:
    """Which of the parameter words' tile shapes a decode tile is, else None: "capped" (AWQ_PARAM_WORDS_WARPS_N's
    comment: the register pipeline of one row tile and one token tile per warp with x_ahead, capped 256-thread CTAs,
    those warps side by side), "side_ring" (the same CTAs with AWQ_SIDE_BY_SIDE_RING's warps and ring) or "one_cta"
    (one_cta_per_sm_warps' register tiles but those of AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N), the last two where
    AWQ_PARAM_WORDS_WIDE_TILES has them."""
    if AWQ_PARAM_WORDS_WARPS_N is None or tile.nt != 1 or tile.mt != 1 or not tile.x_ahead:
        return None
    capped = tile.max_ctas_per_sm == DECODE_CTAS_PER_SM and tile.threads == DECODE_THREADS
    if capped and tile.stages == 0 and tile.warps_n in AWQ_PARAM_WORDS_WARPS_N:
        kind = "capped"
    elif (capped and tile.stages == AWQ_SIDE_BY_SIDE_RING["stages"]
          and tile.warps_n >= AWQ_SIDE_BY_SIDE_RING["min_warps_n"]):
        kind = "side_ring"
    elif is_one_cta_per_sm(tile) and tile.stages == 0 and tile.warps_n not in AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N:
        kind = "one_cta"
    else:
        return None
    return kind if kind == "capped" or kind in AWQ_PARAM_WORDS_WIDE_TILES else None


def awq_param_words_tile(tile: TileShape) -> bool:
    """Whether a decode tile is of a shape that runs awq_zmma with parameter words (``awq_param_words_kind``)."""
    return awq_param_words_kind(tile) is not None


# Session 45 (H100, benchmarks/experiments/awq_ablate44.py, the dispatch's tiles on the same weights in both layouts,
# CUDA-graph medians of 5 interleaved rounds over 240 MB of rotating weight sets, fp16 x, float64-checked): AWQ's
# repack stored in fragment order (awq_repack.py, fragment_order.py: a warp's weight load is 512 contiguous bytes
# instead of 8 rows x 64 bytes) is faster on every decode tile measured, µs row-major -> fragment order (-> with a
# 2 MB L2 prefetch where the tile prefetches): 4096^2 at 1 / 4 / 8 tokens 5.39 / 5.66 / 6.53 -> 5.05 / 5.41 / 6.21
# (-> 4.94 / 5.40 / 6.20), 4096 x 14336 14.08 / 14.75 / 16.14 -> 13.30 / 13.64 / 14.65 (-> 13.26 / 13.54 / 14.56),
# 14336 x 4096 (the side-by-side ring, no prefetch) 14.11 / 14.61 / 17.10 -> 13.65 / 13.91 / 17.12; a 2 MB prefetch
# there was 1.3x slower. A second run in the same call as the session's bench_awq.py, fp16 and bf16, in
# docs/weight_only.md "Status": 0.90-1.00x; 4 MB instead of 2 there 1.00-1.04x slower. Session 40 had measured the
# same layout at 0.96-0.99x on the first two layers (and 1.25x slower on 14336 x 4096's register tiles of the time).
# Every tile reading the repack has it (awq_repack_tile).
AWQ_FRAGMENT_L2_PREFETCH_MB = 2


def tile_for_arch(tile: TileShape, arch: str) -> TileShape:
    """The tile as it runs on ``arch``: itself on SM90; on the SM80-class GPUs (sm_80/86/87/89) without what only SM90
    has - the L2 bulk prefetch (cp.async.bulk.prefetch), the loads before the PDL wait (no PDL there), the CTA cap
    (sized from SM90's shared memory) - and with a cp.async ring that fits the arch's shared memory per CTA (fewer
    stages, else the register pipeline). Not measured on such GPUs (none is lent here): the SM90 choices of tile
    shape stand."""
    from .. import arch as _arch

    if _arch.has_pdl(arch):
        return tile
    from ..sm80.configs import SMEM_PER_BLOCK, SUPPORTED_ARCHS

    if arch not in SUPPORTED_ARCHS:
        raise _arch.unsupported(arch, "the weight-only GEMM (quantized_mm, awq_gemm)")
    limit = SMEM_PER_BLOCK[arch]
    tile = replace(tile, l2_prefetch_mb=0, preload_weights=False, prefetch_last=False, max_ctas_per_sm=0)
    while tile.stages > 2 and tile.ring_bytes + tile.reduction_bytes > limit:
        tile = replace(tile, stages=tile.stages - 1)
    if tile.stages and tile.ring_bytes + tile.reduction_bytes > limit:
        tile = replace(tile, stages=0)
    return tile


def awq_repack_tile(tile: TileShape) -> TileShape:
    """A tile that reads AWQ's repack (in fragment order, awq_repack.py), whichever chose it."""
    return replace(tile, fragment_order=True)


def awq_decode_swaps(fmt_key: str, tile: TileShape, k: int | None) -> bool:
    """Whether a decode tile running ``fmt_key`` over a K of ``k`` takes AWQ_DECODE_SWAP_MIN_STEPS's register plan
    (the two-CTA hint with swapped buffers): the register pipeline of one row tile and one token tile per warp in
    capped 256-thread CTAs (two per SM), with the format's warps side by side, where a warp walks at least the
    format's K steps (``k`` None: only where there is no minimum)."""
    least = AWQ_DECODE_SWAP_MIN_STEPS.get(fmt_key, {}).get(tile.warps_n)
    if least is None or tile.stages or tile.nt != 1 or tile.mt != 1 or not tile.x_ahead:
        return False
    if tile.max_ctas_per_sm != DECODE_CTAS_PER_SM or tile.threads != DECODE_THREADS:
        return False
    if least == 0:
        return True
    return k is not None and -(-k // 128) // tile.warps_k >= least  # a 4-bit K step: 128 values


def tile_for_format(fmt_key: str, tile: TileShape, k: int | None = None, n: int | None = None,
                    sm_count: int | None = None) -> TileShape:
    """The AWQ repack reader's tile for the format key a call runs over a K of ``k`` (and N rows on ``sm_count``
    SMs, where known): fragment order (``awq_repack_tile``) with ``AWQ_FRAGMENT_L2_PREFETCH_MB`` where the tile
    prefetches; for awq_zmma on ``awq_param_words_kind``'s shapes the parameter words and one accumulator set, with the
    two-CTA hint and swapped register buffers but on one CTA per SM (the side-by-side ring: as the register pipeline,
    one CTA per SM with the one-CTA hint where ``side_by_side_one_cta_warps`` says so); the hint, the swap and
    one set alone where ``awq_decode_swaps`` says so (AWQ_DECODE_SWAP_MIN_STEPS), else AWQ_DECODE_ACC_CHAINS
    accumulator sets for the formats in AWQ_DECODE_ACC_CHAIN_FORMATS on decode tiles of one row tile and one token
    tile per warp with one warp across, or one CTA per SM (``one_cta_per_sm_warps``), on the register pipeline; the
    prefetch order of ``decode_tile`` (``prefetch_last``) only for the formats in DECODE_PREFETCH_LAST_FORMATS and on
    the one-CTA word tiles."""
    tile = awq_repack_tile(tile)
    words = awq_param_words_kind(tile) if fmt_key == "awq_zmma" else None
    if fmt_key == "awq_zmma":  # its decode is a lop3 per pair: in place, one shift per word in fp16 (formats.py)
        tile = replace(tile, fields_in_place=True)
    if tile.l2_prefetch_mb:
        tile = replace(tile, l2_prefetch_mb=AWQ_FRAGMENT_L2_PREFETCH_MB)
    if tile.prefetch_last and fmt_key not in DECODE_PREFETCH_LAST_FORMATS and words != "one_cta":
        tile = replace(tile, prefetch_last=False)
    if words == "one_cta":  # (with the prefetch order decode_tile gave it: AWQ_PARAM_WORDS_WIDE_TILES' comment)
        return replace(tile, param_words=True, acc_chains=1)
    wide = side_by_side_one_cta_warps(n, sm_count) if words == "side_ring" else None
    if wide:  # (AWQ_SIDE_BY_SIDE_ONE_CTA: the same warps' code, every SM one equal share)
        return replace(tile, warps_n=wide, warps_k=AWQ_SIDE_BY_SIDE_ONE_CTA["warps_k"], max_ctas_per_sm=0,
                       param_words=True, min_ctas_hint=1, swap_registers=True, acc_chains=1, stages=0)
    if words:  # "capped", or "side_ring", which leaves its ring for the register pipeline (stages 0)
        return replace(tile, param_words=True, min_ctas_hint=DECODE_CTAS_PER_SM, swap_registers=True, acc_chains=1,
                       stages=0)
    if awq_decode_swaps(fmt_key, tile, k):  # (two accumulator sets spill at the hint's 128 registers)
        return replace(tile, min_ctas_hint=DECODE_CTAS_PER_SM, swap_registers=True, acc_chains=1)
    if (fmt_key in AWQ_DECODE_ACC_CHAIN_FORMATS and (tile.warps_n == 1 or is_one_cta_per_sm(tile))
            and tile.nt == 1 and tile.mt == 1 and tile.stages == 0 and tile.acc_chains == 1):
        return replace(tile, acc_chains=AWQ_DECODE_ACC_CHAINS)
    return tile

# Session 12 (H100, benchmarks/experiments/wo_warps_n16.py, ABBA, µs 4 tiles per warp -> 2 tiles with twice the warps
# side by side, the same rows per CTA): 4-bit with group scales at 12 / 16 tokens on layers of <= 40 K steps per row
# (K <= 5120): 11008 x 4096 19.10 / 19.42 -> 17.15 / 18.41, 14336 x 4096 21.22 / 21.53 -> 17.79 / 18.85 (and
# 21.67 -> 18.97 at 16 tokens in an earlier run), 28672 x 4096 (2 -> 4 side by side) 37.05 / 37.26 -> 31.20 / 32.81,
# 13824 x 5120 24.07 / 25.11 -> 20.84 / 22.12; but 8192^2 (64 steps per row) 19.64 -> 24.24 at 16 tokens. With 8 warps
# along K a warp of a short layer walks only 4-5 K steps of its 4 tiles; two warps on 2 tiles each walk twice as many.
# AWQ's 16-token plan (4 tiles per warp in registers) lost 21-28% split the same way in registers, but split *and*
# fed from a 3-stage cp.async ring, as the scaled 4-bit plan is, it gained on the same layers (µs at 12 / 16 tokens):
# 11008 x 4096 20.94 / 21.21 -> 19.29 / 19.67, 14336 x 4096 21.80 / 22.18 -> 19.61 / 20.92, 13824 x 5120 26.50 / 27.00
# -> 24.04 / 25.04; 8192^2 21.33 / 21.65 -> 23.69 / 24.18 (not taken). Unscaled 4-bit has 2 tiles per warp already.
SCALED_16_SPLIT_MAX_K_STEPS = 40
SCALED_16_SPLIT_RING_STAGES = 3  # AWQ's split tile: the ring stages (the scaled 4-bit plan has its own)


def decode_tile(fmt: int | str, m: int, n: int, sm_count: int, ring: bool | None = None,
                x_ahead: bool | None = None, token_major: bool | None = None, scaled: bool = False,
                swap_registers: bool | None = None, k: int | None = None,
                fields_in_place: bool | None = None, blob_reader: bool = False) -> TileShape:
    """The decode tile of ``decode_plan(fmt, m, scaled)``; ``ring`` / ``x_ahead`` / ``token_major`` /
    ``swap_registers`` / ``fields_in_place`` override it. ``k`` (the reduction length) enables the side-by-side warps
    of multi-wave grids (``side_by_side_warps``) and of short-K layers at 9-16 tokens (``SCALED_16_SPLIT_MAX_K_STEPS``);
    small one-tile grids get the CTA cap (``DECODE_CTA_CAP_FORMATS``), and so do AWQ's and grouped 1/2-bit tiles of
    <= 8 tokens (``DECODE_CTA_CAP_GROUPED_FORMATS``) unless AWQ's multi-wave grid becomes one CTA per SM
    (``one_cta_per_sm_warps``). AWQ tiles with 4 warps side by side run from
    the cp.async ring (``AWQ_SIDE_BY_SIDE_RING``) unless ``blob_reader`` (the SM90 blob's reader, ``blob_decode.py``,
    runs the register pipeline only). The accumulator sets of ``tile_for_format`` are the call's to add."""
    plan = decode_plan(fmt, m, scaled)
    if plan.narrow is not None and -(-n // (16 * plan.nt)) < plan.min_ctas_per_sm * sm_count:
        plan = plan.narrow
    token_major = (plan.token_major if token_major is None else token_major) and m > 8
    mt = 1 if m <= 8 or token_major else 2
    nt = plan.nt
    while nt > 1 and -(-n // (16 * nt)) < plan.min_ctas_per_sm * sm_count:  # enough CTAs streaming weights
        nt //= 2
    stages = plan.stages or ring_stages(nt)
    ring_forced = ring is not None
    if ring is None:
        ring = plan.ring
        in_flight_kb = -(-n // (16 * nt)) / sm_count * 8 * nt
        if not ring and not scaled and fmt in (2, 4, 8) and m <= 8 and in_flight_kb < DECODE_MIN_INFLIGHT_KB:
            ring, stages = True, 3
    x_ahead = plan.x_ahead if x_ahead is None else x_ahead
    swap = plan.swap_registers if swap_registers is None else swap_registers
    warps_n = 1 if k is None or token_major else side_by_side_warps(fmt, 16 * nt, n, k, sm_count)
    if ((scaled and fmt == 4 and ring or fmt == "awq" and not ring_forced) and m > 8 and nt == 4 and not token_major
            and warps_n <= 2 and k is not None and -(-k * 4 // 8 // 64) <= SCALED_16_SPLIT_MAX_K_STEPS):
        nt, warps_n = 2, 2 * warps_n  # the same rows per CTA over twice the warps (comment above)
        if not ring:  # AWQ: from the ring, without the register plan's prefetch of x
            ring, stages, x_ahead, swap = True, SCALED_16_SPLIT_RING_STAGES, False, False
    side_ring = (fmt == "awq" and not ring_forced and not blob_reader and not ring and m <= plan.max_m
                 and warps_n >= AWQ_SIDE_BY_SIDE_RING["min_warps_n"])
    if side_ring:
        ring, stages = True, AWQ_SIDE_BY_SIDE_RING["stages"]
    in_place = plan.fields_in_place or 0 < plan.fields_in_place_min_nt <= nt
    in_place = in_place if fields_in_place is None else fields_in_place
    one_wave = -(-n // (16 * nt * warps_n)) <= DECODE_CTAS_PER_SM * sm_count
    prefetch = (DECODE_L2_PREFETCH_MB if m <= DECODE_L2_PREFETCH_MAX_M.get(fmt, 0) and k is not None and not side_ring
                and (n >= k or (fmt in DECODE_L2_PREFETCH_ONE_WAVE and one_wave)) else 0)
    tile = TileShape(nt=nt, mt=mt, warps_n=warps_n, warps_k=8 // warps_n, stages=stages if ring else 0,
                     x_ahead=x_ahead, token_major=token_major, swap_registers=swap and not ring,
                     fields_in_place=in_place, l2_prefetch_mb=prefetch,
                     preload_weights=decode_preload(fmt) and (ring or (fmt in DECODE_PRELOAD_REGISTER_FORMATS
                                                                      and not blob_reader)))
    wide = None
    if tile.nt == 1 and tile.mt == 1 and tile.warps_n == 1 and not tile.stages and not blob_reader:
        wide = one_cta_per_sm_warps(fmt, n, k, sm_count)
    if wide:  # one CTA per SM (AWQ_ONE_CTA_PER_SM): no cap
        tile = replace(tile, warps_n=wide[0], warps_k=wide[1])
    ctas = -(-n // tile.rows_per_cta) * (-(-m // tile.tokens_per_cta) if token_major else 1)
    if (not wide and fmt in DECODE_CTA_CAP_FORMATS and nt == 1 and ctas <= DECODE_CTAS_PER_SM * sm_count
            and tile.ring_bytes + tile.reduction_bytes <= TileShape.cap_smem_bytes(DECODE_CTAS_PER_SM)):
        tile = replace(tile, max_ctas_per_sm=DECODE_CTAS_PER_SM)
    if (not wide and (scaled or fmt == "awq") and fmt in DECODE_CTA_CAP_GROUPED_FORMATS
            and m <= DECODE_CTA_CAP_GROUPED_MAX_M
            and not blob_reader and not tile.max_ctas_per_sm
            and tile.ring_bytes + tile.reduction_bytes <= TileShape.cap_smem_bytes(DECODE_CTAS_PER_SM)):
        tile = replace(tile, max_ctas_per_sm=DECODE_CTAS_PER_SM)
    if (tile.preload_weights and tile.stages == 0 and prefetch and k is not None
            and k <= DECODE_PREFETCH_LAST_MAX_K):
        tile = replace(tile, prefetch_last=True)
    return tile


# Register-plan decode tiles that preload (AWQ's) and prefetch their rows into L2 issue the prefetch after the
# preloaded step's loads (``TileShape.prefetch_last``) on layers with K <= DECODE_PREFETCH_LAST_MAX_K: at most 4 K
# steps per warp, so the first step is much of a warp's path. Session 49 (H100, awq_ablate44.py, ship against
# o:prefetch_last=1 and a second build of the shipped tile as a control, CUDA-graph medians of 7-9 interleaved rounds
# over 240 MB of rotating weights, fp16, outputs within 2e-4 of awq_gemm's), µs before -> after at 1 / 4 tokens:
# 2048^2 2.74 / 2.82 -> 2.65 / 2.74, 3072^2 3.93 / 4.39 -> 3.81 / 4.25, 4096 x 2048 3.44 / 3.59 -> 3.34 / 3.48,
# 4096^2 4.74 / 4.98 -> 4.68 / 4.92, 4.92 / 5.15 -> 4.87 / 5.11 and 4.71 / 4.88 -> 4.68 / 4.83 (three runs, the
# controls within 1%); 4096 x 14336 12.79-12.90 / 12.95-13.01 -> 13.10-13.26 / 13.22-13.28 (slower: 14 steps per
# warp). Archive session49/. bf16 (the exact ``awq`` format, same method, 7 rounds) gained nothing: 2048^2 2.60 /
# 2.82 -> 2.60 / 2.85-2.99, 3072^2 4.10 / 4.11 -> 4.11-4.15 / 4.15-4.16, 4096^2 4.87 / 5.32 -> 4.97 / 5.26-5.29, so
# ``tile_for_format`` applies it to the formats in DECODE_PREFETCH_LAST_FORMATS only (awq_fma: fp16 x).
DECODE_PREFETCH_LAST_MAX_K = 4096
DECODE_PREFETCH_LAST_FORMATS = ("awq_fma",)


# Decode tiles whose first weight loads are issued before the PDL wait (``TileShape.preload_weights``; the contract
# of configs.WEIGHT_PRELOAD): None = ``DECODE_PRELOAD_FORMATS``; True / False force it (experiments). Set on the
# cp.async ring plans, and on the register plans of ``DECODE_PRELOAD_REGISTER_FORMATS``. Session 27 (H100,
# weight_preload.py d0 / d1 (data archive session45/moved/), back to back, rotated weights, ring plans): 4096^2 at
# M = 1 / 4 8-bit 8.89 / 8.58 -> 7.85 / 7.75 µs, 2-bit 4.09 / 5.01 -> 3.80 / 4.82, 4-bit M = 1 5.16 -> 5.03, AWQ at
# 9-10 tokens 0.99x; the large layers within 0.99-1.01x.
# Register plans: until session 47 the preload was a no-op there - ptxas sank the read-only (.nc) loads below
# griddepcontrol.wait. Since then the preloaded step is read with plain loads, which stay above it, and with x_ahead
# the step's group parameters are preloaded too (kernel.py). Session 47 (H100, awq_ablate44.py, ship vs
# o:preload_weights=1 on the repack, CUDA-graph medians of 5 rounds over 240 MB of rotating weights; awq_timeline47.py
# for where the time went): AWQ 4096^2 at 1 / 4 tokens fp16 4.93 / 5.34 -> 4.75 / 5.02 µs, bf16 5.23 / 5.34 ->
# 4.95 / 4.99; 4096 x 14336 fp16 13.08 / 13.42 -> 12.66 / 12.89. The 2 MB L2 prefetch stays: with the preload, 0 MB
# and 4 MB were slower (4.91 / 5.06 µs at 4096^2, 1 token).
DECODE_PRELOAD: bool | None = None
DECODE_PRELOAD_FORMATS: tuple = (2, 4, 8, "awq")
DECODE_PRELOAD_REGISTER_FORMATS: tuple = ("awq",)


def decode_preload(fmt) -> bool:
    from ..configs import WEIGHT_PRELOAD_ENABLED

    if not WEIGHT_PRELOAD_ENABLED:
        return False
    return fmt in DECODE_PRELOAD_FORMATS if DECODE_PRELOAD is None else DECODE_PRELOAD


def tensor_core_tile(m: int, scaled: bool = False, fmt: int | str | None = None) -> TileShape:
    """``scaled``: the weights carry per-group scales (the seed format with group_scales, or AWQ); ``fmt`` (bits or
    "awq"): formats in ``TENSOR_CORE_FIELDS_IN_PLACE`` get the in-place decode."""
    if scaled:
        tile = SCALED_TENSOR_CORE_SPLIT_K_TILE if m <= TENSOR_CORE_SPLIT_K_MAX_M else SCALED_TENSOR_CORE_TILE
    else:
        tile = TENSOR_CORE_SPLIT_K_TILE if m <= TENSOR_CORE_SPLIT_K_MAX_M else TENSOR_CORE_TILE
    return replace(tile, fields_in_place=fmt in TENSOR_CORE_FIELDS_IN_PLACE)


def awq_zero_mma_decode_first(m: int, n: int, k: int, sm_count: int) -> bool:
    """Whether an AWQ call the WGMMA path would take runs faster on the decode path with ``awq_zmma``
    (AWQ_ZERO_MMA_LONG_K_MAX_M's comment): at most that many tokens, K >= WGMMA_CLUSTER_LONG_K, and a decode tile of
    warps side by side on the register pipeline in two CTAs per SM (where both dtypes run the format:
    ``awq.decode_format``)."""
    if m > AWQ_ZERO_MMA_LONG_K_MAX_M or WGMMA_CLUSTER_LONG_K is None or k < WGMMA_CLUSTER_LONG_K:
        return False
    tile = decode_tile("awq", m, n, sm_count, scaled=True, k=k)
    return tile.warps_n > 1 and tile.stages == 0 and not is_one_cta_per_sm(tile)


# Session 53 (H200, benchmarks/experiments/awq_decode_wgmma46.py via run53g.sh (archive session53/moved/), awq_gemm
# with path="decode" / "wgmma" forced, CUDA-graph medians of 5 rounds): with the swapped register tiles
# (AWQ_DECODE_SWAP_MIN_STEPS) the decode path overtook the WGMMA path at 6-8 tokens on layers the entries above send
# to it from 6 or 7. decode / WGMMA µs at 6 / 7 / 8 tokens:
#   fp16: 4096 x 14336 11.97 / 12.31 / 13.38 vs 12.95 / 12.84 / 12.94, 4096 x 11008 9.57 / 10.00 / 10.53 vs 10.99 /
#     10.87 / 10.86, 4096 x 12288 10.87 / 11.32 / 12.00 vs 11.66 / 11.51 / 11.63, 8192 x 4096 7.71 / 7.93 / 8.39 vs
#     8.15 / 8.20 / 8.08, 7168 x 5120 9.03 / 9.20 / 9.74 vs 9.19 / 9.18 / 9.20;
#   bf16 (whose WGMMA path folds the scale per weight with the exact decode): 4096 x 14336 11.93 / 12.19 / 12.92 vs
#     14.48 / 14.47 / 14.53, 4096 x 11008 9.61 / 10.10 / 10.50 vs 12.35 / 12.34 / 12.30, 4096 x 12288 10.53 / 11.03 /
#     11.70 vs 12.97 / 12.92 / 12.93, 8192 x 4096 7.77 / 7.94 / 8.45 vs 8.77 / 8.69 / 8.71, 7168 x 5120 9.41 / 9.58 /
#     9.52 vs 10.00 / 10.06 / 9.88; at 8 tokens also 1536 x 8960 5.84 vs 7.23 and 2048 x 14336 9.22 vs 9.51, but
#     2560 x 10240 9.68 vs 9.14 (the one loss).
# Held out after the entry was drawn (run53h.sh), awq_gemm as dispatched over the faster forced path at 6-8 tokens (and
# 9 in bf16) on 3584 x 14336, 4096 x 8192, 3072 x 12288, 8192 x 5120, 7168 x 6144: 0.99-1.01x on 33 of 35 points,
# 1.04x on fp16 3072 x 12288 at 7 tokens (decode 10.85, WGMMA 10.42), 1.014x at 8 there (the WGMMA path either way).
# So where the dispatch's decode tile is one of those swapped tiles for every AWQ format (``awq_decode_swaps_all``)
# AWQ takes the decode path up to this many tokens per x dtype - except on the long-K layers whose WGMMA plan
# reduces K in clusters (8192^2, 7168 x 8192: WGMMA 13.5-13.8 µs against the decode tile's 14.2-16.4 at 6-8 tokens,
# session 52; their own entry is AWQ_ZERO_MMA_LONG_K_MAX_M). Not measured on other dtypes (fp32 x keeps the entries).
AWQ_SWAPPED_DECODE_MAX_M = {"float16": 7, "bfloat16": 8}


def awq_decode_swaps_all(tile: TileShape, k: int) -> bool:
    """Whether a decode tile takes AWQ_DECODE_SWAP_MIN_STEPS's register plan whichever AWQ format the call runs on it
    (the one-warp-across formats, or awq_zmma with warps side by side)."""
    fmts = ("awq_zmma",) if tile.warps_n > 1 else ("awq", "awq_fma")
    return all(awq_decode_swaps(f, tile, k) for f in fmts)


def awq_swapped_decode_first(m: int, n: int, k: int, sm_count: int, x_dtype) -> bool:
    """Whether an AWQ call the WGMMA path would take runs faster on the decode path's swapped register tiles
    (AWQ_SWAPPED_DECODE_MAX_M's comment): ``x_dtype`` (a torch dtype or its name) in that table and at most its
    tokens, and the layer not one whose WGMMA plan splits K in clusters at K >= WGMMA_CLUSTER_LONG_K."""
    from . import wgmma as _wgmma  # (it imports this module)

    name = str(x_dtype).replace("torch.", "")
    if AWQ_SWAPPED_DECODE_MAX_M is None or m > AWQ_SWAPPED_DECODE_MAX_M.get(name, 0):
        return False
    if WGMMA_CLUSTER_LONG_K is not None and k >= WGMMA_CLUSTER_LONG_K and _wgmma.cluster_split_ctas(n, k, sm_count):
        return False
    return awq_decode_swaps_all(decode_tile("awq", m, n, sm_count, scaled=True, k=k), k)


def awq_select_tile(m: int, n: int, k: int, sm_count: int, path: str | None = None, wgmma: bool = False,
                    group: int = 128, x_dtype=None) -> tuple[str, TileShape | None]:
    """``select_tile`` for AWQ as ``awq_gemm`` dispatches it (the export and layout CLIs ask the same): with the
    decode tile instead of the WGMMA plan where ``awq_zero_mma_decode_first`` says so (a group of whole K steps,
    whose scales the decode tile promotes) or, for ``x_dtype``, ``awq_swapped_decode_first`` (not with AWQ_ONE_COPY,
    whose decode tiles read the blob)."""
    picked = select_tile(4, m, n, sm_count, path, scaled=True, awq=True, k=k, wgmma=wgmma,
                         blob_reader=wgmma and AWQ_ONE_COPY)
    if path is None and picked[0] == "wgmma" and not AWQ_ONE_COPY and (
            (group % 128 == 0 and awq_zero_mma_decode_first(m, n, k, sm_count))
            or (x_dtype is not None and awq_swapped_decode_first(m, n, k, sm_count, x_dtype))):
        return select_tile(4, m, n, sm_count, "decode", scaled=True, awq=True, k=k)
    return picked


def select_tile(bits: int, m: int, n: int, sm_count: int, path: str | None = None,
                decode_max_m: int | None = None, scaled: bool = False, dense: bool = False,
                dense_min_m: int | None = None, awq: bool = False, k: int | None = None, wgmma: bool = False,
                blob_reader: bool = False) -> tuple[str, TileShape | None]:
    """(path name, tile) for a problem; ``path`` forces "decode", "tensor_core", "wgmma" or "dense"; ``scaled``:
    group scales; ``dense``: the caller can run the dense path (fp16/bf16 activations); ``wgmma``: the problem is
    eligible for the WGMMA path (``wgmma.eligible``). The dense and WGMMA paths have no TileShape (the WGMMA path
    picks its TileConfig itself). ``awq``: the AWQ format (its own decode plans); ``blob_reader``: its decode tile is
    for the SM90 blob's reader (``decode_tile``)."""
    if path is None:
        decode = m <= (DECODE_MAX_M if decode_max_m is None else decode_max_m)
        early = decode_max_m is None and m >= wgmma_min_m(bits, scaled, awq, None if k is None else n * k, n, k,
                                                             sm_count, blob_reader)
        if (not decode or early) and wgmma and (m <= WGMMA_MAX_M or not dense):
            path = "wgmma"
        elif dense and m >= (DENSE_MIN_M if dense_min_m is None else dense_min_m):
            path = "dense"
        else:
            path = "decode" if decode else "tensor_core"
    if path == "wgmma":
        if not wgmma:
            raise ValueError("path='wgmma' is not available for this call (it needs an SM90 GPU, fp16/bf16 x with "
                             "out in x's dtype, a 1/2/4/8-bit format, K and N multiples of 8, and a group of 32 or "
                             "a multiple of 64)")
        return path, None
    if path == "decode":
        if m > 16:
            raise ValueError(f"the decode path handles M <= 16 tokens; got M = {m}")
        return path, decode_tile("awq" if awq else bits, m, n, sm_count, scaled=scaled, k=k, blob_reader=blob_reader)
    if path == "tensor_core":
        return path, tensor_core_tile(m, scaled, "awq" if awq else bits)
    if path == "dense":
        if not dense:
            raise ValueError("path='dense' is not available for this call (it needs fp16/bf16 activations and "
                             "the signed 1/2/4/8-bit formats of quantized_mm)")
        return path, None
    raise ValueError(f"path must be None, 'decode', 'tensor_core', 'wgmma' or 'dense'; got {path!r}")


def shipped_tiles() -> list[tuple[str, bool, TileShape]]:
    """(format key, group scales, tile) of the mma.sync tiles the dispatch picks on sample layers (decode tiles at 1, 4
    and 16 tokens, the tensor-core tiles at 32 and 1024) for every format; AWQ's as awq_gemm runs them
    (``tile_for_format``, and ``awq_fma`` where the decode tile folds the scales, ``awq_zmma`` where it promotes
    them). The CPU tests compile each and check its SASS (tests/test_weight_only_compile.py)."""
    from .quantized_mm import use_promoted_scales  # (it imports this module)

    out = set()
    layers = ((64, 4096), (1 << 16, 4096), (14336, 4096), (8192, 8192), (11008, 4096), (4096, 14336))
    for f in DECODE_PLANS:
        for sc in (True,) if f == "awq" else (False, True):
            tiles = {(decode_tile(f, m, n, 132, scaled=sc, k=k), k, n) for m in (1, 4, 16) for n, k in layers}
            tiles |= {(tensor_core_tile(m, sc, f), None, None) for m in (32, 1024)}
            for tile, k, n in tiles:
                if f != "awq":
                    out.add((f"int{f}", sc, tile))
                    continue
                out.add(("awq", True, tile_for_format("awq", tile, k, n, 132)))
                if tile.tokens_per_cta <= 16 and not use_promoted_scales("awq", True, 128, None, tile):
                    out.add(("awq_fma", True, tile_for_format("awq_fma", tile, k, n, 132)))
                elif tile.tokens_per_cta <= 16:  # fp16's format on the tiles that promote (awq.decode_format)
                    out.add(("awq_zmma", True, tile_for_format("awq_zmma", tile, k, n, 132)))
    return sorted(out, key=lambda c: (c[0], c[1], c[2].key))
