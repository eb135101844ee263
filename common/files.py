"""Writing files safely, for every layer, and the one check of a script's input file (`require_file`). Every output is
written under a hidden temporary name beside its final one, marked with its writer's pid, and renamed when complete
(`atomic_output`; `atomic_torch_save` and `atomic_write_text` the usual cases); docs/guide/faults-and-exits.md
("How an output is written") says what each step guarantees."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from .errors import DataNotFoundError, OutputError
from .exits import USER_ERRORS, torch_write_error, write_fault

# "old" (a folder moved aside while its replacement is renamed in) is not a leftover to remove: if its writer
# died between the two renames, it is the only copy of the user's output.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?:tmp|prev)-(?P<pid>\d+)$")


def require_file(path: str | Path, flag: str) -> Path:
    """The input file `path` that option `flag` names, or a `DataNotFoundError` naming both when it is no file."""
    if not Path(path).is_file():
        raise DataNotFoundError(f"{flag} file not found: {path}")
    return Path(path)


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


@contextlib.contextmanager
def atomic_output(path: str | Path | None, folder: bool = False) -> Iterator[Path | None]:
    """Write an output atomically: yields a temporary sibling of `path` (`.NAME.tmp-PID`, a file created empty or an
    empty folder with `folder=True`; None for no `path`) for the block to fill, flushed and renamed onto `path` when
    the block ends normally, removed on any failure. docs/guide/faults-and-exits.md ("How an output is written")
    gives the rules: links, devices and pipes, folders, which errors become an `OutputError` naming `path`."""
    if path is None:
        yield None
        return
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.exists() and not (path.is_file() or path.is_dir()):
        try:
            yield path
        except (OSError, RuntimeError) as err:
            fault = _output_fault(err, path, path)
            if fault is None:
                raise
            raise fault from None
        return
    tmp = temporary_name(path, "tmp")
    try:
        if folder:
            tmp.mkdir()
        else:
            tmp.open("xb").close()
    except OSError as err:
        raise OutputError(write_fault(err, path), err.errno) from None
    try:
        yield tmp
        if folder:
            _replace_folder(tmp, path)
        else:
            fsync(tmp)
            os.replace(tmp, path)
    except BaseException as err:
        if folder:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                tmp.unlink()
        fault = _output_fault(err, tmp, path)
        if fault is None:
            raise
        raise fault from None
    with contextlib.suppress(OSError):  # the rename itself to disk; a folder that cannot be fsynced is no error
        fsync(path.parent)


def _output_fault(err: BaseException, tmp: Path, path: Path) -> OutputError | None:
    """`err` as an `OutputError` naming `path` when it is a failure to write the output (no file name, as
    a write or torch's writer gives, or the temporary's own), else None. A signal's stop (or Ctrl-C) that
    interrupted torch's writer, which wraps it in a `RuntimeError`, is raised again as itself: the write did
    not fail, the run is stopping."""
    if isinstance(err, (OutputError, BrokenPipeError, *USER_ERRORS)):
        return None
    context = err.__context__ if isinstance(err, RuntimeError) else None
    while context is not None:
        if not isinstance(context, Exception):  # Stopped, KeyboardInterrupt, SystemExit
            raise context.with_traceback(None) from None
        context = context.__context__
    cause = torch_write_error(err) or (err if isinstance(err, OSError) else None)
    if cause is None:
        return None
    names = [os.path.abspath(n) for n in (cause.filename, cause.filename2) if isinstance(n, (str, os.PathLike))]
    ours = (os.path.abspath(tmp), os.path.abspath(path))
    if names and not any(n == o or n.startswith(o + os.sep) for n in names for o in ours):
        return None
    return OutputError(write_fault(cause, path), cause.errno)


def _replace_folder(tmp: Path, path: Path) -> None:
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    old = temporary_name(path, "old")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


def atomic_torch_save(obj, path: str | Path) -> Path:
    """`torch.save(obj, path)` through `atomic_output`: the old file or the whole new one, never half of
    one; a full disk or file-size limit is an `OutputError` naming `path` (torch's writer would turn it
    into "RuntimeError: ... unexpected pos")."""
    import torch  # here: what else this module does needs no torch (a script's input, before its arguments load it)

    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)  # a file object: the OSError a write raises stays as the RuntimeError's context
    return Path(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """`Path(path).write_text(text)` through `atomic_output`."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)
