"""Compile cache: in-process memo plus an on-disk store of exported TVM-FFI objects.

Why: ``cute.compile`` caches nothing on its compile-only path, and a Hopper GEMM costs 1-4 s to compile against
~0.02 s to reload the exported ``.o``. Every kernel in the library is compiled from fake (symbolic) tensors with
``--enable-tvm-ffi``, so the compiled function takes torch tensors directly and the same object serves every M, N,
K, L of its shape class.

Key: ``(name, key)``, hashed, under a directory named by a fingerprint of the DSL version, the tvm_ffi version, the
Python version and the bytes of every ``.py`` file of this package. Editing a kernel therefore invalidates its entries
(a stale entry is never loaded), and two installs of different versions never share objects.

Disk protocol (safe for concurrent processes):
  * readers load ``<sha>.o`` under a shared ``flock`` on ``<sha>.lock``;
  * a writer compiles under the exclusive lock, exports to ``<sha>.o.tmp.<pid>`` and ``os.replace``s it into place,
    so a killed process never leaves a truncated object behind;
  * an object that fails to load (corrupt, truncated by hand, wrong ABI) is deleted and recompiled, never raised.

Location: ``$CUTE_KERNELS_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/cute_kernels`` (``~/.cache/cute_kernels``).
``CUTE_KERNELS_DISK_CACHE=0`` keeps everything in memory.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_EXPORTED_NAME = "kernel"
_LOCK_TIMEOUT_S = 120.0


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    corrupt_entries: int = 0


stats = CacheStats()
_memory: dict[tuple, object] = {}


def cache_dir() -> Path:
    env = os.environ.get("CUTE_KERNELS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cute_kernels"


def disk_cache_enabled() -> bool:
    return os.environ.get("CUTE_KERNELS_DISK_CACHE", "1") not in ("0", "false", "no")


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of the toolchain versions and of this package's sources (see module docstring)."""
    import cutlass
    import tvm_ffi

    h = hashlib.sha256()
    h.update(f"py{sys.version_info[0]}.{sys.version_info[1]}|cutlass={cutlass.__version__}|"
             f"tvm_ffi={tvm_ffi.__version__}".encode())
    root = Path(__file__).resolve().parent
    for src in sorted(root.rglob("*.py")):
        h.update(src.relative_to(root).as_posix().encode())
        data = src.read_bytes()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:24]


def entry_dir() -> Path:
    return cache_dir() / source_fingerprint()


def _sha(name: str, key: tuple) -> str:
    # repr, not pickle: keys are tuples of str/int/bool/None/tuples, whose repr is stable across processes.
    return hashlib.sha256(repr((name, key)).encode()).hexdigest()[:32]


class _FileLock:
    def __init__(self, path: Path, exclusive: bool):
        self.path, self.exclusive, self.fd = path, exclusive, -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + _LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TimeoutError(f"cute_kernels cache: timed out waiting for {self.path}")
                time.sleep(0.05)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _load(obj_path: Path):
    import cutlass.cute as cute

    return cute.runtime.load_module(str(obj_path), enable_tvm_ffi=True)[_EXPORTED_NAME]


def _try_load(obj_path: Path):
    """Load an entry; a broken one is deleted (and counted) so the caller recompiles."""
    try:
        return _load(obj_path)
    except Exception as exc:  # noqa: BLE001 - any load failure means "recompile"
        stats.corrupt_entries += 1
        warnings.warn(f"cute_kernels cache: dropping unreadable entry {obj_path.name} ({type(exc).__name__}: {exc})",
                      RuntimeWarning, stacklevel=3)
        try:
            obj_path.unlink()
        except OSError:
            pass
        return None


def cached_compile(name: str, key: tuple, build: Callable[[], object]):
    """Return the compiled kernel for ``(name, key)``; ``build()`` runs ``cute.compile(..., "--enable-tvm-ffi")``.

    ``key`` must name everything ``build`` bakes into the kernel (dtypes, config, epilogue variant, arch,
    alignment class) and contain only str/int/float/bool/None and tuples of them.
    """
    mem_key = (name, key)
    fn = _memory.get(mem_key)
    if fn is not None:
        stats.memory_hits += 1
        return fn
    if not disk_cache_enabled():
        stats.compiles += 1
        fn = _memory[mem_key] = build()
        return fn

    d = entry_dir()
    d.mkdir(parents=True, exist_ok=True)
    sha = _sha(name, key)
    obj, lock = d / f"{sha}.o", d / f"{sha}.lock"
    if obj.exists():
        with _FileLock(lock, exclusive=False):
            fn = _try_load(obj) if obj.exists() else None
        if fn is not None:
            stats.disk_hits += 1
            _memory[mem_key] = fn
            return fn
    with _FileLock(lock, exclusive=True):
        # Another process may have finished the same compile while we waited for the lock.
        fn = _try_load(obj) if obj.exists() else None
        if fn is not None:
            stats.disk_hits += 1
        else:
            stats.compiles += 1
            fn = build()
            tmp = obj.with_name(f"{obj.name}.tmp.{os.getpid()}")
            try:
                fn.export_to_c(object_file_path=str(tmp), function_name=_EXPORTED_NAME)
                os.replace(tmp, obj)
                (d / f"{sha}.key").write_text(repr((name, key)) + "\n")
            except Exception as exc:  # noqa: BLE001 - the kernel still works in this process
                warnings.warn(f"cute_kernels cache: could not export {name} ({exc}); it will recompile next process",
                              RuntimeWarning, stacklevel=2)
                tmp.unlink(missing_ok=True)
    _memory[mem_key] = fn
    return fn


def clear_memory() -> None:
    _memory.clear()


def entries() -> list[tuple[str, int]]:
    """(description, size in bytes) of every object stored for the current fingerprint."""
    d = entry_dir()
    if not d.is_dir():
        return []
    out = []
    for obj in sorted(d.glob("*.o")):
        key_file = obj.with_suffix(".key")
        desc = key_file.read_text().strip() if key_file.exists() else obj.stem
        out.append((desc, obj.stat().st_size))
    return out
