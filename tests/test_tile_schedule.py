"""The persistent tile order of the SM90 kernels (``sm90.tile_schedule``), checked on the CPU.

The order is written out here independently of the code (a list of cluster coordinates per work index), then the
schedule's arithmetic is evaluated on it: the plain order on Python integers (``cluster_coord`` with integers in
place of the fast divisors), the swizzled order through the CuTe layout, traced with static shapes so that
``get_flat_coord`` folds to integers. While the DSL still ships its deprecated ``StaticPersistentTileScheduler``,
the swizzled layout is also compared with that scheduler's, so the move to our own did not change which SM runs
which tile (the GPU tier runs the kernels themselves).
"""

import itertools
import warnings

import pytest

from cute_kernels.sm90.tile_schedule import PersistentTileSchedule

CASES = [  # (tiles_m, tiles_n, L x slices, cluster_mn, swizzle, along_m)
    (5, 3, 1, (1, 1), 1, True), (5, 3, 2, (1, 1), 1, False), (7, 4, 1, (2, 1), 1, True), (4, 7, 3, (1, 2), 1, True),
    (6, 9, 1, (1, 1), 4, True), (6, 9, 2, (1, 1), 2, False), (5, 8, 1, (2, 1), 2, True), (9, 6, 1, (1, 2), 4, False),
    (64, 32, 1, (1, 2), 4, True),
]


def expected_order(tm, tn, lc, cluster, swizzle, along_m):
    """Cluster coordinates in work-index order, from the schedule's description."""
    cm, cn = -(-tm // cluster[0]), -(-tn // cluster[1])
    if swizzle == 1:
        if along_m:
            return [(m, n, ll) for ll in range(lc) for n in range(cn) for m in range(cm)]
        return [(m, n, ll) for ll in range(lc) for m in range(cm) for n in range(cn)]
    if along_m:  # bands of `swizzle` cluster columns; across the band first, then down M
        bands = -(-cn // swizzle)
        return [(m, b * swizzle + i, ll) for ll in range(lc) for b in range(bands) for m in range(cm)
                for i in range(swizzle)]
    bands = -(-cm // swizzle)
    return [(b * swizzle + i, n, ll) for ll in range(lc) for b in range(bands) for n in range(cn)
            for i in range(swizzle)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"-c{c[3]}-s{c[4]}-{c[5]}")
def test_schedule_order(case):
    import cutlass
    import cutlass.cute as cute

    tm, tn, lc, cluster, swizzle, along_m = case
    sched = PersistentTileSchedule(cluster, swizzle, along_m)
    want = expected_order(tm, tn, lc, cluster, swizzle, along_m)
    cm, cn = sched.cluster_counts((tm, tn, lc))
    assert cm * cluster[0] >= tm and cn * cluster[1] >= tn
    # every real cluster appears exactly once; the swizzle's rounding adds whole bands past the edge
    real = [c for c in want if c[0] < cm and c[1] < cn]
    assert sorted(real) == sorted(itertools.product(range(cm), range(cn), range(lc)))
    if swizzle == 1:
        fast, slow = (cm, cn) if along_m else (cn, cm)
        got = [tuple(sched.cluster_coord(((tm, tn, lc), fast, slow), w)) for w in range(len(want))]
        assert got == want
    seen = {}

    @cute.jit
    def trace():
        layout = sched.cluster_layout((tm, tn, lc))
        seen["count"] = cute.size(layout)
        seen["order"] = [tuple(layout.get_flat_coord(w)) for w in range(len(want))]
        seen["grid"] = sched.grid((tm, tn, lc), 3)

    cute.compile(trace)
    assert seen["count"] == len(want)
    assert [tuple(int(v) for v in c) for c in seen["order"]] == want
    assert [int(v) for v in seen["grid"]] == [cluster[0], cluster[1], min(3, len(want))]

    try:
        from cutlass.utils import PersistentTileSchedulerParams
    except ImportError:  # the DSL dropped its copy: nothing left to compare with
        return
    if swizzle == 1:  # the DSL's plain order goes through fast divisors, not through its layout
        return

    @cute.jit
    def trace_dsl():
        dsl = PersistentTileSchedulerParams((tm, tn, lc), (*cluster, 1), swizzle_size=swizzle,
                                            raster_along_m=along_m)
        seen["dsl_count"] = cute.size(dsl.problem_layout_ncluster_mnl)
        seen["dsl_order"] = [tuple(dsl.problem_layout_ncluster_mnl.get_flat_coord(w)) for w in range(len(want))]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cute.compile(trace_dsl)
    assert seen["dsl_count"] == len(want)
    assert [tuple(int(v) for v in c) for c in seen["dsl_order"]] == want


def test_schedule_rejects_bad_swizzle():
    with pytest.raises(ValueError, match="swizzle"):
        PersistentTileSchedule((1, 1), 0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"-c{c[3]}-s{c[4]}-{c[5]}")
def test_position_count_matches_layout(case):
    """The host's count of schedule positions (which sizes the split scratch) is the device layout's size."""
    import cutlass.cute as cute

    tm, tn, lc, cluster, swizzle, along_m = case
    sched = PersistentTileSchedule(cluster, swizzle, along_m)
    seen = {}

    @cute.jit
    def trace():
        seen["count"] = cute.size(sched.cluster_layout((tm, tn, lc)))

    cute.compile(trace)
    assert sched.position_count((tm, tn, lc)) == int(seen["count"]) == len(expected_order(*case))


@pytest.mark.parametrize("positions,head,slices", [(10, 0, 3), (10, 6, 2), (23, 20, 4), (5, 4, 8), (7, 0, 1)])
def test_split_walk_covers_every_slice_once(positions, head, slices):
    """A split walk (head positions whole, the tail slice-major): every head position once as (0 of 1), every tail
    position once per slice, and the slices of one tail position on consecutive rounds of the tail."""
    sched = PersistentTileSchedule()
    tail = positions - head
    args = (slices, head, tail, tail)  # Python ints: the tail count stands in for its fast divisor
    units = [(w, 0, 1) if w < head else sched.tail_unit(args, w) for w in range(head + tail * slices)]
    assert units[:head] == [(p, 0, 1) for p in range(head)]
    tail_units = units[head:]
    assert sorted(tail_units) == sorted((p, s, slices) for p in range(head, positions) for s in range(slices))
    assert [u[1] for u in tail_units] == [w // tail for w in range(tail * slices)]  # slice-major


def test_tail_split_plans():
    """The last-wave split of ``configs.tail_split``: only multi-wave problems with a partial last wave, never more
    slices than allowed or K-tiles, the head whole waves; long K splits a thin tail, short K does not."""
    from cute_kernels.configs import tail_split

    assert tail_split(132, 132, 4, 64) == (1.0, 1, 132)  # one full wave: nothing to split
    assert tail_split(100, 132, 4, 64) == (1.0, 1, 100)  # less than a wave: the decode rows' split-K, not this
    waves, slices, head = tail_split(2 * 132 + 40, 132, 4, 128)
    assert head == 264 and slices == 3 and 2 < waves < 2.6  # a third of a wave split three ways
    assert tail_split(2 * 132 + 40, 132, 4, 8)[1] == 1  # K = 1024: the partial sums' round trip costs more
    assert tail_split(2 * 132 + 40, 132, 2, 128)[1] == 2
    assert tail_split(2 * 132 + 40, 132, 4, 2)[1] <= 2


def test_plan_split_k_sizes_the_tail_scratch():
    """plan_split_k for a split_tail config: head = whole waves of cluster positions, scratch for the rest only
    (stripes per CTA tile and slice); a config without split_tail or with one wave gets no tail split."""
    from cute_kernels.configs import TileConfig
    from cute_kernels.ops.split_k import plan_split_k, resolve_split

    cfg = TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1, split_tail=4)
    # M = 1024, N = 7168, K = 16384: 8 x 38 tiles = 152 cluster positions on 66 cluster slots
    slices, ws, sems, head = plan_split_k(cfg, 1024, 7168, 16384, 1, 132)
    assert (slices, head) == (3, 132) and sems == (152 - 132) * 2 and ws == sems * 3 * 128 * 192
    run_cfg, plan = resolve_split(cfg, 1024, 7168, 16384, 1, 132)
    assert run_cfg == cfg and plan == (slices, ws, sems, head)
    # one wave or less: unsplit (the row's split_k is 1)
    run_cfg, plan = resolve_split(cfg, 512, 4096, 16384, 1, 132)
    assert plan is None and not run_cfg.splits
    # the decode rows' uniform split is unchanged: head 0, every tile split
    dec = TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)
    slices, ws, sems, head = plan_split_k(dec, 4096, 1, 4096, 1, 132)
    assert head == 0 and sems == 64 and ws == 64 * slices * 64 * 16


def test_k_ranks_schedule():
    """Cluster split-K (``k_ranks``): the launch grid puts the cluster's K ranks along x and one cluster per position
    along z, also past the cluster slots (a cluster never walks a second tile); it needs a 1x1 operand cluster."""
    import cutlass.cute as cute

    sched = PersistentTileSchedule((1, 1), k_ranks=2)
    seen = {}

    @cute.jit
    def trace():
        seen["grids"] = [sched.grid((64, 1, 1), 66), sched.grid((100, 1, 1), 66)]
        seen["count"] = sched.work_count(((64, 1, 1),))

    cute.compile(trace)
    assert [[int(v) for v in g] for g in seen["grids"]] == [[2, 1, 64], [2, 1, 100]]
    assert int(seen["count"]) == 64
    with pytest.raises(ValueError, match="k_ranks"):
        PersistentTileSchedule((2, 1), k_ranks=2)
