"""The inline cache under faults (harness.compile.jit): a truncated or replaced library, a deleted log, inputs
the key used to leave out (nvcc's environment flags, a header through -I, the host compiler, the link
flags), a folder made under umask 000 or owned/writable by another user, a bad CUDALAB_CACHE, and an
interrupted or killed compile. No GPU needed: the functions here are host code, called through cffi.

Each load after the cache was tampered with runs in a fresh process: a library already loaded in this
one would be reused by the dynamic loader whatever the file now holds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import pids_mentioning, sigint_as_from_a_terminal
from harness.calling import inline
from harness.compile import jit

ROOT = Path(__file__).resolve().parents[2]
ANSWER = '''
__global__ void touch(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" long answer(void) { return ANSWER_VALUE; }
'''


def _src(value: int, salt: str) -> str:
    return f"// {salt}\n" + ANSWER.replace("ANSWER_VALUE", str(value))


CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    from harness.calling import inline
    src, flags = sys.argv[1], json.loads(sys.argv[2])
    m = inline.load(src, name="answer", flags=flags)
    print(json.dumps({{"value": m.answer(), "hit": m.cache_hit, "rows": len(m.resource_usage()), "path": str(m.path)}}))
""").format(root=str(ROOT))


def _load(cache: Path, src: str, flags=(), env=None, umask=None) -> tuple[dict, str]:
    """inline.load in a fresh process: (what it saw, its stderr)."""
    e = {**os.environ, "CUDALAB_CACHE": str(cache), **(env or {})}
    e.pop("NVCC_APPEND_FLAGS", None) if "NVCC_APPEND_FLAGS" not in (env or {}) else None
    pre = (lambda: os.umask(umask)) if umask is not None else None
    p = subprocess.run([sys.executable, "-c", CHILD, src, json.dumps(list(flags))], capture_output=True, text=True,
                       env=e, timeout=300, preexec_fn=pre)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def _damaged_once(err: str) -> bool:
    return err.count("is damaged") == 1 and "rebuilding it" in err


def test_a_truncated_library_is_rebuilt_not_loaded(cache):
    src = _src(7, "truncated")
    first, _ = _load(cache, src)
    assert first["value"] == 7 and not first["hit"]
    so = Path(first["path"])
    so.write_bytes(so.read_bytes()[:4096])  # what a full disk or a killed copy leaves
    again, err = _load(cache, src)
    assert again["value"] == 7 and not again["hit"] and _damaged_once(err) and so.name in err
    third, err = _load(cache, src)
    assert third["hit"] and "damaged" not in err


def test_another_sources_library_copied_over_an_entry_is_rebuilt(cache):
    seven, _ = _load(cache, _src(7, "swap"))
    eight, _ = _load(cache, _src(8, "swap"))
    shutil.copyfile(eight["path"], seven["path"])  # a valid library, of another source
    got, err = _load(cache, _src(7, "swap"))
    assert got["value"] == 7 and not got["hit"] and _damaged_once(err) and "SHA-256" in err


def test_a_deleted_log_is_rebuilt_and_resource_usage_has_rows(cache):
    first, _ = _load(cache, _src(7, "log"))
    assert first["rows"] >= 1  # ptxas -v's line for `touch`
    Path(first["path"]).with_suffix(".log").unlink()
    again, err = _load(cache, _src(7, "log"))
    assert not again["hit"] and again["rows"] >= 1 and _damaged_once(err)


def test_nvcc_environment_flags_are_in_the_key(cache):
    src = _src(0, "env").replace("return 0;", "return FOO;")
    one, _ = _load(cache, src, env={"NVCC_APPEND_FLAGS": "-DFOO=1"})
    two, _ = _load(cache, src, env={"NVCC_APPEND_FLAGS": "-DFOO=2"})
    assert (one["value"], two["value"]) == (1, 2) and not two["hit"]
    assert _load(cache, src, env={"NVCC_APPEND_FLAGS": "-DFOO=1"})[0]["hit"]


def test_a_header_through_a_users_include_folder_is_followed(cache, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "answer_value.h").write_text("#define ANSWER_FROM_HEADER 3\n")
    src = '#include "answer_value.h"\nextern "C" long answer(void) { return ANSWER_FROM_HEADER; }\n'
    first, _ = _load(cache, src, flags=["-I", str(inc)])
    (inc / "answer_value.h").write_text("#define ANSWER_FROM_HEADER 4\n")
    second, err = _load(cache, src, flags=["-I", str(inc)])
    assert (first["value"], second["value"]) == (3, 4) and not second["hit"] and "damaged" not in err
    # Touched but not changed (a checkout, a copy): still a hit.
    os.utime(inc / "answer_value.h")
    assert _load(cache, src, flags=["-I", str(inc)])[0]["hit"]


def test_host_compiler_and_link_flags_are_in_the_key(monkeypatch, tmp_path):
    base = jit._environment_key([])
    wrapper = tmp_path / "cc"
    wrapper.mkdir()
    (wrapper / "g++").write_text('#!/bin/sh\nexec g++ "$@"\n')
    (wrapper / "g++").chmod(0o755)
    assert jit._environment_key(["-ccbin", str(wrapper)]) != base
    assert jit._environment_key([f"--compiler-bindir={wrapper}"]) != base
    monkeypatch.setenv("NVCC_CCBIN", str(wrapper))
    assert jit._environment_key([]) != base
    monkeypatch.delenv("NVCC_CCBIN")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", "-DX=1")
    assert jit._environment_key([]) != base
    monkeypatch.delenv("NVCC_PREPEND_FLAGS")
    monkeypatch.setattr(jit.toolchain, "link_flags", lambda: ["-L/elsewhere", "-lcudart"])
    assert jit._environment_key([]) != base


# --- who may write the cache ----------------------------------------------------------------------

def test_a_cache_made_under_umask_000_is_private(tmp_path):
    cache = tmp_path / "a" / "b" / "cache"
    got, _ = _load(cache, _src(7, "umask"), umask=0)
    for d in (tmp_path / "a", tmp_path / "a" / "b", cache):
        assert d.stat().st_mode & 0o777 == 0o700, d
    for f in cache.iterdir():
        assert f.stat().st_mode & 0o077 == 0, f"{f.name} is {f.stat().st_mode & 0o777:o}"
    assert got["value"] == 7


def test_a_cache_folder_others_can_write_is_refused(monkeypatch, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("CUDALAB_CACHE", str(folder))
    with pytest.raises(jit.InlineCacheError, match="other users can write it .mode 777.") as ei:
        inline.load(_src(7, "shared"), name="answer")
    assert "CUDALAB_CACHE=" in str(ei.value) and "\n" not in str(ei.value)
    assert list(folder.iterdir()) == []  # nothing compiled into it, nothing loaded from it


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_or_entry_another_user_owns_is_not_used(monkeypatch, tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    monkeypatch.setenv("CUDALAB_CACHE", str(folder))
    with pytest.raises(jit.InlineCacheError, match=r"owned by another user \(uid 65534\)"):
        inline.load(_src(7, "theirs"), name="answer")
    cache = tmp_path / "mine"
    first, _ = _load(cache, _src(7, "entry"))
    os.chown(first["path"], 65534, 65534)  # an entry planted by someone else
    again, err = _load(cache, _src(7, "entry"))
    assert not again["hit"] and _damaged_once(err) and "another user" in err


BAD_CACHES = ["a file", "under /dev/null", "read-only"]


@pytest.mark.parametrize("what", BAD_CACHES)
def test_a_bad_cudalab_cache_is_one_line(monkeypatch, tmp_path, what):
    if what == "a file":
        path, why = tmp_path / "f", "is a file"
        path.write_text("x")
    elif what == "under /dev/null":
        path, why = Path("/dev/null/cache"), "is a file, not a folder"
    else:
        path, why = tmp_path / "ro" / "cache", "cannot create it (permission denied"
        (tmp_path / "ro").mkdir(mode=0o555)
        if os.geteuid() == 0:  # root writes anywhere: the refusal a user would get, as the kernel gives it
            def refused(p, mode=0o777):
                raise PermissionError(13, "Permission denied", str(p))
            monkeypatch.setattr(jit.os, "mkdir", refused)
    monkeypatch.setenv("CUDALAB_CACHE", str(path))
    with pytest.raises(inline.InlineCacheError) as ei:
        inline.load(_src(7, "bad"), name="answer")
    line = str(ei.value)
    assert "\n" not in line and line.startswith(f"CUDALAB_CACHE={path}: ") and why in line, line
    assert "set CUDALAB_CACHE to a folder of your own" in line
    assert ei.value._render_traceback_() == [f"InlineCacheError: {line}"]  # a notebook shows the line only


# --- interrupted and killed compiles ---------------------------------------------------------------

SLOW = "\n".join(f"template <int N> __global__ void k{i}(float *x) {{ for (int j = 0; j < N; ++j) x[j] += j * {i}; }}\n"
                 f"template __global__ void k{i}<{i + 100}>(float *);" for i in range(300))
SLOW += '\nextern "C" long answer(void) { return 7; }\n'

LOADER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from harness.calling import inline
    m = inline.load(sys.argv[1], name="slow")
    print(m.answer())
""").format(root=str(ROOT))


def _start_slow_compile(tmp_path):
    cache, tmpdir = tmp_path / "cache", tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "CUDALAB_CACHE": str(cache), "TMPDIR": str(tmpdir)}
    p = subprocess.Popen([sys.executable, "-c", LOADER, SLOW + f"// {tmp_path}\n"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_as_from_a_terminal)
    deadline = time.monotonic() + 120
    while not any(b"cicc" in Path(f"/proc/{q}/cmdline").read_bytes() for q in pids_mentioning(str(tmp_path))
                  if Path(f"/proc/{q}/cmdline").exists()):
        assert p.poll() is None and time.monotonic() < deadline, "the compile never reached cicc"
        time.sleep(0.05)
    return p, cache, tmpdir


def _reap(marker: str) -> None:
    for q in pids_mentioning(marker):
        try:
            os.kill(q, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_during_an_inline_compile_stops_nvcc_and_leaves_nothing(tmp_path, sig):
    p, cache, tmpdir = _start_slow_compile(tmp_path)
    try:
        t0 = time.monotonic()
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert time.monotonic() - t0 < 10 and "KeyboardInterrupt" in err
        time.sleep(0.5)
        assert pids_mentioning(str(tmp_path)) == [], "nvcc's children run on after the interrupt"
        assert list(tmpdir.iterdir()) == [], "nvcc's temporary files were left in TMPDIR"
        assert not list(cache.glob(".*")), f"left in the cache: {[x.name for x in cache.glob('.*')]}"
        assert not list(cache.glob("*.so")) and not list(cache.glob("*.manifest.json"))
    finally:
        _reap(str(tmp_path))


def test_after_a_killed_compile_the_next_run_cleans_up(tmp_path):
    p, cache, tmpdir = _start_slow_compile(tmp_path)
    try:
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    finally:
        _reap(str(tmp_path))  # nvcc's group outlives a SIGKILLed parent; the user's next run meets what it left
    leftovers = list(cache.glob(".*.tmp"))
    assert leftovers, "the kill came too late to leave anything: nothing to check"
    got, err = _load(cache, _src(9, "after a kill"))
    assert got["value"] == 9 and not list(cache.glob(".*.tmp")), [x.name for x in cache.glob(".*.tmp")]
