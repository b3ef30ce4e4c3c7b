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
