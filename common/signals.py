"""SIGTERM and SIGINT, for every script that runs long (fit, generate): `Stopped`, the one exception that ends a run
early, and the line, resume command and exit status (128 + the signal) a stop ends with (`exit_on_stop`); `Relay`,
for a script that runs such programs one after another (ablate). docs/guide/training.md ("How a signal reaches a
run") says why Lightning's own handling is replaced and how. Only the standard library: `install()` runs, and
`Stopped` may be raised, before torch and Lightning are imported."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received: int | None = None  # the signal noted while training, acted on at the end of its step
_deferring = False
_stopping = False  # a stop is under way: further signals change nothing
_trainer = None  # the Trainer that trains (`watch`), for the exit line of a stop at once
# Under DDP the launcher (rank 0) decides every stop at once: another process relays its second signal to it
# (`RELAYED`), and it ends the others (`ENDED`). docs/guide/training.md, "How a signal reaches a run", says why.
_children: tuple = ()  # the launcher's processes (`defer`)
_forward = False  # whether a noted signal is passed on to them
_launcher: int | None = None  # in another process: the launcher's pid
RELAYED = {signal.SIGTERM: signal.SIGRTMIN, signal.SIGINT: signal.SIGRTMIN + 1}
ENDED = signal.SIGRTMIN + 2


class Stopped(BaseException):
    """The one exception that ends a run early (a BaseException, so that no `except Exception` swallows it).
    `signum`: the signal, None for a stop at the time limit or `max_steps` (`why` names it); `checkpoint`: the one
    written at the stop's step, None for a stop at once; `epoch` and `step`: where training stood."""

    def __init__(
        self,
        signum: int | None,
        epoch: int | None = None,
        step: int | None = None,
        checkpoint: str | None = None,
        why: str | None = None,
    ):
        self.signum, self.epoch, self.step, self.checkpoint, self.why = signum, epoch, step, checkpoint, why
        super().__init__(self.name)
        if signum is not None:
            ignore_further()  # from the moment a stop is decided, through Lightning's teardown, to the exit

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else str(self.why)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _handle(signum: int, frame) -> None:
    global _received
    if _stopping:  # Lightning's teardown may put this handler back after `ignore_further`
        return
    if _deferring and _received is None:
        _received = signum  # nothing printed here: the handler may interrupt a write to stderr
        for child in _children if _forward else ():
            if child.poll() is None:
                child.send_signal(signum)  # a signal sent to rank 0 alone, as schedulers may, reaches every rank
        return
    if _launcher is not None:
        with contextlib.suppress(OSError):  # gone: this process stops on its own
            return os.kill(_launcher, RELAYED[signum])
    _stop_at_once(signum)


def _stop_at_once(signum: int) -> None:
    if _stopping:
        return
    for child in _children:
        if child.poll() is None:
            child.send_signal(ENDED)
    raise Stopped(signum)


def install() -> None:
    """SIGTERM and SIGINT raise `Stopped` (or, while training, are noted: see the module's docstring),
    and processes forked from this one block them. From the main thread only, as `signal.signal` requires."""
    global _children_shielded
    for signum in SIGNALS:
        signal.signal(signum, _handle)
        signal.signal(RELAYED[signum], lambda relayed, frame, signum=signum: _stop_at_once(signum))
    signal.signal(ENDED, lambda ended, frame: os._exit(0))
    if not _children_shielded:
        os.register_at_fork(after_in_child=_shield_child)
        resend_when_swallowed(Stopped, _stop_again)
        _children_shielded = True


_children_shielded = False


def resend_when_swallowed(kind: type[BaseException], before: Callable[[BaseException], None] = lambda stop: None) -> None:
    """In `sys.unraisablehook`: an exception of `kind` raised by a handler inside a finalizer, which Python would
    print and drop, is sent again as its `signum` by a thread, after `before(it)`, and raised at the next point that
    can raise it (docs/guide/training.md, "How a signal reaches a run")."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        stop = unraisable.exc_value
        if not isinstance(stop, kind) or getattr(stop, "signum", None) is None:
            previous(unraisable)
            return
        before(stop)
        while True:
            try:
                sender = threading.Timer(0.01, os.kill, (os.getpid(), stop.signum))
                sender.daemon = True
                sender.start()
                return
            except kind:  # sent, and raised here, before the hook returned: send it again
                continue

    sys.unraisablehook = hook


def _stop_again(stop: BaseException) -> None:
    """Before a swallowed `Stopped` is sent again: it set the signals to be ignored (`ignore_further`), and its
    handler must now raise it at once rather than note it."""
    global _stopping, _received
    _stopping, _received = False, stop.signum
    install()


def _shield_child() -> None:
    # A forked helper (a DataLoader worker) leaves the signals to this process, which shuts it down in order
    # (docs/guide/training.md, "How a signal reaches a run": why blocked, not ignored).
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def ignore_further() -> None:
    """Once a stop is under way, further signals are ignored (SIG_IGN, which the interpreter's exit keeps), so that
    none interrupts the line or kills the process before its exit status is set; SIGKILL still ends a hung exit."""
    global _stopping
    _stopping = True
    with contextlib.suppress(ValueError):  # signal.signal works from the main thread only
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def defer(children=(), again: bool = False, forward: bool = False, launcher: int | None = None) -> None:
    """Note the first signal rather than stop at once, until `stop_deferring()`: training stops at the end of its
    step (training/stopping.py), corpus generation once its shards under way are written (inference/generation).
    `children`: the processes a stop at once ends (Lightning's DDP processes, `subprocess.Popen`s), to which a
    noted signal is passed on when `forward`; `launcher`: in such a process, the pid a second signal goes to.
    Installs the handler again: Lightning puts its own SIGTERM handler in front of it for each `fit` or `predict`;
    `again` keeps a signal noted before that."""
    global _received, _deferring, _children, _forward, _launcher, _stopping
    _received, _stopping = (_received, _stopping) if again else (None, False)  # a new run: an earlier stop is over
    _deferring, _children, _forward, _launcher = True, tuple(children), forward, launcher
    install()


def stop_deferring() -> None:
    global _deferring, _children, _launcher
    _deferring, _children, _launcher = False, (), None


@contextlib.contextmanager
def deferred():
    """`defer()` within the block, the handlers found before it put back after it (scripts/generate.py's run)."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    defer()
    try:
        yield
    finally:
        stop_deferring()
        for signum, handler in before.items():
            signal.signal(signum, handler)


class Relay:
    """SIGINT and SIGTERM while a script runs other programs one after another (scripts/ablate.py's runs): noted
    (`signum`) and passed on to the program under way (`wait`), which stops its own way; the script runs no more.
    Each program has a process group of its own, so Ctrl-C at a terminal reaches it once, through here."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.run = None  # the subprocess.Popen under way
        self.passed = 0  # signals passed on to it
        for signum in SIGNALS:
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame) -> None:
        self.signum = signum
        if self.run is not None and self.run.poll() is None:
            self.run.send_signal(signum)
            self.passed += 1

    def wait(self, cmd: list[str], **kwargs) -> int:
        """Run `cmd` to its end (a signal noted while it was being started reaches it too); its exit status."""
        self.passed, self.run = 0, subprocess.Popen(cmd, process_group=0, **kwargs)
        if self.signum is not None and not self.passed:
            self._note(self.signum, None)
        try:
            return self.run.wait()
        finally:
            self.run = None


def watch(trainer) -> None:
    """`trainer` is the one that trains: a stop at once is placed at its step (`exit_on_stop`)."""
    global _trainer
    _trainer = trainer


def received() -> int | None:
    return _received  # the signal noted (`defer`) and not yet acted on, if any


def forget() -> None:
    """The noted signal was acted on (or the caller decided to ignore it)."""
    global _received
    _received = None


def stop_message(stop: Stopped, last_checkpoint: str | None, resume: str) -> str:
    """The one line printed when `stop` ended a run; `last_checkpoint` is the newest checkpoint the run
    wrote or resumed from, if any."""
    where = f" at epoch {stop.epoch} step {stop.step}" if stop.step is not None else ""
    if stop.checkpoint:
        return f"stopped by {stop.name}{where}; checkpoint written to {stop.checkpoint}; resume with: {resume}"
    if last_checkpoint and os.path.isfile(last_checkpoint):
        return (
            f"stopped by {stop.name}{where}, at once: no checkpoint at the signal; the last checkpoint "
            f"is {last_checkpoint}; resume with: {resume}"
        )
    return f"stopped by {stop.name}{where or ' before the first training step'}; no checkpoint was written"


@contextlib.contextmanager
def exit_on_stop(resume: str = "", last_checkpoint: Callable[[Any], str | None] | None = None):
    """A signal's `Stopped` ends the script with one line on stderr (rank zero's) and exit status 128 + the signal.
    Around the imports with no `resume`; around the CLI and the run with the resume command and `last_checkpoint`
    (training/resume.py's), which names the checkpoint a stop at once leaves, placed at the Trainer's step."""
    try:
        yield
    except Stopped as stop:
        if stop.signum is None:  # a time limit's or max_steps' stop is the end of fitting (training.cli.run_fit)
            raise
        ignore_further()  # again: Lightning's teardown put a Python handler back, which exit resets to default
        trainer = _trainer
        if stop.step is None and trainer is not None and trainer.global_step > 0:
            stop.epoch, stop.step = trainer.current_epoch, trainer.global_step
        if trainer is None or trainer.is_global_zero:
            last = last_checkpoint(trainer) if trainer is not None and last_checkpoint is not None else None
            print(stop_message(stop, last, resume), file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_status) from None
