"""Turn argument errors and cross-rank disagreements into the same exception on every rank, never a hang.

A collective op whose ranks disagree (one rejected its arguments and returned, or two planned different chunk counts
or message sizes) waits forever in the next collective, or reduces mismatched buffers. So before its first data
collective the op gathers one small int64 record per rank: whether the rank's own checks passed, and every value the
ranks must share. Then every rank sees the same table and raises the same error, or none does. The cost is one
all-gather of a few integers and a host synchronization; callers that guarantee consistent shapes can skip it
(``validate_across_ranks=False``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# torch >= 2.12 names the single-tensor collectives *_single and deprecates the old names; older torch has only those.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# Values of dtype-valued fields travel as an index into this tuple.
DTYPE_CODES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_UNKNOWN = -1


def dtype_code(dtype: object) -> int:
    return DTYPE_CODES.index(dtype) if dtype in DTYPE_CODES else _UNKNOWN


def _describe(name: str, value: int) -> str:
    if value == _UNKNOWN:
        return "?"
    if name.endswith("dtype"):
        return str(DTYPE_CODES[value]).replace("torch.", "")
    if name.startswith("has "):
        return str(bool(value))
    return str(value)


def agree_across_ranks(group, device: torch.device, local_error: Exception | None, shared: dict[str, int]) -> None:
    """Raise on every rank if any rank has ``local_error`` or the ``shared`` values differ between ranks.

    ``shared`` maps a field name to the int this rank sees (-1 when its arguments were too broken to tell); all ranks
    must pass the same field names in the same order. A rank's own error is re-raised there; the other ranks raise
    the same exception type carrying that rank's message.
    """
    world = dist.get_world_size(group)
    record = torch.tensor([0 if local_error is None else 1, *shared.values()], dtype=torch.int64, device=device)
    table = torch.empty(world * record.numel(), dtype=torch.int64, device=device)
    all_gather_single(table, record, group=group)
    rows = table.view(world, -1).tolist()

    failed = [r for r, row in enumerate(rows) if row[0]]
    if failed:
        # Only on the error path: every rank knows some rank failed, so every rank joins this second gather.
        messages = [None] * world
        mine = None if local_error is None else (type(local_error).__name__, str(local_error))
        dist.all_gather_object(messages, mine, group=group)
        if local_error is not None:
            raise local_error
        kind, message = messages[failed[0]]
        raise (TypeError if kind == "TypeError" else ValueError)(
            f"rank {failed[0]} of the group rejected its arguments: {message}")

    for i, name in enumerate(shared, start=1):
        values = [row[i] for row in rows]
        if len(set(values)) > 1:
            per_rank = ", ".join(f"rank {r}: {_describe(name, v)}" for r, v in enumerate(values))
            raise ValueError(f"{name} must be the same on every rank of the group; got {per_rank}")
