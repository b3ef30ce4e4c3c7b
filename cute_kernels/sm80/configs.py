"""Tile configurations of the SM80-class int8 GEMM, one table per target arch, picked by M and N buckets.

The tables follow the seed's CUTLASS 2.x dispatch (tile, warp arrangement, stage count per arch), re-derived for
this kernel rather than copied:

- sm_80 (A100, 164 KB smem per SM, up to 163 KB per block): deep pipelines, 5-6 stages, up to 120 KB per CTA.
- sm_86 / sm_89 (RTX 30 / A10 / A40, RTX 40 / L40: 100 KB per SM, 99 KB per block): the same tile shapes where they
  fit, 3-5 stages, every config under ~100 KB so one CTA (two for the small tiles) is resident per SM.
- sm_87 (Orin) has A100's 164 KB of smem and uses the sm_80 table.

Buckets (both tables): M <= 16 and M <= 32 use skinny 16/32-row tiles that stream the weight (decode shapes; split-K
then fills the GPU); M <= 64 a 64-row tile with a long K step; M <= 128 a 128x128 tile; larger M a 128x128 tile for
N < 4096 and a 128x256 tile (8 warps) otherwise. docs/sm80.md has the H200 measurements of these tables (the SM80
kernel forced onto Hopper); they were not tuned on the real targets (no A100/L40 was available), and on the H200 the
M <= 128 bucket was faster with 64x64 tiles (the sweep in docs/sm80.md) - left as is until an A100 says the same.
"""

from __future__ import annotations

from dataclasses import dataclass

# MMA instruction m16n8k32; each warp's N extent is a multiple of 16 so one ldmatrix.x4 feeds two n8 atoms.
_MMA_M, _WARP_N_QUANTUM, _MMA_K = 16, 16, 32
_CP_ASYNC_BYTES = 16
_OUT_VEC_ELEMS = 8  # 16-byte stores of fp16/bf16

SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89")

# Shared memory a block may use (opt-in maximum) and per SM, in bytes; used for validation and occupancy estimates.
SMEM_PER_BLOCK = {"sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024,
                  "sm_90": 227 * 1024}
SMEM_PER_SM = {"sm_80": 164 * 1024, "sm_86": 100 * 1024, "sm_87": 164 * 1024, "sm_89": 100 * 1024,
               "sm_90": 228 * 1024}
# SM counts of the flagship part of each arch (A100, A40 / RTX 3090 class, Orin, L40); the dispatcher uses the real
# device's count when a GPU is present.
NOMINAL_SMS = {"sm_80": 108, "sm_86": 84, "sm_87": 16, "sm_89": 142, "sm_90": 132}


@dataclass(frozen=True)
class Sm80TileConfig:
    """One CTA tile: (tile_m, tile_n, tile_k) bytes of int8, a warps_m x warps_n grid of warps, `stages` smem stages."""

    tile_m: int
    tile_n: int
    tile_k: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def num_threads(self) -> int:
        return self.warps_m * self.warps_n * 32

    @property
    def smem_bytes(self) -> int:
        # The output tile (tile_m x tile_n fp16/bf16) reuses the A/B stages' space; validate() checks that it fits.
        return (self.tile_m + self.tile_n) * self.tile_k * self.stages

    @property
    def name(self) -> str:
        return (f"{self.tile_m}x{self.tile_n}x{self.tile_k}_w{self.warps_m}x{self.warps_n}_s{self.stages}")

    def regs_per_thread_estimate(self) -> int:
        """~56 registers of addressing/pipeline state + ~2.4 per int32 accumulator (the accumulators, the f32
        epilogue values and the A/B fragments all scale with the warp tile); fitted to ptxas on sm_80/86/89 and
        checked against it by tests/test_sm80_compile.py."""
        acc = (self.tile_m // self.warps_m) * (self.tile_n // self.warps_n) // 32
        return min(255, 56 + int(2.4 * acc))

    def validate(self, arch: str = "sm_80") -> None:
        """Raise ValueError naming the broken rule; every table entry passes this for its arch."""
        wm, wn = self.tile_m // max(self.warps_m, 1), self.tile_n // max(self.warps_n, 1)
        rules = [
            (self.tile_m % (self.warps_m * _MMA_M) == 0, f"tile_m must be a multiple of warps_m*{_MMA_M}"),
            (self.tile_n % (self.warps_n * _WARP_N_QUANTUM) == 0,
             f"tile_n must be a multiple of warps_n*{_WARP_N_QUANTUM}"),
            (self.tile_k in (64, 128), "tile_k must be 64 or 128 (int8 bytes per smem row, swizzle atom)"),
            (self.stages >= 3, "stages must be >= 3 (the mainloop keeps stages-1 loads in flight)"),
            ((self.tile_m * self.tile_k // _CP_ASYNC_BYTES) % self.num_threads == 0,
             "the A tile must split evenly into 16-byte cp.async chunks over all threads"),
            ((self.tile_n * self.tile_k // _CP_ASYNC_BYTES) % self.num_threads == 0,
             "the B tile must split evenly into 16-byte cp.async chunks over all threads"),
            (self.num_threads % (self.tile_n // _OUT_VEC_ELEMS) == 0
             and (self.tile_m * self.tile_n // _OUT_VEC_ELEMS) % self.num_threads == 0,
             "the output tile must split evenly into 16-byte stores over all threads"),
            (self.tile_m * self.tile_n * 2 <= self.smem_bytes, "the fp16 output tile must fit in the A/B smem"),
            (self.smem_bytes <= SMEM_PER_BLOCK.get(arch, SMEM_PER_BLOCK["sm_86"]),
             f"{self.smem_bytes} B of smem exceeds the {arch} per-block limit"),
            (wm >= 16 and wn >= 16, "each warp needs at least a 16x16 tile"),
        ]
        for ok, rule in rules:
            if not ok:
                raise ValueError(f"invalid Sm80TileConfig {self}: {rule}")

    def ctas_per_sm(self, device_arch: str) -> int:
        """Occupancy estimate from smem, registers (64K per SM) and warps (48 per SM on sm_86/89, 64 otherwise)."""
        by_smem = SMEM_PER_SM.get(device_arch, SMEM_PER_SM["sm_86"]) // (self.smem_bytes + 1024)
        by_regs = 65536 // (self.num_threads * ((self.regs_per_thread_estimate() + 7) // 8 * 8))
        max_warps = 48 if device_arch in ("sm_86", "sm_89") else 64
        by_warps = max_warps // (self.warps_m * self.warps_n)
        return max(1, min(by_smem, by_regs, by_warps, 32))


def _cfg(tm, tn, tk, wm, wn, stages):
    return Sm80TileConfig(tm, tn, tk, wm, wn, stages)


# (max_m, config for N < 4096, config for N >= 4096); the last row has max_m=None (any M).
_TABLE_SM80 = (
    (16, _cfg(16, 64, 128, 1, 4, 6), _cfg(16, 64, 128, 1, 4, 6)),
    (32, _cfg(32, 64, 128, 2, 2, 6), _cfg(32, 64, 128, 2, 2, 6)),
    (64, _cfg(64, 64, 128, 2, 2, 5), _cfg(64, 128, 128, 2, 2, 5)),
    (128, _cfg(128, 128, 64, 2, 2, 5), _cfg(128, 128, 64, 2, 2, 5)),
    (None, _cfg(128, 128, 64, 2, 2, 5), _cfg(128, 256, 64, 2, 4, 4)),
)
_TABLE_SM86_89 = (
    # 4 stages (40 KB) rather than 5 (50 KB + reserve) so that two decode CTAs fit in a 100 KB SM.
    (16, _cfg(16, 64, 128, 1, 4, 4), _cfg(16, 64, 128, 1, 4, 4)),
    (32, _cfg(32, 64, 128, 2, 2, 4), _cfg(32, 64, 128, 2, 2, 4)),
    (64, _cfg(64, 64, 128, 2, 2, 4), _cfg(64, 128, 64, 2, 2, 5)),
    (128, _cfg(128, 128, 64, 2, 2, 4), _cfg(128, 128, 64, 2, 2, 4)),
    (None, _cfg(128, 128, 64, 2, 2, 4), _cfg(128, 256, 64, 2, 4, 3)),
)
CONFIG_TABLES = {"sm_80": _TABLE_SM80, "sm_86": _TABLE_SM86_89, "sm_87": _TABLE_SM80, "sm_89": _TABLE_SM86_89}


def normalize_arch(arch: str) -> str:
    """'sm80', 'sm_80', '80', 'sm_80a' -> 'sm_80'; raises ValueError for archs this kernel has no table for."""
    a = str(arch).lower().replace("sm_", "").replace("sm", "").rstrip("a")
    name = f"sm_{a}"
    if name == "sm_75":
        raise ValueError(
            "arch sm_75 (Turing) is not supported: CuTe DSL (nvidia-cutlass-dsl 4.8.1) cannot compile for it - its "
            "lowest target is sm_80 - and Turing also lacks the cp.async and mma.sync m16n8k32 int8 instructions this "
            f"kernel is built from. Supported: {', '.join(SUPPORTED_ARCHS)}; newer GPUs can force arch='sm_80'."
        )
    if name not in SUPPORTED_ARCHS:
        raise ValueError(f"arch {arch!r} has no SM80-class int8 config table; supported: {', '.join(SUPPORTED_ARCHS)}")
    return name


def table_arch_for_capability(capability: tuple[int, int]) -> str:
    """The config table a device of this compute capability uses by default: its own for sm_8x, sm_80 (A100's) for
    newer GPUs that force the SM80 kernel, and the sm_75 error for Turing and older."""
    major, minor = capability
    if major >= 9:
        return "sm_80"
    return normalize_arch(f"sm_{major}{minor}")


def select_config(arch: str, m: int, n: int) -> Sm80TileConfig:
    """The table entry for (arch, M bucket, N bucket)."""
    table = CONFIG_TABLES[normalize_arch(arch)]
    for max_m, small_n, large_n in table:
        if max_m is None or m <= max_m:
            return large_n if n >= 4096 else small_n
    raise AssertionError("unreachable: the last row matches any M")


def all_configs(arch: str) -> tuple:
    """The distinct configs of one arch's table, in table order."""
    seen = []
    for _, small_n, large_n in CONFIG_TABLES[normalize_arch(arch)]:
        for c in (small_n, large_n):
            if c not in seen:
                seen.append(c)
    return tuple(seen)
