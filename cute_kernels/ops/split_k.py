"""Host side of the SM90 kernel's in-kernel split-K (``Sm90GemmKernel.split_k_fixup``): how many K slices a
problem gets, and the library-owned scratch (partial-sum stripes + per-tile semaphores) the slices meet in.

Shared by every op built on ``Sm90GemmKernel`` (int8_scaled_mm, fp8_blockwise_scaled_mm): the partials are 32-bit
words, int32 for integer accumulators and float32 (the same buffer, viewed) for floating-point ones. Some plans
need no scratch: ``cluster_split`` sends them to the cluster split-K kernel (``Sm90GemmKernel.split_cluster``).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from ..configs import TileConfig, best_split, raster_for, tail_split
from ..sm90.tile_schedule import PersistentTileSchedule
from ..streams import StreamScratch, current_stream_id

K_TILE = 128  # elements of K per K-tile of the 8-bit kernels (128 bytes)


def plan_split_k(cfg: TileConfig, km: int, kn: int, k: int, batch: int, sm_count: int,
                 raster: tuple[int, bool] = (1, True)):
    """(K slices, workspace 32-bit elements, semaphore count, head) for the kernel's (M, N) = (km, kn) problem;
    slices = 1 means: run the unsplit variant.

    * More schedule positions than cluster slots and ``cfg.split_tail`` > 1: the full waves run whole tiles (head =
      their positions) and the last wave's positions are split as ``configs.tail_split`` plans.
    * Else, ``cfg.split_k`` > 1: every tile is split (head = 0), into enough slices to give every SM about one work
      tile (``configs.best_split``), never more than ``cfg.split_k`` or than the K-tiles.
    The scratch holds one stripe per split tile and slice and one semaphore per split tile: (positions - head) x
    CTAs per cluster."""
    tiles = -(-km // cfg.tile_m) * -(-kn // cfg.tile_n) * batch
    k_tiles = -(-k // K_TILE)
    csize = cfg.cluster_m * cfg.cluster_n
    schedule = PersistentTileSchedule((cfg.cluster_m, cfg.cluster_n), *raster)
    positions = schedule.position_count((-(-km // cfg.tile_m), -(-kn // cfg.tile_n), batch))
    slots = max(1, cfg.slots(sm_count) // csize)
    if cfg.split_tail > 1 and positions > slots:
        _, slices, head = tail_split(positions, slots, cfg.split_tail, k_tiles)
    elif cfg.split_k > 1:
        slices, head = best_split(tiles, cfg.tile_m, cfg.split_k, k_tiles, cfg.slots(sm_count)), 0
    else:
        slices, head = 1, positions
    split_tiles = (positions - head) * csize
    return slices, split_tiles * slices * cfg.tile_m * cfg.tile_n, split_tiles, head


# Cluster split-K (``Sm90GemmKernel.split_cluster``): the slice counts whose split plans reduce their partials inside a
# cluster of that many CTAs, SM to SM, instead of through the workspace; () turns it off (also
# ``CUTE_KERNELS_SPLIT_CLUSTER=0``). Session 28 (H100, split_cluster.py, data archive session45/moved/):
# two slices 0.93-0.98x the time of the workspace fix-up on the decode rows of int8, FP8 and the weight-only WGMMA
# path; four slices 1.35-1.69x (the driver runs 30 clusters of 4 CTAs at once on an H100, 66 of 2, 15 of 8: clusters
# must fit in a GPC, so 32-33 of 4 need a second wave; 2-CTA clusters fill a GPC's SM pairs, so slots // 2 of them
# run at once); slots of 32 KB (64 x 128 / 128 x 64 tiles) between 0.97x and 1.07x, hence the byte cap.
SPLIT_CLUSTER_SLICES = () if os.environ.get("CUTE_KERNELS_SPLIT_CLUSTER", "1") == "0" else (2,)
SPLIT_CLUSTER_MAX_BYTES = 16 << 10  # rank 0's receive slots (shared memory the ring gives up)


# How much of K rank 1 of a two-CTA int8 cluster streams, in sixteenths, by K (``Sm90GemmKernel.rank1_share``; rank 0
# adds the partials and runs the epilogue, so it takes the rest). Session 29 (H100, rank 1 at 8 / 7 / 6 / 5 / 4 / 3
# sixteenths, interleaved; docs/int8_scaled_mm.md): 4096^2 at 1 / 16 / 32 / 64 tokens best at 5-6 (6: 0.97 / 0.99 /
# 0.96 / 0.93x the time of halves), 4096 x 14336 best at 7 (0.99 / 0.99 / 0.99 / 0.97x). FP8 and the weight-only
# path keep halves: their consumers bound the mainloop, and 7 / 6 sixteenths were 1.00-1.10x there.
INT8_RANK1_SHARE = ((8192, 6), (None, 7))  # (K up to, sixteenths), first match


def cluster_rank1_share(op: str, k: int, split_cluster: int) -> int:
    """Sixteenths of K that rank 1 of a ``split_cluster`` = 2 kernel of ``op`` streams (8: halves)."""
    if split_cluster != 2 or op != "int8":
        return 8
    return next(share for most, share in INT8_RANK1_SHARE if most is None or k <= most)


def cluster_split(cfg: TileConfig, split, sm_count: int) -> int:
    """K slices of ``split`` (a ``plan_split_k`` plan or None) to reduce inside clusters, or 1 for the workspace
    fix-up: a plan that splits every tile (head 0) of a 1x1-cluster config into a slice count of
    ``SPLIT_CLUSTER_SLICES``, all of whose clusters run at once (one tile per cluster: nothing waits for a slot),
    and whose partials fit ``SPLIT_CLUSTER_MAX_BYTES`` of receive slots."""
    if split is None or (cfg.cluster_m, cfg.cluster_n) != (1, 1) or cfg.ctas_per_sm != 1:  # (several: not measured)
        return 1
    slices, _, split_tiles, head = split
    if head != 0 or slices not in SPLIT_CLUSTER_SLICES or split_tiles * slices > cfg.slots(sm_count):
        return 1
    if (slices - 1) * cfg.tile_m * cfg.tile_n * 4 > SPLIT_CLUSTER_MAX_BYTES:
        return 1
    return slices


def resolve_launch(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int):
    """What an op compiles and launches for its problem: (config, split plan or None, split_cluster) - the plan of
    ``resolve_split``, or, where ``cluster_split`` takes it, the unsplit config with its slices reduced in clusters
    (no plan: the unsplit launch, no scratch)."""
    cfg, split = resolve_split(cfg, m, n, k, batch, sm_count)
    split_cluster = cluster_split(cfg, split, sm_count)
    if split_cluster > 1:
        return replace(cfg, split_k=1, split_tail=1), None, split_cluster
    return cfg, split, 1


def resolve_split(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int):
    """(config to compile, split plan or None) for the op's problem (M tokens, N output columns); a ``swap_ab``
    config's kernel computes the transposed problem, so its (M, N) are (n, m). When the plan has one slice, the
    unsplit variant of the config runs: the split variant would still write every partial to the workspace and
    count it on a semaphore (measured: 19.2 vs 17.5 us for M = 1, N = 14336, K = 4096 on an H200)."""
    if not cfg.splits:
        return cfg, None
    km, kn = (n, m) if cfg.swap_ab else (m, n)
    plan = plan_split_k(cfg, km, kn, k, batch, sm_count, raster_for(cfg, m, n, k, batch, sm_count))
    if plan[0] == 1:
        return replace(cfg, split_k=1, split_tail=1), None
    return cfg, plan


SCRATCH = StreamScratch()
# (device index, stream, dtype) -> (SCRATCH.generation, partials view, its numel, semaphores, their numel): the last
# answer of split_workspace, valid while SCRATCH is unchanged. The two lookups and the float32 view it saves cost
# ~5 µs of host time per call of a split problem (H100 host, session 12) - as much as the rest of the op's warm path.
_last_workspace: dict[tuple, tuple] = {}


def split_workspace(device: torch.device, ws_elems: int, sem_elems: int, dtype: torch.dtype = torch.int32):
    """Split-K scratch, owned by the library and reused per (device, stream): partial sums need no clearing (each K
    slice writes its own stripe) and the kernel resets every semaphore it used, so only a new or larger semaphore
    buffer is zeroed. ``dtype``: int32 or float32, a view of the same words."""
    key = (device.index, current_stream_id(device), dtype)
    hit = _last_workspace.get(key)
    if hit is not None and hit[0] == SCRATCH.generation and hit[2] >= ws_elems and hit[4] >= sem_elems:
        return hit[1], hit[3]
    ws = SCRATCH.get(device, "partials", ws_elems, torch.int32, min_numel=1 << 16)
    sem = SCRATCH.get(device, "semaphores", sem_elems, torch.int32, zeroed=True, min_numel=1024)
    ws = ws if dtype == torch.int32 else ws.view(dtype)
    _last_workspace[key] = (SCRATCH.generation, ws, ws.numel(), sem, sem.numel())
    return ws, sem


def launch_planned(fn, args: tuple, split, device: torch.device, dtype: torch.dtype = torch.int32,
                   trailing: tuple = ()):
    """Call a compiled SM90 launch: ``fn(*args)`` for an unsplit plan, else with the plan's workspace (partials in
    ``dtype``), semaphores, slice count and head appended - the launch signature of the split variants.
    ``trailing``: arguments that come last in either (those a variant declares after its stream)."""
    if split is None:
        return fn(*args, *trailing)
    return fn(*args, *split_workspace(device, split[1], split[2], dtype), split[0], split[3], *trailing)
