"""SIGTERM and SIGINT, for every script that runs long (fit, generate; docs/guide/training.md and
docs/guide/corpus-generation.md say what a user sees): how a signal reaches a run, `Stopped`, the one exception that
ends a run early, and the line, resume command and exit status a stop ends with (`exit_on_stop`: 128 + the signal,
as a shell reports a process the signal killed); `Relay`, for a script that runs such programs one after another
(ablate).

Lightning alone turns SIGTERM (what schedulers send some seconds before they kill a job) into a `SystemExit` without
a code (status 0, no checkpoint), raised at points of its own, one of them in the middle of validation; and Ctrl-C
into status 1 wherever the step was. Here `install()` makes both raise `Stopped` at once (before training there is
nothing to save), and `defer()` only notes the first (`received()`) until the work reaches its next boundary
(training/stopping.py, inference/generation); a second raises `Stopped` at once. Lightning's handler of SLURM's
requeue signal (SIGUSR1) is never touched.

Only the standard library: `install()` runs, and `Stopped` may be raised, before torch and Lightning are imported.
"""

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
# Lightning's DDP processes and the one that launched them (rank 0), which decides every stop at once, so that it
# prints the line: another process passes its second signal on to the launcher (`RELAYED`, one for each signal),
# and the launcher's stop at once ends the others (`ENDED`) with status 0, so that Lightning's watch over its
# children does not SIGKILL the launcher (status 137, no line) when one of them ends.
_children: tuple = ()  # the launcher's processes (`defer`)
_forward = False  # whether a noted signal is passed on to them
_launcher: int | None = None  # in another process: the launcher's pid
RELAYED = {signal.SIGTERM: signal.SIGRTMIN, signal.SIGINT: signal.SIGRTMIN + 1}
ENDED = signal.SIGRTMIN + 2


class Stopped(BaseException):
    """The one exception that ends a run early: raised at the end of a step by `stopping.StopAtStep` for each of
    its triggers, and at once by a second signal or one outside training. A BaseException, like
    KeyboardInterrupt, so that it leaves `trainer.fit` the way Lightning lets a stop leave it and no
    `except Exception` on the way swallows it. `signum` is the signal, None for a stop at the time limit or
    `max_steps` (`why` names it), which `training.cli.run_fit` takes as the end of fitting; a signal's ends the
    script (`exit_on_stop`). `checkpoint` is the path of the checkpoint written at the stop's step (None when
    the stop came at once); `epoch` and `step` say where training stood."""

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
    """A handler runs wherever the main thread is, a finalizer or a weakref callback included (Lightning's and
    torch's free objects all the time), and an exception raised there cannot leave it: Python prints it with its
    traceback ("Exception ignored in ...") and drops it, and the stop is lost. Installed in `sys.unraisablehook`
    for the exceptions of `kind` (which carry the `signum` that raised them): such a one is sent again instead,
    after `before(it)`, and its handler raises it at the next point that can raise it; nothing is printed. Sent
    by a thread a moment later: sent from the hook, the handler would run within the hook, where it cannot raise
    either (one that lands in another finalizer comes back here, and is sent again)."""
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
    # A forked helper (a DataLoader worker) leaves the signals to this process, which stops in order and
    # shuts its workers down. Killed by the signal of its process group (SLURM's, `kill -- -PGID`, Ctrl-C),
    # a worker would make torch raise "DataLoader worker is killed by signal" in the middle of a step.
    # Blocked rather than ignored: torch's workers install a SIGTERM handler of their own. A program
    # started with subprocess runs no at-fork hook, so it keeps the default signals.
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def ignore_further() -> None:
    """Once a stop is under way, further signals are ignored: the process is already on its way out, and a
    second SIGTERM (a scheduler's, or a group's signal arriving twice) must neither raise in the middle of
    printing the line nor kill the process before its exit status is set. SIG_IGN rather than a handler that
    returns: the interpreter's exit resets Python handlers to the default (death by the signal), not SIG_IGN.
    SIGKILL still ends a hung exit."""
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
    """SIGINT and SIGTERM while a script runs other programs one after another (scripts/ablate.py's runs): the
    signal is noted (`signum`) and passed on to the program under way (`wait`), which stops its own way
    (scripts/fit.py: at the end of its step, with a checkpoint; a second signal at once); the script then runs
    no more. The programs start in a process group of their own, so Ctrl-C at a terminal reaches each once,
    through here."""

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
    """A signal's `Stopped` ends the script with one line on stderr (rank zero's) and exit status 128 + the
    signal. Around the imports (a signal while importing torch, seconds) with no `resume`; around the CLI and
    the run with the command that resumes it and `last_checkpoint` (training/resume.py's), which names the
    checkpoint a stop at once leaves (a second signal, or one outside training); such a stop is placed at the
    step the Trainer had reached (`watch`)."""
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
