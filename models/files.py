"""Writing files safely, for every layer: temporary names, flushing to disk, and the leftovers of writers that died.

Every output of the project (a checkpoint, an export, the prepared-data cache) is written under a temporary
name beside its final one and renamed when complete. The name is `<dir>/.<name>.<kind>-<pid>`: hidden, so
that no glob for outputs (`last*.ckpt`) finds it, and marked with its writer's pid, so that a later process
can tell the leftovers of a dead writer (`remove_stale_temporaries`) from the work of a live one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

# "old" (a folder moved aside while its replacement is renamed in) is not a leftover to remove: if its writer
# died between the two renames, it is the only copy of the user's output.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?:tmp|prev)-(?P<pid>\d+)$")


def temporary_name(path: str | Path, kind: str) -> Path:
    """`<dir>/.<name>.<kind>-<pid>` for `path` (`kind`: "tmp" while written, "prev" kept to go back to,
    "old" moved aside while replaced)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}")


def fsync(path: str | Path) -> None:
    """Flush a file (or a folder's entries) to disk: a full disk that accepted the writes into the page
    cache (delayed allocation, network file systems) fails here rather than after the rename."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts): what tells a dead writer's temporary files."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | Path, name: str | None = None) -> list[Path]:
    """Remove the temporary files and folders (of `name` only, when given) that writers left in `folder`
    when they died (SIGKILL, power loss): a write killed midway, a checkpoint kept for going back after a
    NaN. A live process's are left alone, except this process's own: it has not started writing, so they
    are an earlier process's that had the same pid (in a container, each run may get the same one). A
    folder where nothing can be removed (read-only) is left as it is: its writability is checked, and
    reported, where something is written there. Returns the removed paths."""
    folder, removed = Path(folder), []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = _TEMPORARY.match(path.name)
        if not match or (name is not None and match["name"] != name):
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and process_alive(pid):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


@contextlib.contextmanager
def new_folders_removed_if_empty(path: str | Path):
    """The folders on the way to `path` (itself included) that do not exist yet, and that the block leaves empty
    (a download that failed, a run refused before it wrote anything), are removed when it ends: an attempt that
    came to nothing leaves no trace."""
    path = Path(path).absolute()
    new = [folder for folder in (path, *path.parents) if not folder.exists()]  # the deepest first
    try:
        yield
    finally:
        for folder in new:
            with contextlib.suppress(OSError):  # not empty, or already gone
                folder.rmdir()
