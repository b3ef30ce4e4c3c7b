"""Turn argument errors and cross-rank disagreements into the same exception on every rank, never a hang.

A collective op whose ranks disagree (one rejected its arguments and returned, or two planned different chunk counts
or message sizes) waits forever in the next collective, or reduces mismatched buffers. So before its first data
collective the op gathers one small int64 record per rank: whether the rank's own checks passed, and every value the
ranks must share. Then every rank sees the same table and raises the same error, or none does.

Eager calls gather the record on the op's own group and device and read it back (a host sync, which also waits for
the GPU work queued before it). While a CUDA graph is being captured that read is illegal, so the record travels over
a CPU (gloo) group with the same ranks instead (``metadata_group``, made once per group; what it would cost eager
calls: ``matmul_reduce_scatter.EAGER_CHECK_OVER_GLOO``). Callers that guarantee consistent shapes can skip the check
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


_MIRRORS: dict = {}  # process group -> its gloo mirror (or None where one could not be made)


def metadata_group(group, device: torch.device):
    """(group, device) for the metadata exchange of an op called on ``group`` with tensors on ``device``: a gloo
    group with the same ranks and the CPU when ``group`` is not gloo already (created on first use; every member calls
    the op, so every member creates it, in the same order), else ``group`` itself on the CPU. Falls back to (group,
    device) where a gloo group cannot be created."""
    group = group or dist.group.WORLD
    if "gloo" in str(dist.get_backend(group)):
        return group, torch.device("cpu")
    if group not in _MIRRORS:
        try:
            # Local synchronization: only the group's members take part, as only they call the op.
            _MIRRORS[group] = dist.new_group(dist.get_process_group_ranks(group), backend="gloo",
                                             use_local_synchronization=True)
        except (RuntimeError, ValueError):
            _MIRRORS[group] = None
    mirror = _MIRRORS[group]
    return (group, device) if mirror is None else (mirror, torch.device("cpu"))


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
