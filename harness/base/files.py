"""Writing a file whole, or not at all: the one way result files (bench CSVs, tune JSON, the inline
cache's entries) reach the disk.

    replace(path, writer)   write through a temporary file in path's folder, then os.replace onto path
    create(path, writer)    the same, but never over an existing file: a taken name becomes
                            <stem>-2<suffix>, <stem>-3<suffix>, ...; returns the name it got

`writer(tmp)` writes the whole content to the temporary path it is given (pandas' to_csv, a
json.dumps, bytes). A reader therefore sees either no file or a whole one: an interrupted or failed
write leaves at most a hidden `.<name>.p<pid>-<random>.tmp` beside it (no glob of `*.csv` or
`*.json` matches one), which `clean_stale` removes on a later run once that process is gone. Two processes writing the same name at the
same instant both keep their file under `create`: the name is claimed with a hard link, which the
filesystem refuses atomically when the name is taken (O_EXCL for a link).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TMP_SUFFIX = ".tmp"
STALE_AFTER_S = 3600.0  # a temporary file this old belongs to no live writer


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary(path: Path, mode: int | None = None) -> Path:
    """A fresh, empty, exclusively created temporary file in path's folder (mode 0600 until the
    caller's `mode` is applied)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.p{os.getpid()}-", suffix=TMP_SUFFIX)
    os.close(fd)
    if mode is not None:
        os.chmod(tmp, mode)
    return Path(tmp)


def _write_tmp(path: Path, writer: Callable[[Path], object], mode: int | None) -> Path:
    tmp = temporary(path)
    try:
        writer(tmp)
        with open(tmp, "rb+") as f:  # on the disk before the name points at it
            os.fsync(f.fileno())
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _as_writer(data) -> Callable[[Path], object]:
    if callable(data):
        return data
    if isinstance(data, str):
        data = data.encode()
    return lambda p: Path(p).write_bytes(data)


def replace(path, data, mode: int | None = None) -> Path:
    """Write `data` (bytes, str, or writer(tmp_path)) to `path` whole, replacing what is there.
    `mode` defaults to 0666 less the umask (a plain new file's)."""
    path = Path(path)
    tmp = _write_tmp(path, _as_writer(data), mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def create(path, data, mode: int | None = None) -> Path:
    """Write `data` to `path` whole, never over an existing file: when the name is taken (another run
    in the same second, say) the next free <stem>-<n><suffix> is used. Returns the path written."""
    path = Path(path)
    tmp = _write_tmp(path, _as_writer(data), mode)
    try:
        for n in range(1, 10_000):
            dest = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
            try:
                os.link(tmp, dest)
                return dest
            except FileExistsError:
                continue
            except OSError as e:  # a filesystem without hard links: claim the name with O_EXCL instead
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                try:
                    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                except FileExistsError:
                    continue
                os.replace(tmp, dest)
                return dest
        raise FileExistsError(f"{path}: no free name among {path.stem}-2{path.suffix} ... -9999")
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def check_writable(folder) -> Path:
    """Make sure whole files can be written into `folder` (created with its parents if missing), by
    creating and removing one temporary file there: a run whose results would go there checks this
    before it starts, not after its work is done. PermissionError (or the OSError met) with one line naming
    the folder and why, otherwise."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary(folder / "probe").unlink()
    except OSError as e:
        probe = e.filename and Path(e.filename).name.startswith(".probe.p")  # the probe itself: the folder says it
        where = e.filename if e.filename and not probe else folder
        kind = type(e) if type(e) in (PermissionError, FileExistsError, NotADirectoryError) else OSError
        raise kind(f"cannot write in {folder} ({(e.strerror or str(e)).lower()} at {where})") from None
    return folder


def temporary_dir(folder, what: str = "work") -> Path:
    """A private (0700) temporary folder inside `folder`, named so that clean_stale finds it once its
    process is gone: the caller removes it (shutil.rmtree) when done."""
    return Path(tempfile.mkdtemp(dir=folder, prefix=f".{what}.p{os.getpid()}-", suffix=TMP_SUFFIX))


_OWNER = re.compile(r"\.p(\d+)-[^.]*" + re.escape(TMP_SUFFIX) + "$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that number: alive
        return True
    return True


def clean_stale(folder, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporary files and folders (.<name>.p<pid>-<random>.tmp) that an interrupted or
    killed writer left in `folder`: at once when the process named in it is gone, else when older than
    `older_than_s` (the number may have been reused). Returns what was removed."""
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for p in Path(folder).glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                m = _OWNER.search(p.name)
                if (m and not _alive(int(m.group(1)))) or now - p.lstat().st_mtime > older_than_s:
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()
                    removed.append(p)
    return removed


def sha256(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks: what the build's records and the inline cache's
    manifests hold, so that a torn or replaced file is told from the one that was written."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
