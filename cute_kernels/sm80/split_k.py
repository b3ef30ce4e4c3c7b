"""Split-K for the SM80-class int8 GEMM: when to split, into how many slices, and the reusable workspace.

Decision. A problem whose (M, N, L) tile grid cannot fill the GPU (fewer tiles than resident CTA slots: SMs x the
config's CTAs per SM) and whose K is long enough gets S = slots // tiles slices, capped
  - so that every slice runs at least MIN_K_TILES_PER_SPLIT k-tiles (the multistage prologue must be amortized),
  - so that the partial sums stay cheap: each slice red.add's its whole int32 tile, S x tiles x tile_m x tile_n x 4
    bytes of 4-byte L2 atomics in all, which may be at most MAX_PARTIAL_TRAFFIC of the operand bytes (M*K + N*K per
    batch). The atomics are slow per byte: on an H200 (docs/sm80.md) 128x14336x4096 with 128x128 tiles took 28 us
    unsplit and 52 us split 2 ways, while 16-row decode tiles against K = 14336 gained 1.5x from 6 slices. The 0.15
    was calibrated on that H200 sweep (the only GPU available): every shape it changes got faster there,
  - and at MAX_SPLIT_K.
Typical hits are decode shapes (M <= 128) against 4096-14336 wide weights, where the 16/32-row tile grid has only
N / tile_n CTAs.

Workspace. The kernel reduces in int32 through a workspace slot per output tile plus one arrival counter per tile
(see kernel.py); the last slice re-zeroes both, so the buffer is allocated zeroed once and reused without a memset.
One workspace per (device, stream): kernels on one stream run in order, so they never share a slot concurrently;
two streams get two buffers. Capturing a split-K call in a CUDA graph is fine once the workspace exists (call once
before capture so it is not allocated inside the capture).
"""

from __future__ import annotations

import math

import torch

from cute_kernels.sm80.configs import Sm80TileConfig
from cute_kernels.streams import StreamScratch

MAX_SPLIT_K = 16
MIN_K_TILES_PER_SPLIT = 4
MAX_PARTIAL_TRAFFIC = 0.15


def choose_split_k(m: int, n: int, k: int, batch: int, config: Sm80TileConfig, num_sms: int,
                   device_arch: str) -> tuple[int, int]:
    """(slices, k_tiles_per_slice); slices == 1 means no split. Every slice gets >= 1 k-tile."""
    tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n) * batch
    k_tiles = math.ceil(k / config.tile_k)
    slots = num_sms * config.ctas_per_sm(device_arch)
    partial_bytes_per_slice = tiles * config.tile_m * config.tile_n * 4
    traffic_cap = int(MAX_PARTIAL_TRAFFIC * batch * (m * k + n * k) / partial_bytes_per_slice)
    want = min(slots // max(tiles, 1), k_tiles // MIN_K_TILES_PER_SPLIT, traffic_cap, MAX_SPLIT_K)
    return normalize_split_k(want, k_tiles)


def normalize_split_k(slices: int, k_tiles: int) -> tuple[int, int]:
    """Round a requested slice count so that no slice is empty: (slices, k_tiles_per_slice)."""
    slices = max(1, min(int(slices), k_tiles))
    per = math.ceil(k_tiles / slices)
    return math.ceil(k_tiles / per), per


class SplitKWorkspace:
    """Zero-initialised int32 partial-sum slots and tile counters per (device, stream), grown on demand (x2, so a
    sequence of growing problems reallocates rarely); the kernel leaves both zero after use."""

    def __init__(self):
        self.scratch = StreamScratch()

    def get(self, device: torch.device, num_tiles: int, tile_elems: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots = self.scratch.get(device, "slots", num_tiles * tile_elems, zeroed=True, grow=2)
        counters = self.scratch.get(device, "counters", num_tiles, zeroed=True, grow=2)
        return slots, counters

    def nbytes(self) -> int:
        return self.scratch.nbytes()


WORKSPACE = SplitKWorkspace()
