"""Weights stored in the order the weight-only kernel's threads read them (``TileShape.fragment_order``).

Per K step (64 bytes of a row), thread (g = lane / 4, t = lane % 4) of a warp reads 16 bytes at ``t * 16`` of rows g
and g + 8 of its 16-row tile (the mma.sync A fragment, kernel.py). Row-major, one warp load is then 8 pieces of 64
bytes, a row apart. In fragment order each 16-row tile is stored step by step: step s of tile i is the 1 KB at
``(i * steps + s) * 1024``, rows g (first 512 bytes) then g + 8, 16 bytes per lane ``g * 4 + t``: a warp's load is 512
contiguous bytes and a tile's K steps follow each other.

    row-major  uint8 [N, R]        byte (n, s * 64 + t * 16 + b)
    fragment   uint8 [N16, R64]    the same byte at tile n // 16, step s, half (n % 16) // 8, lane (n % 8) * 4 + t,
                                   offset b; N16 = N rounded up to 16, R64 = R rounded up to 64 (zero padding)

The tensor keeps a [N16, R64] byte-matrix shape, so shape checks see the padded sizes; the true N is the output's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TILE_ROWS = 16
STEP_BYTES = 64


def padded_shape(n: int, row_bytes: int) -> tuple[int, int]:
    return -(-n // TILE_ROWS) * TILE_ROWS, -(-row_bytes // STEP_BYTES) * STEP_BYTES


def to_fragment_order(w: torch.Tensor) -> torch.Tensor:
    """uint8 [N, R] row-major -> uint8 [N16, R64] in fragment order (module docstring); padding bytes are zero."""
    wf = torch.zeros(padded_shape(*w.shape), dtype=torch.uint8, device=w.device)
    write_columns(wf, w, 0)
    return wf


def write_columns(wf: torch.Tensor, block: torch.Tensor, first_byte: int) -> None:
    """Write row-major bytes ``block`` (uint8 [n, c], n <= N16) into columns first_byte .. first_byte + c of the
    fragment-ordered ``wf`` (uint8 [N16, R64]) in place; ``first_byte`` is a multiple of 64 (whole K steps). A block
    that ends inside a K step is zero-padded to the step's end, and rows n.. of its steps are zeroed too. Lets a
    caller fill ``wf`` chunk by chunk without a row-major copy of the whole tensor."""
    if first_byte % STEP_BYTES:
        raise ValueError(f"first_byte = {first_byte} must be a multiple of {STEP_BYTES} (a whole K step)")
    n16, r64 = wf.shape
    n, c = block.shape
    c64 = -(-c // STEP_BYTES) * STEP_BYTES
    if n > n16 or first_byte + c64 > r64:
        raise ValueError(f"a [{n}, {c}] block at byte {first_byte} does not fit a [{n16}, {r64}] weight")
    if (n, c) != (n16, c64):
        block = F.pad(block, (0, c64 - c, 0, n16 - n))
    s0, steps = first_byte // STEP_BYTES, c64 // STEP_BYTES
    # wf's bytes seen in row-major coordinates (tile, half, g, step, t, byte): a strided view, written in place
    rows = wf.view(n16 // TILE_ROWS, r64 // STEP_BYTES, 2, 8, 4, 16).permute(0, 2, 3, 1, 4, 5)
    rows[:, :, :, s0:s0 + steps].copy_(block.reshape(n16 // TILE_ROWS, 2, 8, steps, 4, 16))


def from_fragment_order(wf: torch.Tensor, n: int, row_bytes: int) -> torch.Tensor:
    """The inverse: uint8 [N16, R64] in fragment order -> uint8 [n, row_bytes] row-major."""
    n16, r64 = wf.shape
    tiles = wf.reshape(n16 // TILE_ROWS, r64 // STEP_BYTES, 2, 8, 4, 16)  # (tile, step, half, g, t, byte)
    return tiles.permute(0, 2, 3, 1, 4, 5).reshape(n16, r64)[:n, :row_bytes]
