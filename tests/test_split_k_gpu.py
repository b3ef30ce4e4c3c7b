"""GPU tier: the SM90 split-K scratch is never written past its end; split walks with a whole-tile head.

The persistent scheduler rounds the tile grid up to whole clusters, so a 2x1 cluster on a 5-token problem runs a
second, empty row of tiles. Those tiles must not write workspace stripes or bump semaphores: both buffers are sized
by the real tiles. This once overran the workspace by megabytes and silently corrupted a neighbouring tensor,
visible only when the caching allocator happened to put an input there. Here the library's scratch is replaced by
exact-size views of larger buffers whose tails hold a canary, so an overrun fails the test whatever the allocator
does.
"""

import pytest
import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.ops import split_k
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm
from tests.conftest import int8_gemm_inputs
from tests.test_fp8_blockwise_gpu import GROUPWISE, _check as fp8_check, _operands as fp8_operands
from tests.test_int8_scaled_mm_gpu import _check as int8_check

pytestmark = pytest.mark.gpu

CANARY = 0x5A5A5A5A
TAIL = 1 << 20  # words of canary behind each buffer (4 MiB)

CONFIGS = [
    TileConfig(tile_m=64, tile_n=128, cluster_m=2, cluster_n=1, split_k=8),  # an empty row of tiles (M = 5)
    TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=2, split_k=8),  # an empty column (N = 2112: 16.5 tiles)
    TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=2, split_k=4),  # both
    TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=2, swap_ab=True, split_k=8),  # swapped: M = 5 is N
]


class GuardedScratch:
    """Puts exact-size views of canary-tailed buffers where ``split_k.SCRATCH`` looks for this stream's scratch."""

    def __init__(self, device, plan):
        ws_words, sem_words = plan[1], plan[2]
        self.device = device
        self.names = ("partials", "semaphores")
        self.saved = []
        self.full = []
        for name, words in zip(self.names, (ws_words, sem_words)):
            buf = torch.full((words + TAIL,), CANARY, dtype=torch.int32, device=device)
            buf[:words] = 0  # semaphores start at zero; partials need no value
            self.saved.append(split_k.SCRATCH.put(device, name, buf[:words]))
            self.full.append((buf, words))

    def check_and_restore(self):
        torch.cuda.synchronize()
        for name, saved in zip(self.names, self.saved):
            split_k.SCRATCH.put(self.device, name, saved)
        for name, (buf, words) in zip(("workspace", "semaphores"), self.full):
            overrun = int((buf[words:] != CANARY).sum())
            assert overrun == 0, f"split-K wrote {overrun} words past the end of its {words}-word {name}"
        sem_buf, sem_words = self.full[1]
        assert not sem_buf[:sem_words].any(), "a semaphore was left non-zero"


def _plan(cfg, m, n, k):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    used, plan = split_k.resolve_split(cfg, m, n, k, 1, sms)
    assert plan is not None and plan[0] > 1, f"{cfg.describe()} on {m}x{n}x{k} should split; got {plan}"
    return plan


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe().replace(" ", "_"))
@pytest.mark.parametrize("m", [5, 130])
def test_int8_split_k_stays_inside_its_scratch(cfg, m):
    n, k = 2112, 7168
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=m + cfg.tile_n)
    guard = GuardedScratch(a.device, _plan(cfg, m, n, k))
    try:
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        for _ in range(2):  # the second call meets the semaphores the first one reset
            int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg)
    finally:
        guard.check_and_restore()
    int8_check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe().replace(" ", "_"))
@pytest.mark.parametrize("m", [5, 130])
def test_fp8_split_k_stays_inside_its_scratch(cfg, m):
    n, k = 2112, 7168
    a, b, a_s, b_s = fp8_operands(m, n, k, GROUPWISE, seed=m + cfg.tile_n)
    guard = GuardedScratch(a.device, _plan(cfg, m, n, k))
    try:
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        for _ in range(2):
            fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out, config=cfg)
    finally:
        guard.check_and_restore()
    fp8_check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


# ---------------------------------------------------------------------------------------------------------------
# Split walks with a head (``PersistentTileSchedule.split_args``): the first ``head`` positions run whole, the rest in
# K slices. The kernel must be right for any head and slice count (the host picks whole waves, but correctness may
# not depend on it), leave every semaphore at zero and stay inside scratch sized for the split positions only.

def _guarded(words, device):
    buf = torch.full((words + TAIL,), CANARY, dtype=torch.int32, device=device)
    buf[:words] = 0
    return buf


def _run_walk(launch, positions, csize, tile, slices, head, device, dtype=torch.int32):
    """Launch ``launch(ws, sem, slices, head)`` twice on canary-guarded scratch of exactly the split positions'
    size; check no overrun and reset semaphores."""
    split_tiles = (positions - head) * csize
    ws_words, sem_words = split_tiles * slices * tile[0] * tile[1], split_tiles
    ws, sem = _guarded(ws_words, device), _guarded(sem_words, device)
    for _ in range(2):
        launch(ws[:ws_words].view(dtype), sem[:sem_words], slices, head)
    torch.cuda.synchronize()
    for name, buf, words in (("workspace", ws, ws_words), ("semaphores", sem, sem_words)):
        assert int((buf[words:] != CANARY).sum()) == 0, f"split walk wrote past the end of its {name}"
    assert not sem[:sem_words].any(), "a semaphore was left non-zero"


# (M, N, K, config, raster): 2-CTA clusters as the large-M rows use them, a ragged edge, and a swizzled order.
WALKS = [
    (1000, 2112, 2048, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_tail=4), (1, True)),
    (640, 1536, 1024, TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1, split_tail=4), (2, False)),
    (520, 1000, 1536, TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=2, split_tail=4), (1, True)),
]


def _walk_id(v):
    return v.describe() if isinstance(v, TileConfig) else str(v)


def _positions(cfg, m, n, raster):
    from cute_kernels.sm90.tile_schedule import PersistentTileSchedule

    sched = PersistentTileSchedule((cfg.cluster_m, cfg.cluster_n), *raster)
    return sched.position_count((-(-m // cfg.tile_m), -(-n // cfg.tile_n), 1))


@pytest.mark.parametrize("m,n,k,cfg,raster", WALKS, ids=_walk_id)
def test_int8_split_walk_any_head(m, n, k, cfg, raster):
    from cute_kernels.ops.int8_scaled_mm import _compile_sm90

    if cfg.tile_n == 192:
        cfg = TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_tail=4)
    fn = _compile_sm90(2, "vector", "vector", "out", torch.bfloat16, cfg, 132, raster=raster)
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=k)
    positions = _positions(cfg, m, n, raster)
    csize = cfg.cluster_m * cfg.cluster_n
    for slices, head in ((2, 0), (3, positions // 2), (4, positions - 1), (2, positions - 3)):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        _run_walk(lambda ws, sem, s, h: fn(a, b, out, a_s, b_s, bias, None, None, ws, sem, s, h), positions, csize,
                  (cfg.tile_m, cfg.tile_n), slices, head, a.device)
        int8_check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m,n,k,cfg,raster", WALKS[:2], ids=_walk_id)
@pytest.mark.parametrize("staged", [False, True], ids=["loaded_sfa", "tma_sfa"])
def test_fp8_split_walk_any_head_is_deterministic(m, n, k, cfg, raster, staged):
    from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major
    from cute_kernels.ops.fp8_blockwise_scaled_mm import _compile_sm90

    fn = _compile_sm90(2, torch.bfloat16, GROUPWISE, cfg, 132, staged, torch.float8_e4m3fn, torch.float8_e4m3fn,
                       raster=raster)
    a, b, a_s, b_s = fp8_operands(m, n, k, GROUPWISE, seed=k + staged)
    if staged:
        a_s = to_tma_aligned_mn_major(a_s)
    positions = _positions(cfg, m, n, raster)
    csize = cfg.cluster_m * cfg.cluster_n
    for slices, head in ((3, positions // 2), (4, positions - 2), (2, 0)):
        outs = []
        for _ in range(2):
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            _run_walk(lambda ws, sem, s, h: fn(a, b, out, a_s, b_s, None, ws, sem, s, h), positions, csize,
                      (cfg.tile_m, cfg.tile_n), slices, head, a.device, torch.float32)
            outs.append(out)
        fp8_check(outs[0], a, b, a_s, b_s, GROUPWISE, torch.bfloat16)
        assert torch.equal(outs[0], outs[1]), f"slices={slices} head={head}: results differ between runs"


# Problems on which the dispatch itself plans a tail split (checked), run through the public ops.
def test_dispatch_tail_split_int8():
    m, n, k = 384, 13824, 5120
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    from cute_kernels.configs import select_sm90_int8

    cfg, plan = split_k.resolve_split(select_sm90_int8(m, n, k, 1, sms), m, n, k, 1, sms)
    if plan is None:
        pytest.skip(f"no tail split planned on {sms} SMs")
    assert plan[3] > 0 and cfg.split_tail > 1
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=11)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out)
    int8_check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m", [512, 509])
def test_dispatch_tail_split_fp8(m):
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config, sfa_tma_eligible

    n, k = 7168, 16384
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major

    a, b, a_s, b_s = fp8_operands(m, n, k, GROUPWISE, seed=m)
    a_s = to_tma_aligned_mn_major(a_s)  # staged at any M (the large-M row prices its widths for that)
    cfg = select_config(m, n, k, 1, sms, a_scale_staged=sfa_tma_eligible(a_s, GROUPWISE))
    cfg, plan = split_k.resolve_split(cfg, m, n, k, 1, sms)
    if plan is None:
        pytest.skip(f"no tail split planned on {sms} SMs")
    assert plan[3] > 0
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    fp8_check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


# ------------------------------------------------------------------ cluster split-K (session 28)
# Plans that ``split_k.cluster_split`` takes run their two K slices as one 2-CTA cluster, which adds the partials in
# rank 0's shared memory instead of the workspace (``Sm90GemmKernel.split_cluster``). Same sums in the same order: the
# results must equal the workspace fix-up's bit for bit, and the float64 reference.
def _both_reductions(monkeypatch, run):
    """(run() with the workspace fix-up, run() with cluster split-K), every op's plan cache cleared in between."""
    import importlib

    from cute_kernels.ops import fp8_blockwise_scaled_mm as fp8_mod
    from cute_kernels.ops import int8_scaled_mm as int8_mod

    caches = (int8_mod._validated, fp8_mod._validated, importlib.import_module("cute_kernels.weight_only.awq")._plans,
              importlib.import_module("cute_kernels.weight_only.quantized_mm")._plans)
    outs = []
    for slices in ((), (2,)):
        monkeypatch.setattr(split_k, "SPLIT_CLUSTER_SLICES", slices)
        for plans in caches:
            plans.clear()
        outs.append(run())
    return outs


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _require_cluster_plan(monkeypatch, select, m, n, k, batch):
    """Turn cluster split-K on and skip unless the op's plan for this problem takes it (two slices)."""
    monkeypatch.setattr(split_k, "SPLIT_CLUSTER_SLICES", (2,))
    sms, lb = _sms(), batch or 1
    cfg, plan = split_k.resolve_split(select(m, n, k, lb, sms), m, n, k, lb, sms)
    if split_k.cluster_split(cfg, plan, sms) != 2:
        pytest.skip(f"no two-slice cluster plan on {sms} SMs")


@pytest.mark.parametrize("m,n,k,batch", [(1, 4096, 4096, None), (17, 4104, 4096, None), (40, 3000, 4112, None),
                                         (64, 4096, 4096, None), (3, 2056, 2048, 2)])
def test_int8_split_cluster_matches_workspace(monkeypatch, m, n, k, batch):
    from cute_kernels.configs import select_sm90_int8

    _require_cluster_plan(monkeypatch, select_sm90_int8, m, n, k, batch)
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, batch=batch, seed=m + n)
    shape = (*a.shape[:-1], n)

    def run():
        out = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        int8_scaled_mm(a, b, a_s, b_s, bias, out=out)
        return out

    ws, cl = _both_reductions(monkeypatch, run)
    int8_check(cl, a, b, a_s, b_s, bias, torch.bfloat16)
    assert torch.equal(ws, cl)


@pytest.mark.parametrize("m,n,k,batch", [(1, 4096, 7168, None), (16, 4096, 7168, None), (3, 2056, 2048, 2)])
def test_fp8_split_cluster_matches_workspace(monkeypatch, m, n, k, batch):
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config

    _require_cluster_plan(monkeypatch, select_config, m, n, k, batch)
    a, b, a_s, b_s = fp8_operands(m, n, k, GROUPWISE, batch=batch, seed=m + n)

    def run():
        out = torch.full((*a.shape[:-1], n), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
        return out

    ws, cl = _both_reductions(monkeypatch, run)
    fp8_check(cl, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)
    assert torch.equal(ws, cl)  # float partials added in slice order either way


@pytest.mark.parametrize("fmt,m,n,k", [("awq", 13, 8200, 4224), ("int2g", 5, 8192, 4224)])
def test_weight_only_split_cluster_matches_workspace(monkeypatch, fmt, m, n, k):
    from cute_kernels import awq_gemm
    from cute_kernels.formats.awq import awq_quantize
    from cute_kernels.formats.bitpack import quantize_weights
    from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
    from cute_kernels.weight_only import quantized_mm, wgmma

    monkeypatch.setattr(split_k, "SPLIT_CLUSTER_SLICES", (2,))
    _, options, _ = wgmma.launch_variant(4 if fmt == "awq" else 2, wgmma.select_config(m, n, k, _sms()), _sms(),
                                         m, n, k)
    if dict(options).get("split_cluster") != 2:
        pytest.skip(f"no two-slice cluster plan on {_sms()} SMs")
    torch.manual_seed(m + n)
    x = torch.randn(m, k, dtype=torch.float16, device="cuda")
    if fmt == "awq":
        q, z, s = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, torch.float16)
        run_op = lambda out: awq_gemm(x, q, s, z, out=out)  # noqa: E731
        ref = awq_gemm_ref(x.cpu(), q.cpu(), s.cpu(), z.cpu())
    else:
        w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), 2, 128)
        run_op = lambda out: quantized_mm(x, w, scale, 2, gs, out=out, path="wgmma")  # noqa: E731
        ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, 2, gs.float().cpu())

    def run():
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        run_op(out)
        return out

    ws, cl = _both_reductions(monkeypatch, run)
    assert not cl.isnan().any()
    assert ((cl.double().cpu() - ref).abs().max() / ref.abs().max()).item() < 1.5e-3
    assert torch.equal(ws, cl)


@pytest.mark.parametrize("k,share", [(256, 6), (384, 6), (4096, 6), (4096, 1), (14336, 7), (1152, 5)])
def test_int8_split_cluster_uneven_slices(k, share):
    """Rank 1 of a two-CTA cluster streams ``share`` sixteenths of K (``Sm90GemmKernel.rank1_share``, session 29),
    each rank at least one K-tile (2 and 3 K-tiles included): every element against float64, NaN-poisoned output."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90

    m, n = 24, 4096
    cfg = TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1, swap_ab=True)
    fn = build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg, weight_preload=4, split_cluster=2,
                    rank1_share=share)
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=k + share)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fn(a, b, out, a_s, b_s, bias, None, None)
    int8_check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m,n,k,cfg", [
    (16, 4096, 1024, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True)),  # 64 tiles
    (100, 1000, 768, TileConfig(tile_m=64, tile_n=48, cluster_m=1, cluster_n=1, swap_ab=True)),  # ragged, moved tile
    (200, 520, 512, TileConfig(tile_m=128, tile_n=64, cluster_m=1, cluster_n=1)),  # unswapped, 2 warpgroups
])
def test_int8_split_cluster_more_tiles_than_slots(m, n, k, cfg):
    """The ops launch cluster split-K only where all clusters run at once. A kernel built for 8 SMs (4 two-CTA
    clusters at once) on 18-64 tiles launches one cluster per tile all the same, the rest waiting for SMs
    (``PersistentTileSchedule.grid``): every element checked against float64. (Session 28: when such clusters walked
    several tiles each, the 128-row case gave wrong results and the 64-row ones did not; session 29: a cluster-scope
    free arrive in ``cluster_reduce`` made those walks right.)"""
    from cute_kernels.ops.int8_scaled_mm import build_sm90

    fn = build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg, sm_count=8, weight_preload=4, split_cluster=2)
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=m + n + k)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fn(a, b, out, a_s, b_s, bias, None, None)
    int8_check(out, a, b, a_s, b_s, bias, torch.bfloat16)
