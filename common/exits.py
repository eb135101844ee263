"""What an entry point does with an error (docs/guide/faults-and-exits.md lists each answer): `exit_on_user_error`
makes bad input one line and exit status 2, a fault of the environment (an `OSError`, or one torch's zip writer hides
in a `RuntimeError`) one line naming the path and status 1 (`fault_message`, `write_fault`), a reader gone a quiet
exit 141; `writing_to` and `print_lines` name standard output in such a line. Writing outputs whole: common/files.py."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import CheckpointError, DataFormatError, DataNotFoundError, HyperparameterError, InputError, OutputError

# Bad input, exit status 2 (DataFormatError covers CorpusFormatError; DataCacheError is an environment
# fault, an OSError: status 1).
USER_ERRORS = (CheckpointError, InputError, DataNotFoundError, DataFormatError, HyperparameterError)


# What each errno means to someone who ran a script; the errno's name follows in parentheses.
_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "no space left: the file-size limit is reached (ulimit -f)",
    errno.EDQUOT: "no space left: disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or folder",
    errno.ENOTDIR: "not a folder",
    errno.EISDIR: "is a folder",
    errno.EIO: "input/output error (a failing disk or a lost network file system?)",
    errno.EPIPE: "broken pipe (its reader went away)",
    errno.ENAMETOOLONG: "file name too long",
    errno.EEXIST: "already exists",
    errno.ENOTEMPTY: "folder not empty",
    errno.EXDEV: "on another file system",
    errno.EMFILE: "too many open files",
}
# torch's zip writer (PyTorchStreamWriter) reports a failed write as a RuntimeError such as
# "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"; these mark one.
_TORCH_WRITE_FAILURE = ("inline_container.cc", "PytorchStreamWriter", "unexpected pos", "basic_ios::clear")


def fault_reason(err: OSError) -> str:
    code = err.errno
    if code is None and err.args and isinstance(err.args[0], str):  # OSError("message"): it says itself
        return err.args[0]
    words = _REASONS.get(code) or (err.strerror or type(err).__name__).lower()
    name = errno.errorcode.get(code) if code is not None else None
    return f"{words} ({name})" if name else words


def _first_non_folder(path: Path) -> Path | None:
    """The nearest ancestor of `path` that exists and is not a folder (what makes ENOTDIR), if any."""
    for parent in [path, *path.parents]:
        if os.path.lexists(parent):
            return None if parent.is_dir() else parent
    return None


def _missing_folder(path: Path) -> Path:
    """The outermost missing folder on the way to `path`'s folder (what makes ENOENT on a write)."""
    missing = path.parent
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    return missing


def write_fault(err: OSError, path: str | Path) -> str:
    """The one line for `err`, raised while writing `path` (the path the user named, not a temporary one)."""
    path = Path(path)
    if err.errno == errno.ENOENT and not path.parent.is_dir():
        return f"cannot write {path}: folder {_missing_folder(path)} does not exist (ENOENT)"
    if err.errno in (errno.ENOTDIR, errno.EEXIST) and (blocker := _first_non_folder(path.parent)) is not None:
        return f"cannot write {path}: {blocker} is not a folder (ENOTDIR)"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"cannot write {path}: {fault_reason(err)}; check the permissions of folder {path.parent}"
    return f"cannot write {path}: {fault_reason(err)}"


def torch_write_error(err: BaseException) -> OSError | None:
    """The `OSError` behind a torch zip-writer `RuntimeError` (a file object's write raised it), an
    `OSError` of unknown cause for one without, or None when `err` is not such a failure."""
    if not isinstance(err, RuntimeError) or not any(mark in str(err) for mark in _TORCH_WRITE_FAILURE):
        return None
    context = err.__context__
    while context is not None and not isinstance(context, OSError):
        context = context.__context__
    if context is not None:
        return context
    return OSError(None, "the write failed (a full disk or a file-size limit?)")


def fault_message(err: BaseException, path: str | Path | None = None) -> str | None:
    """One line (without "error: ") for an environment fault: an `OSError` (named by `path` when given,
    else by the error's own file name), a torch zip-writer failure, or a decode error; None for
    anything else, which is a bug and keeps its traceback."""
    if isinstance(err, OutputError):
        return str(err)
    if (hidden := torch_write_error(err)) is not None:
        err = hidden
        if path is None:
            return f"cannot write a checkpoint: {fault_reason(err)}"
    if isinstance(err, UnicodeDecodeError):
        where = f"{path}: " if path is not None else ""
        return f"{where}cannot decode byte {err.start} as {err.encoding} ({err.reason}); is the text in another encoding?"
    if isinstance(err, UnicodeEncodeError):
        where = f"{path}: " if path is not None else ""
        return f"{where}cannot encode {err.object[err.start : err.end]!r} as {err.encoding}; set PYTHONIOENCODING=utf-8"
    if isinstance(err, OSError):
        if path is not None:
            return f"{path}: {fault_reason(err)}"
        names = [str(n) for n in (err.filename, err.filename2) if n is not None]
        if names:
            return f"{' -> '.join(names)}: {fault_reason(err)}"
        return fault_reason(err)
    return None


@contextlib.contextmanager
def writing_to(name: str) -> Iterator[None]:
    """Writes in the block go to `name` (a stream such as "standard output", which has no path): an
    `OSError` there becomes an `OutputError` "cannot write NAME: ...". A `BrokenPipeError` passes as it is
    (`exit_on_user_error` makes it a quiet exit)."""
    try:
        yield
    except OSError as err:
        if isinstance(err, (OutputError, BrokenPipeError)):
            raise
        raise OutputError(f"cannot write {name}: {fault_reason(err)}", err.errno) from None


def print_lines(*lines: str) -> None:
    """Print `lines` on standard output and flush them, so that a reader sees them at once: a full device is one
    `OutputError` line naming standard output, a reader gone a quiet exit (`exit_on_user_error`)."""
    with writing_to("standard output"):
        for line in lines:
            print(line)
        sys.stdout.flush()


# Exit statuses: bad input 2 (as argparse), an environment fault 1, a reader gone 141 (128 + SIGPIPE, as
# `cat` gets), Ctrl-C 130.
EXIT_USER_ERROR, EXIT_FAULT, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED = 2, 1, 141, 130
# A resumed run with nothing left to train (its checkpoint already reached max_steps, max_epochs or max_time):
# not a failure of the command, but a job script must be able to tell it from a run that trained.
EXIT_NOTHING_TO_DO = 3
# A command stopped by its own time limit with its output unfinished (scripts/generate.py --max-time), as timeout(1)
# exits: a job script's `generate.py ... && fit.py ...` must not go on to train on part of a corpus.
EXIT_TIME_LIMIT = 124


def quiet_broken_pipe() -> None:
    """After standard output's reader went away (`... | head -1`): point file descriptor 1 at /dev/null,
    so that the interpreter's last flush at exit neither fails nor prints "Exception ignored ...
    BrokenPipeError"."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def exit_on_user_error(main: Callable[..., None]) -> Callable[..., None]:
    """Decorate a script's `main`. A user error (`USER_ERRORS`, text that does not decode) prints one line
    `error: ...` on stderr and exits with status 2; an environment fault (`OSError`: ENOSPC, EFBIG, EROFS,
    EACCES, ENOENT, ENOTDIR, ...; torch's zip writer failing) one line naming the path and status 1;
    standard output's reader gone (`BrokenPipeError`) exits quietly with status 141, as `cat` does;
    Ctrl-C prints "interrupted", status 130. Anything else is a bug and keeps its traceback. Standard
    output is flushed before `main`'s result is returned, so that a failing write is caught here, not
    at the interpreter's exit."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            result = main(*args, **kwargs)
            with writing_to("standard output"):
                sys.stdout.flush()
            return result
        except USER_ERRORS as err:
            _exit(str(err), EXIT_USER_ERROR)
        except BrokenPipeError:
            quiet_broken_pipe()
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except (OSError, UnicodeError, RuntimeError) as err:
            message = fault_message(err)
            if message is None:
                raise
            _exit(message, EXIT_USER_ERROR if isinstance(err, UnicodeError) else EXIT_FAULT)

    return wrapper


def _exit(message: str, status: int):
    with contextlib.suppress(OSError):  # stderr itself unwritable: the status still tells
        print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status) from None
