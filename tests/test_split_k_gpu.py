"""GPU tier: the SM90 split-K scratch is never written past its end.

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
        _, ws_words, sem_words = plan
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
