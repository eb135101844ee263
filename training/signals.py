"""SIGTERM and SIGINT: how a signal reaches a run, the exception that ends a run early (`Stopped`), and the line
and exit status a stop ends the script with. Where the run stops, with a checkpoint, is training/stopping.py
(`StopAtStep`), the one stopper at the step boundary for a signal, a time limit and `max_steps`.

SLURM, Kubernetes and cloud schedulers send SIGTERM some seconds before they kill a job; Ctrl-C sends
SIGINT. Lightning alone turns SIGTERM into a `SIGTERMException`, a `SystemExit` without a code (exit
status 0, no checkpoint), raised at points of its own, one of them in the middle of validation; and
Ctrl-C into exit status 1 after stopping wherever the step was. Here:

- `install()`, the first thing scripts/fit.py does: both signals raise `Stopped`, at once. Before
  training there is nothing to save; after it, nothing more.
- While training (`stopping.StopAtStep`, from `on_train_start` to `on_train_end`), the first
  signal is only noted (`received()`). At the end of that step (or, when the step ends an epoch or is
  followed by a validation, once the checkpoints of the epoch's end or of that validation are written),
  `StopAtStep` writes last.ckpt at the step if it was not (`checkpointing.write_last`) and raises
  `Stopped`, so the checkpoint is one an exact resume starts from. A second signal raises `Stopped` at
  once: whatever was being saved is left as it was (saves are atomic), and the last checkpoint is the one
  before.
- `exit_on_stop(resume)`, around everything scripts/fit.py runs: `Stopped` becomes one line on stderr
  (`stop_message`: where it stopped, the checkpoint, the command that resumes) and the exit status.
- A stop raised while a finalizer runs (a handler runs wherever the main thread is) would be printed and
  dropped by Python; `resend_when_swallowed` sends its signal again instead.
- Lightning's handler for SLURM's requeue signal (SIGUSR1) is never touched. Its SIGTERM handler
  (which also runs the requeue's "bypass") is replaced while training: it would stop mid-validation.

The process exits with 128 + the signal's number (143 for SIGTERM, 130 for SIGINT), as a shell
reports a process that the signal killed, so schedulers and wrappers still see a stop by signal.
Only the standard library: `install()` runs, and `Stopped` may be raised, before torch and Lightning are imported.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received: int | None = None  # the signal noted while training, acted on at the end of its step
_deferring = False
_stopping = False  # a stop is under way: further signals change nothing
_trainer = None  # the Trainer that trains (`watch`), for the exit line of a stop at once


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
        super().__init__(signal.Signals(signum).name if signum is not None else why)
        self.signum, self.epoch, self.step, self.checkpoint, self.why = signum, epoch, step, checkpoint, why
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
        return
    raise Stopped(signum)


def install() -> None:
    """SIGTERM and SIGINT raise `Stopped` (or, while training, are noted: see the module's docstring),
    and processes forked from this one block them. From the main thread only, as `signal.signal` requires."""
    global _children_shielded
    for signum in SIGNALS:
        signal.signal(signum, _handle)
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


def defer_while_training() -> None:
    """Note the first signal rather than stop at once, until `stop_deferring()`. Installs the handler
    again: Lightning puts its own SIGTERM handler in front of it for each `fit` (and restores the one
    it found when `fit` ends)."""
    global _received, _deferring
    _received, _deferring = None, True
    install()


def stop_deferring() -> None:
    global _deferring
    _deferring = False


def watch(trainer) -> None:
    """`trainer` is the one that trains: a stop at once is placed at its step (`exit_on_stop`)."""
    global _trainer
    _trainer = trainer


def received() -> int | None:
    """The signal noted while training and not yet acted on, if any."""
    return _received


def forget() -> None:
    """The noted signal was acted on (or the caller decided to ignore it)."""
    global _received
    _received = None


# The environment settings that change what a resumed run does or how fast it goes, kept in the resume command.
RESUME_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "WANDB_MODE")


def chosen_environment() -> dict[str, str]:
    """The settings of `RESUME_ENVIRONMENT` set now. Taken as a run starts, they are the user's: once the run is
    under way, Lightning's W&B logger has set `WANDB_MODE=dryrun` in this process for an offline run, which a
    resumed run must not inherit (it would stay offline after the user logs in)."""
    return {name: os.environ[name] for name in RESUME_ENVIRONMENT if os.environ.get(name)}


def resume_command(
    args: list[str],
    script: str = "scripts/fit.py",
    settings: dict[str, str] | None = None,
    environment: dict[str, str] | None = None,
    switch: str | None = None,
    dropped: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> str:
    """The command that resumes a run started with `args`: the interpreter that runs this process (the
    README's `.venv/bin/python` rather than whatever `python` means in the user's shell), the environment
    settings `environment` (`chosen_environment()` as the run started; now when None), the same arguments but
    for `settings` ({flag: value}, in place of any value given), then `--ckpt_path last`. A script resumed by a
    flag of its own (`switch`: scripts/generate.py's `--resume`) gets that flag instead, and loses the flags
    without a value in `dropped` (its `--force`); the flags in `unset` go with their values (its `--max-time`, so
    that the resume runs to the end)."""
    settings = {**(settings or {}), **({} if switch else {"--ckpt_path": "last"})}
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == switch or arg in dropped:
            continue
        elif arg in settings or arg in unset:
            skip = True
        elif arg.split("=", 1)[0] not in (*settings, *unset):
            kept.append(arg)
    environment = chosen_environment() if environment is None else environment
    env = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    given = [word for flag, value in settings.items() for word in (flag, value)] + [switch] * bool(switch)
    return " ".join([*env, shlex.join([program(sys.executable or "python"), script, *kept, *given])])


def program(path: str) -> str:
    """How to name the program at `path` in a command a user pastes: relative to the working folder when it lies
    below it (`.venv/bin/python`, `./python`), else the absolute path; never a bare name that PATH would resolve
    to another program (or to none: the venv's `wandb` is on PATH only inside the venv)."""
    relative = os.path.relpath(path)
    if relative.startswith(".."):
        return path
    return relative if os.sep in relative else os.path.join(".", relative)


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
