"""Prepared data on disk: one folder per key (a hash of everything that changes its contents), built once under a
lock, and either complete or not used (the layout: docs/guide/data.md, "The cache")."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from common.errors import DataCacheError
from common.files import fsync, remove_stale_temporaries, temporary_name

FORMAT_VERSION = 1  # bump when the layout of a prepared folder changes
META = "meta.json"


def digest(parts: object) -> str:
    """A short stable hash of JSON-able `parts`."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=True).encode()).hexdigest()[:16]


def file_fingerprint(path: Path, probe: int = 1 << 16) -> dict:
    """What identifies a source file cheaply: its name, size, modification time, and a hash of its two ends."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(probe))
        if st.st_size > probe:
            f.seek(max(st.st_size - probe, probe))
            h.update(f.read(probe))
    return {"name": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ends": h.hexdigest()[:16]}


def default_root(data_dir: Path) -> tuple[Path, str | None]:
    """Where the prepared data of `data_dir` goes when no cache folder is given, and the line that says so when it
    is not the usual place: `<data_dir>/.cache` where that can be written (or the data folder is not there yet);
    otherwise, as for a read-only copy of a corpus shared between users, a folder of this user's under
    `$XDG_CACHE_HOME` (~/.cache). A folder whose mode bits say read-only counts as such for root too, who could
    write it anyway."""
    beside = data_dir / ".cache"
    folder = beside if beside.is_dir() else data_dir
    if not data_dir.exists() or (os.access(folder, os.W_OK) and folder.stat().st_mode & 0o222):
        return beside, None
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = home / "transformer-lightning" / f"{data_dir.name}-{digest(str(data_dir.resolve()))[:8]}"
    return root, f"{folder} is not writable: the prepared data goes to {root} (--data.cache_dir to choose another)"


def read_complete(folder: Path, expected_files: Callable[[dict], Iterable[tuple[str, int]]] | None = None) -> dict | None:
    """The metadata of a complete prepared folder, or None: no meta.json, another format, or a file missing
    or of another size than the metadata records (a truncated copy)."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format_version") != FORMAT_VERSION:
        return None
    for name, size in expected_files(meta) if expected_files else ():
        try:
            if (folder / name).stat().st_size != size:
                return None
        except OSError:
            return None
    return meta


@contextlib.contextmanager
def _locked(lock_path: Path):
    with open(lock_path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released by the kernel if this process dies
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def open_or_build(
    folder: Path,
    build: Callable[[Path], dict],
    expected_files: Callable[[dict], Iterable[tuple[str, int]]] | None = None,
) -> dict:
    """The metadata of `folder`, built first by `build(tmp_folder) -> meta` unless a complete copy exists.

    One process builds; others (DDP ranks of the node, a second run started meanwhile) wait on the lock and
    then read what it wrote. A build that fails or is interrupted leaves nothing that looks complete."""
    meta = read_complete(folder, expected_files)
    if meta is not None:
        return meta
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = folder.with_name(folder.name + ".lock")
        lock_cm = _locked(lock)
        lock_cm.__enter__()
    except OSError as err:
        raise DataCacheError(
            f"cannot write the prepared-data cache in {folder.parent} ({err.strerror or err}); "
            "pass --data.cache_dir with a writable folder"
        ) from None
    try:
        meta = read_complete(folder, expected_files)  # built by another process while this one waited
        if meta is not None:
            return meta
        remove_stale_temporaries(folder.parent, folder.name)  # builds killed midway (this process's pid included)
        tmp = temporary_name(folder, "tmp")
        try:
            tmp.mkdir()
            meta = {"format_version": FORMAT_VERSION, **build(tmp)}
            with open(tmp / META, "w") as f:
                json.dump(meta, f, indent=1)
            fsync(tmp / META)  # meta.json, the mark of a complete folder, reaches the disk before the rename
            if folder.exists():  # an incomplete or damaged copy under the same key
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise DataCacheError(
                f"cannot write the prepared-data cache in {folder.parent} ({err.strerror or err}); "
                "free some space or pass --data.cache_dir with another folder"
            ) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return meta
    finally:
        lock_cm.__exit__(None, None, None)
