"""The compile cache: memory hit, disk reuse across processes, concurrent writers, corrupt and stale entries."""

import os
import subprocess
import sys
from pathlib import Path

from cute_kernels import jit_cache

ROOT = Path(__file__).resolve().parents[1]


def _run_probe(cache_dir, tag="probe"):
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=str(cache_dir), CUTE_DSL_ARCH="sm_90a", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tests.cache_probe", tag], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc, with_dir=False):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    return (lines[-1], Path(lines[-2])) if with_dir else lines[-1]


def test_second_process_loads_from_disk(tmp_path):
    res, entry_dir = _result(_run_probe(tmp_path), with_dir=True)
    assert res == "compiles=1 disk_hits=0 memory_hits=0 corrupt=0"
    objs = list(entry_dir.glob("*.o"))
    assert len(objs) == 1 and objs[0].stat().st_size > 0
    assert _result(_run_probe(tmp_path)) == "compiles=0 disk_hits=1 memory_hits=0 corrupt=0"


def test_concurrent_processes_do_not_corrupt(tmp_path):
    procs = [_run_probe(tmp_path, "race") for _ in range(3)]
    results = [_result(p, with_dir=True) for p in procs]
    entry_dir = results[0][1]
    results = [r[0] for r in results]
    # exactly one compiled (the exclusive lock serializes the others, which then load the finished object)
    assert sorted(r.split()[0] for r in results) == ["compiles=0", "compiles=0", "compiles=1"], results
    assert not list(entry_dir.glob("*.tmp.*"))
    assert _result(_run_probe(tmp_path, "race")).startswith("compiles=0 disk_hits=1")


def test_corrupt_entry_is_recompiled(tmp_path):
    _, entry_dir = _result(_run_probe(tmp_path), with_dir=True)
    obj = next(entry_dir.glob("*.o"))
    obj.write_bytes(b"not an object file")
    assert _result(_run_probe(tmp_path)) == "compiles=1 disk_hits=0 memory_hits=0 corrupt=1"
    assert _result(_run_probe(tmp_path)) == "compiles=0 disk_hits=1 memory_hits=0 corrupt=0"


def test_memory_hit_and_disable(tmp_path, monkeypatch):
    from tests import cache_probe

    monkeypatch.setenv("CUTE_KERNELS_CACHE_DIR", str(tmp_path))
    jit_cache.clear_memory()
    before = jit_cache.stats.memory_hits
    f1 = cache_probe.get("mem")
    f2 = cache_probe.get("mem")
    assert f1 is f2 and jit_cache.stats.memory_hits == before + 1
    monkeypatch.setenv("CUTE_KERNELS_DISK_CACHE", "0")
    jit_cache.clear_memory()
    compiles = jit_cache.stats.compiles
    cache_probe.get("nodisk")
    assert jit_cache.stats.compiles == compiles + 1
    assert not any("nodisk" in p.read_text() for p in Path(tmp_path).rglob("*.key"))


def test_fingerprint_covers_sources_and_versions():
    fp = jit_cache.source_fingerprint()
    assert len(fp) == 24 and jit_cache.entry_dir().name == fp

