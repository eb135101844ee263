"""Faults while scripts/fit.py trains, generated for real in a subprocess on the toy recipe: SIGTERM and
SIGINT (to the process and to its process group, W&B on and off, at random moments and during a
checkpoint save), SLURM's requeue signal, a full disk (RLIMIT_FSIZE), a read-only root directory and
one under a regular file, a GPU asked for where there is none, a loss that becomes NaN with per-step
checkpoints, and the temporary files of killed saves. Each ends with one line on stderr, no
traceback, the exit status it should have, and every earlier checkpoint byte for byte as it was."""

import csv
import hashlib
import json
import os
import random
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback, Timer

from tests.helpers import ENV, FIT, HANG_TIMEOUT, ROOT, fit, recipe_args, run

QUIET = ["--trainer.enable_progress_bar", "false"]


# ---------------------------------------------------------------------------------------------- helpers


class WaitForSignalAt(Callback):
    """Test helper, loaded by scripts/fit.py through --trainer.callbacks: after optimizer step `step`,
    write `marker` and wait (a minute at most) until a SIGTERM or SIGINT has been noted, so that the
    test's signal lands in that very step."""

    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, marker

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        from common import signals

        if trainer.global_step == self.step:
            Path(self.marker).write_text(f"{trainer.current_epoch} {batch_idx}")
            deadline = time.monotonic() + 60
            while signals.received() is None and time.monotonic() < deadline:
                time.sleep(0.02)


class HoldAt(Callback):
    """Test helper: after optimizer step `step`, every rank writes its pid to `marker`.<rank> and waits there (a
    minute at most), so that signals sent to any rank land in that step."""

    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, marker

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            Path(f"{self.marker}.{trainer.global_rank}").write_text(str(os.getpid()))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.02)


class SignalDuringSave(Callback):
    """Test helper: the `n`-th checkpoint save writes half the file, records the sha256 of every
    checkpoint in its folder in `record`, sends this process SIGTERM `times` times, then writes the rest."""

    def __init__(self, n: int, times: int, record: str):
        self.n, self.times, self.record = n, times, record

    def setup(self, trainer, pl_module, stage):
        real_save, calls = torch.save, [0]

        def save(obj, f, *args, **kwargs):
            calls[0] += 1
            if calls[0] != self.n:
                return real_save(obj, f, *args, **kwargs)
            import io

            buffer = io.BytesIO()
            real_save(obj, buffer)
            data = buffer.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            Path(self.record).write_text(json.dumps(hashes(Path(f.name).parent)))
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.01)  # the handler runs here; a second signal raises out of this save
            f.write(data[len(data) // 2 :])

        torch.save = save


class ScaleWeightsAt(Callback):
    """Test helper: after optimizer step `step` (before that step's checkpoint is written: checkpoint
    callbacks run last), multiply every weight by 1e30; finite, enormous weights whose loss is not."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                for p in pl_module.parameters():
                    p.mul_(1e30)


def callback_arg(cls: type, **init_args) -> str:
    spec = {"class_path": f"tests.test_faults_fit.{cls.__name__}", "init_args": init_args}
    return f"--trainer.callbacks+={json.dumps(spec)}"


def hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` (checkpoints, temporary files), by path relative to it."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def temporaries(folder: Path) -> list[Path]:
    return [p for p in Path(folder).rglob(".*") if ".tmp-" in p.name or ".prev-" in p.name]


def one_line(result: subprocess.CompletedProcess | tuple, start: str) -> str:
    """No traceback; exactly one line starting with `start`, the last thing on stderr."""
    stderr = result.stderr if hasattr(result, "stderr") else result[1]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith(start)]
    assert len(lines) == 1, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == lines[0], stderr[-3000:]
    return lines[0]


def start(root: Path, *extra: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    cmd = [*FIT, *extra, "--trainer.default_root_dir", str(root), *QUIET]
    return subprocess.Popen(cmd, cwd=ROOT, env=env or ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kwargs)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = HANG_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float = HANG_TIMEOUT) -> tuple[int, str]:
    try:
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stderr


# ---------------------------------------------------------------------------------------------- SIGTERM, SIGINT

# 3 epochs of 16 steps; an EMA of the weights, so that the average too must resume exactly.
COMMON = ["--trainer.max_epochs", "3", "--test", "false", "--ema_decay", "0.9"]
CSV = ["--trainer.logger", "CSVLogger"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("uninterrupted")
    result = fit(root, *COMMON, *CSV)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(next(root.rglob("last.ckpt")), weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, to_group, logger",
    [(signal.SIGTERM, False, CSV), (signal.SIGTERM, True, []), (signal.SIGINT, False, CSV)],
    ids=["sigterm-pid-csv", "sigterm-group-wandb", "sigint-pid-csv"],
)
def test_signal_mid_epoch_writes_a_checkpoint_that_resumes_exactly(tmp_path, uninterrupted, signum, to_group, logger):
    # The signal lands in step 22 (epoch 1, mid-epoch); the run stops at that step's end with last.ckpt
    # written there and one line that says how to resume; the resumed run ends bit-identical to one
    # never interrupted.
    root, marker = tmp_path / "run", tmp_path / "at-step"
    args = [*COMMON, *logger, callback_arg(WaitForSignalAt, step=22, marker=str(marker))]
    proc = start(root, *args, start_new_session=to_group)
    wait_for(marker, proc)
    if to_group:
        os.killpg(proc.pid, signum)  # as SLURM does; W&B's service process gets it too
    else:
        os.kill(proc.pid, signum)
    status, stderr = finish(proc)
    assert status == 128 + signum, stderr[-3000:]
    line = one_line((status, stderr), "stopped by ")
    epoch, batch_idx = map(int, marker.read_text().split())
    (written,) = [p for p in root.rglob("last.ckpt")]
    name = signal.Signals(signum).name
    assert line.startswith(f"stopped by {name} at epoch 1 step 22; checkpoint written to {written}; resume with: "), line
    assert_stopped_mid_epoch(written, step=22, epoch=1, batches=batch_idx + 1)
    assert not temporaries(root)
    resume_as_printed_and_compare(line.split("resume with: ", 1)[1], root, uninterrupted)


def assert_stopped_mid_epoch(path: Path, step: int, epoch: int, batches: int) -> None:
    """The checkpoint holds step `step`, `batches` batches into epoch `epoch`, that epoch not marked done."""
    state = torch.load(path, weights_only=True)
    assert state["global_step"] == step
    loop = state["loops"]["fit_loop"]
    assert loop["state_dict"]["combined_loader"] == [{"epoch": epoch, "batches_yielded": batches}]
    assert loop["epoch_progress"]["current"]["completed"] == epoch


def resume_as_printed_and_compare(command: str, root: Path, uninterrupted: dict, *extra: str) -> None:
    """Run the printed resume command as a user pastes it into a shell (with `extra` arguments added), from
    the repository's root, and check that the run ends bit-identical to the uninterrupted one."""
    assert command.endswith("--ckpt_path last"), command
    words = shlex.split(command)
    assert f"OMP_NUM_THREADS={ENV['OMP_NUM_THREADS']}" in words, command  # the settings that matter are kept
    assert os.path.samefile(ROOT / next(w for w in words if "=" not in w), sys.executable), command  # this interpreter
    shell_env = {k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}  # the command must bring it itself
    resumed = run(["bash", "-c", command + "".join(f" {shlex.quote(a)}" for a in extra)], env=shell_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = torch.load(max(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime), weights_only=True)
    assert final["global_step"] == uninterrupted["global_step"] == 48
    for key in ("state_dict", "current_model_state", "averaging_state"):
        a, b = uninterrupted[key], final[key]
        assert a.keys() == b.keys()
        assert not [k for k in a if not torch.equal(a[k], b[k])], f"resumed run differs in {key}"


class TimeUpAtStep(Timer):
    """Test helper: Lightning's `Timer` (what `--trainer.max_time` installs) with a 10-minute limit whose
    clock reads past it from step `step` on, so that the time limit is reached at the end of that step
    whatever the machine's speed."""

    def __init__(self, step: int):
        super().__init__(duration="00:00:10:00")
        self.step, self.global_step = step, 0

    def on_train_batch_end(self, trainer, *args, **kwargs):
        self.global_step = trainer.global_step
        super().on_train_batch_end(trainer, *args, **kwargs)

    def time_elapsed(self, stage="train"):
        return 601.0 if self.global_step >= self.step else super().time_elapsed(stage)


@pytest.mark.slow
def test_a_second_signal_to_another_ddp_process_stops_the_run_from_rank_0(tmp_path):
    """Two Ctrl-C's sent to rank 1 alone (`kill -INT PID` twice): the second stops the run at once, decided by rank 0,
    which ends rank 1 and prints the one line with the command that resumes and status 130, rather than rank 1
    dying alone and Lightning SIGKILLing rank 0 ("Forcefully terminating all other processes", status 137, no
    line). The last checkpoint is left whole, and no process outlives the run."""
    root, marker = tmp_path / "run", tmp_path / "held"
    ddp = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
    proc = start(root, *COMMON, *CSV, *ddp, callback_arg(HoldAt, step=18, marker=str(marker)))
    for rank in (0, 1):
        wait_for(Path(f"{marker}.{rank}"), proc)
    child = int(Path(f"{marker}.1").read_text())
    os.kill(child, signal.SIGINT)
    time.sleep(0.5)
    os.kill(child, signal.SIGINT)
    status, stderr = finish(proc)
    assert status == 128 + signal.SIGINT and "Forcefully terminating" not in stderr, stderr[-3000:]
    line = one_line((status, stderr), "stopped by SIGINT")
    assert "at once" in line and line.endswith("--ckpt_path last"), line
    assert torch.load(next(root.rglob("last.ckpt")), weights_only=True)["global_step"] == 16  # epoch 0's, whole
    deadline = time.monotonic() + 10
    while running(child):
        assert time.monotonic() < deadline, f"rank 1 (pid {child}) outlived the run"
        time.sleep(0.1)


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (ended, its status not yet collected)."""
    try:
        return "(zombie)" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.slow
def test_time_limit_mid_epoch_writes_a_checkpoint_that_resumes_exactly(tmp_path, uninterrupted):
    # The time limit is reached at the end of step 22 (epoch 1, batch 6 of 16): last.ckpt is written there,
    # the epoch is not marked done (Lightning would mark it and the resumed run would skip 10 batches), no
    # validation runs at the stop, the run's summary is written as after any end, and one line gives the command
    # that resumes with the limit raised by as much again. The command with the same limit has nothing left to
    # train: one line, status 3, no new folder; as printed, it ends bit-identical to the uninterrupted run.
    root = tmp_path / "run"
    time_up = callback_arg(TimeUpAtStep, step=22)
    result = fit(root, "--trainer.max_epochs", "3", "--ema_decay", "0.9", *CSV, time_up)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("time limit reached ")]
    (written,) = root.rglob("last.ckpt")
    resume_with = "resume with a larger --trainer.max_time (another 0:10:00 of training): "
    assert f"at step 22; last checkpoint: {written}; {resume_with}" in line, line
    assert_stopped_mid_epoch(written, step=22, epoch=1, batches=6)
    metrics = (written.parent.parent / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    val_steps = {int(row.split(",")[header.index("step")]) for row in metrics[1:] if row.split(",")[header.index("val/loss")]}
    assert val_steps == {15}, val_steps  # epoch 0's validation only: none at the stop (logged at step index 15)
    summary = json.loads((written.parent.parent / "summary.json").read_text())  # the run ends as any other
    assert summary["steps"] == 22 and summary["best_checkpoint"].endswith("epoch000-step16.ckpt"), summary

    command = line.split(resume_with, 1)[1]
    assert " --trainer.max_time 00:00:20:01 --ckpt_path last" in command, command  # 0:10:01 trained, 0:10:00 more
    folders = sorted(p for p in root.rglob("*") if p.is_dir())
    again = run(["bash", "-c", command.replace(" --trainer.max_time 00:00:20:01", "")])  # the same limit
    assert again.returncode == 3, again.stderr[-3000:]
    line = one_line(again, "nothing to train: --trainer.max_time 0:10:00: ")
    assert line.endswith("pass a larger --trainer.max_time to train on"), line
    assert sorted(p for p in root.rglob("*") if p.is_dir()) == folders  # no empty version or checkpoints folder
    assert f" {shlex.quote(time_up)} " in command
    resume_as_printed_and_compare(command.replace(f" {shlex.quote(time_up)} ", " --test false "), root, uninterrupted)


def test_the_time_limit_resume_command_carries_only_the_environment_the_user_set(tmp_path):
    # W&B offline by itself (no key, no WANDB_MODE): Lightning's logger sets WANDB_MODE=dryrun inside the process,
    # which the printed command must not carry (pasted, it would keep the run offline after a `wandb login`). The
    # command names what the user set (OMP_NUM_THREADS here), as the line of a signal's stop does, and works pasted.
    root = tmp_path / "run"
    env = {k: v for k, v in ENV.items() if k != "WANDB_MODE"}
    time_up = callback_arg(TimeUpAtStep, step=5)
    result = fit(root, "--trainer.max_epochs", "1", "--test", "false", time_up, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "W&B logs offline: no W&B API key" in result.stderr + result.stdout  # the case that sets WANDB_MODE
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("time limit reached ")]
    command = line.split("another 0:10:00 of training): ", 1)[1]
    words = shlex.split(command)
    assert [w for w in words if "=" in w.split("/")[0] and not w.startswith("-")] == ["OMP_NUM_THREADS=1"], command
    assert "WANDB_MODE" not in command, command
    shell_env = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}
    resumed = run(["bash", "-c", command.replace(f" {shlex.quote(time_up)} ", " ")], env=shell_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "W&B logs offline: no W&B API key" in resumed.stderr + resumed.stdout  # still by itself, not forced
    final = torch.load(max(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime), weights_only=True)
    assert final["global_step"] == 16


class SecondsAStep(Callback):
    """Test helper: the clock of --trainer.max_time's `Timer` reads `seconds` a step, whatever the machine's speed."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def setup(self, trainer, pl_module, stage):
        timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
        timer.time_elapsed = lambda stage="train": self.seconds * trainer.global_step


@pytest.mark.slow
def test_a_schedule_fitted_to_the_time_resumes_exactly(tmp_path):
    # A cosine decay over 6 epochs (96 steps) with time for 70 (8 s a step, 560 s): fitted at step 21 to end at step
    # 70, kept by the validations at steps 32, 48 and 64 (the same rate). Stopped by SIGTERM at step 40 and resumed
    # with the printed command, the run ends at step 70 with the learning rate at 0 and bit-identical to one never
    # stopped.
    common = [*CSV, "--trainer.max_epochs", "6", "--test", "false", "--model.init_args.lr_schedule", "cosine"]
    common += ["--model.init_args.warmup_steps", "4", "--trainer.max_time", "00:00:09:20", "--fit_schedule_to_time", "true"]
    common += [callback_arg(SecondsAStep, seconds=8.0)]
    whole = fit(tmp_path / "whole", *common)
    assert whole.returncode == 0, whole.stderr[-3000:]
    (fitted,) = [line for line in whole.stderr.splitlines() if "(--fit_schedule_to_time)" in line]
    assert fitted.endswith("of 96: the learning-rate schedule after step 21 now ends at step 70 (--fit_schedule_to_time)")
    expected = torch.load(next((tmp_path / "whole").rglob("last.ckpt")), weights_only=True)
    assert expected["global_step"] == 70 and expected["lr_schedulers"][0]["_last_lr"] == [0.0, 0.0]

    root, marker = tmp_path / "run", tmp_path / "at-step"
    proc = start(root, *common, callback_arg(WaitForSignalAt, step=40, marker=str(marker)))
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGTERM)
    line = one_line(finish(proc), "stopped by SIGTERM at epoch 2 step 40; ")
    resumed = run(["bash", "-c", line.split("resume with: ", 1)[1]])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = torch.load(max(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime), weights_only=True)
    assert final["global_step"] == 70 and final["lr_schedulers"][0] == expected["lr_schedulers"][0]
    assert final["callbacks"]["TimeBudget"] == expected["callbacks"]["TimeBudget"]
    assert not [k for k in expected["state_dict"] if not torch.equal(expected["state_dict"][k], final["state_dict"][k])]


def test_fit_schedule_to_time_without_a_time_limit_is_one_line(tmp_path):
    result = fit(tmp_path, "--fit_schedule_to_time", "true")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("--fit_schedule_to_time true fits the schedule to --trainer.max_time: give one (DD:HH:MM:SS)")
    ), result.stderr[-3000:]


def test_resuming_a_run_that_reached_max_epochs_is_one_line_and_creates_nothing(tmp_path):
    # last.ckpt of the last epoch's end counts that epoch as processed, not yet completed: this resume once
    # trained nothing, exited 0 and left an empty checkpoints-2/ and a second W&B offline folder.
    root = tmp_path / "run"
    args = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--test", "false"]  # W&B offline
    first = fit(root, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    before = sorted(root.rglob("*"))
    again = fit(root, *args, "--ckpt_path", "last")
    assert again.returncode == 3, again.stderr[-3000:]
    line = one_line(again, "nothing to train: --trainer.max_epochs 1: ")
    assert "has already trained 1 epochs" in line and line.endswith("pass a larger --trainer.max_epochs to train on"), line
    assert sorted(root.rglob("*")) == before


def test_a_run_refused_at_its_start_leaves_no_folder_behind(tmp_path):
    nothing = fit(tmp_path / "empty", "--ckpt_path", "last")  # the default logger, W&B, once made the root
    assert nothing.returncode == 2, nothing.stderr[-3000:]
    one_line(nothing, "error: --ckpt_path last: no last.ckpt under ")
    offline = {**ENV, **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}}
    mnist = ["--config", str(ROOT / "configs" / "mnist_subset.yaml"), "--data.data_dir", str(tmp_path / "data" / "mnist")]
    download = fit(tmp_path / "run", *mnist, "--trainer.logger", "CSVLogger", env=offline)  # torchvision made MNIST/raw
    assert download.returncode == 2, download.stderr[-3000:]
    one_line(download, "error: MNIST files not found in ")
    from datamodules.corpus_readers import download  # Tatoeba's and Multi30k's

    with pytest.raises(OSError):
        download("http://127.0.0.1:9/cmn-eng.zip", tmp_path / "data" / "cmn-eng" / "cmn-eng.zip")  # nothing listens there
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_max_steps_mid_epoch_then_more_steps_is_exact(tmp_path, uninterrupted):
    # "Train longer": a run that ended at --trainer.max_steps 22, mid-epoch, resumed with --trainer.max_steps 48
    # ends bit-identical to one trained to 48 at once (the toy recipe's learning rate is constant).
    root = tmp_path / "run"
    result = fit(root, *COMMON, *CSV, "--trainer.max_steps", "22")
    assert result.returncode == 0, result.stderr[-3000:]
    (written,) = root.rglob("last.ckpt")
    assert_stopped_mid_epoch(written, step=22, epoch=1, batches=6)
    same = fit(root, *COMMON, *CSV, "--trainer.max_steps", "22", "--ckpt_path", "last")
    assert same.returncode == 3
    one_line(same, "nothing to train: --trainer.max_steps 22: ")
    longer = fit(root, *COMMON, *CSV, "--trainer.max_steps", "48", "--ckpt_path", "last")
    assert longer.returncode == 0, longer.stderr[-3000:]
    # The last.ckpt callbacks' states name the earlier run's folder: Lightning's warning about it is noise (common/noise.py).
    assert "The dirpath has changed" not in longer.stderr
    final = torch.load(max(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime), weights_only=True)
    assert final["global_step"] == 48
    for key in ("state_dict", "current_model_state", "averaging_state"):
        a, b = uninterrupted[key], final[key]
        assert not [k for k in a if not torch.equal(a[k], b[k])], f"resumed run differs in {key}"


def test_sigterm_while_starting_up_is_one_line(tmp_path):
    # One second in, the script is still importing torch and Lightning.
    proc = start(tmp_path, "--trainer.max_epochs", "1")
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    status, stderr = finish(proc)
    assert status == 143, stderr[-3000:]
    line = one_line((status, stderr), "stopped by ")
    assert line == "stopped by SIGTERM before the first training step; no checkpoint was written"


@pytest.mark.slow
@pytest.mark.parametrize("times", [1, 2], ids=["once", "twice"])
def test_sigterm_during_a_checkpoint_save(tmp_path, times):
    # Per-step checkpoints; the 3rd save (last.ckpt at step 3) is half written when the signal comes.
    # Once: the save completes and the run stops at the end of step 3 with it. Twice: the second signal
    # stops the run at once, inside the save; the temporary file is removed, and last.ckpt of step 2 is
    # byte for byte what it was.
    record = tmp_path / "before.json"
    args = ["--trainer.logger", "false", "--checkpoint.every_n_train_steps", "1", "--trainer.max_epochs", "1"]
    result = fit(tmp_path, *args, callback_arg(SignalDuringSave, n=3, times=times, record=str(record)))
    assert result.returncode == 143, result.stderr[-3000:]
    line = one_line(result, "stopped by ")
    last = tmp_path / "version_0" / "checkpoints" / "last.ckpt"  # no logger: a version folder all the same
    assert not temporaries(tmp_path)
    if times == 1:
        assert line.startswith(f"stopped by SIGTERM at epoch 0 step 3; checkpoint written to {last}; resume with: "), line
        assert torch.load(last, weights_only=True)["global_step"] == 3
    else:
        assert line.startswith(
            f"stopped by SIGTERM at epoch 0 step 3, at once: no checkpoint at the signal; the last checkpoint is {last}; "
        ), line
        before = {k: v for k, v in json.loads(record.read_text()).items() if ".tmp-" not in k and ".prev-" not in k}
        assert before == hashes(last.parent) and torch.load(last, weights_only=True)["global_step"] == 2
    resumed = fit(tmp_path, *args, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(tmp_path / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 16


# A signal that lands while a finalizer runs: the handler's exception cannot leave a finalizer, and Python would
# print it as "Exception ignored in ..." with a traceback and drop it. The program is common/signals.py's (or
# generate's) handling alone, the signal sent from within a finalizer so that it lands there every time.
FINALIZER_PROGRAM = """
import os, signal, sys
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))
{body}
"""
TRAINING = """
from common import signals
signals.install()
with signals.exit_on_stop("RESUME"):
    if sys.argv[1] == "second":
        signals.defer()
        os.kill(os.getpid(), signal.SIGTERM)  # the first, noted while training
    Finalized()
    for _ in range(3 * 10**6):
        pass
    print("not stopped", file=sys.stderr)
"""
GENERATION = """
from common import signals
try:
    with signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)  # the first: the run stops at its next shard
        Finalized()
        for _ in range(3 * 10**6):
            pass
        print("not stopped", file=sys.stderr)
except signals.Stopped as stop:
    print("stopped at once", file=sys.stderr)
    sys.exit(128 + stop.signum)
"""


@pytest.mark.parametrize(
    "body, signal_count, line",
    [
        (TRAINING, "first", "stopped by SIGTERM before the first training step; no checkpoint was written"),
        (TRAINING, "second", "stopped by SIGTERM before the first training step; no checkpoint was written"),
        (GENERATION, "second", "stopped at once"),
    ],
    ids=["fit-outside-training", "fit-second-while-training", "generate-second"],
)
def test_a_signal_that_lands_in_a_finalizer_still_stops_the_run(body, signal_count, line):
    """Outside training a first signal, while training a second one, raise the stop at once; landed in a
    finalizer (Lightning's and torch's free objects all the time), the stop is raised at the next point that can
    raise it: status 143 and the one line, nothing printed by the finalizer, the run not going on."""
    program = FINALIZER_PROGRAM.format(body=body)
    result = run([sys.executable, "-c", program, signal_count])
    assert result.returncode == 143, result.stderr[-3000:]
    assert result.stderr.splitlines() == [line], result.stderr[-3000:]


@pytest.mark.slow
def test_sigterm_at_random_moments_leaves_whole_checkpoints(tmp_path):
    # A checkpoint every step, so that many signals land in a save; one signal, or two in quick
    # succession. Whatever the moment: status 143, one line, every checkpoint whole, no temporary file,
    # and the checkpoint the line names is at the step it names.
    rng = random.Random(0)
    args = ["--trainer.logger", "false", "--checkpoint.every_n_train_steps", "1", "--trainer.max_epochs", "1000"]
    for trial in range(4):
        root = tmp_path / str(trial)
        proc = start(root, *args)
        wait_for(root / "version_0" / "checkpoints" / "last.ckpt", proc)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGTERM)
        if trial % 2:
            time.sleep(rng.uniform(0.0, 0.05))
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        status, stderr = finish(proc)
        assert status == 143, stderr[-3000:]
        line = one_line((status, stderr), "stopped by SIGTERM at epoch ")
        assert not temporaries(root), line
        for path in root.rglob("*.ckpt"):
            torch.load(path, weights_only=True)
        if "; checkpoint written to " in line:
            step = int(line.split(" step ", 1)[1].split(";")[0])
            path = line.split("; checkpoint written to ", 1)[1].split(";")[0]
            assert torch.load(path, weights_only=True)["global_step"] == step, line


@pytest.mark.slow
def test_slurm_requeue_signal_still_works(tmp_path):
    # Under SLURM with auto-requeue (Lightning's default there), SIGUSR1 makes Lightning save
    # hpc_ckpt_1.ckpt and run `scontrol requeue <job>`; the SIGTERM that follows stops the run as anywhere.
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol-calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "fit",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
    }
    env = {**ENV, **slurm, "PATH": f"{bin_dir}{os.pathsep}{ENV['PATH']}"}
    root, marker = tmp_path / "run", tmp_path / "at-step"
    proc = start(root, *CSV, "--trainer.max_epochs", "3", callback_arg(WaitForSignalAt, step=20, marker=str(marker)), env=env)
    wait_for(marker, proc)
    proc.send_signal(signal.SIGUSR1)
    wait_for(calls, proc)
    proc.send_signal(signal.SIGTERM)
    status, stderr = finish(proc)
    assert status == 143, stderr[-3000:]
    line = one_line((status, stderr), "stopped by ")
    assert calls.read_text().split() == ["requeue", "4242"]
    assert torch.load(root / "hpc_ckpt_1.ckpt", weights_only=True)["global_step"] == 20
    assert line.startswith("stopped by SIGTERM at epoch 1 step 20; checkpoint written to "), line


def test_resume_command_replaces_an_earlier_ckpt_path():
    from common.commands import resume_command

    env = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root"}
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "WANDB_MODE"):
            mp.delenv(name, raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        mp.setattr(sys, "executable", "/opt/env/bin/python")
        command = resume_command(["--config", "a b.yaml", "--ckpt_path", "x.ckpt", "--ckpt_path=y"])
        # A time limit's line: the limit in place of the one given (either spelling), so that the pasted command trains.
        args = ["--trainer.max_time", "00:00:10:00", "--config", "c.yaml", "--trainer.max_time=00:00:05:00"]
        longer = resume_command(args, settings={"--trainer.max_time": "00:00:20:00"})
    expected = "OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=0,1 /opt/env/bin/python scripts/fit.py"
    assert command == expected + " --config 'a b.yaml' --ckpt_path last"
    assert longer == expected + " --config c.yaml --trainer.max_time 00:00:20:00 --ckpt_path last"


# ---------------------------------------------------------------------------------------------- disk full, unwritable


def _earlier_run(root: Path) -> dict[str, str]:
    """One epoch of 2 steps, checkpoints in root/version_0/checkpoints (no logger): their hashes."""
    result = fit(root, "--trainer.logger", "false", "--trainer.limit_train_batches", "2", "--trainer.max_epochs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    before = hashes(root / "version_0" / "checkpoints")
    assert set(before) == {"last.ckpt", "epoch000-step2.ckpt"}, before
    return before


def _resume_args() -> list[str]:
    return ["--trainer.logger", "false", "--trainer.limit_train_batches", "2", "--trainer.max_epochs", "3", "--ckpt_path", "last"]


@pytest.mark.slow
def test_disk_full_while_saving_is_one_line_and_keeps_earlier_checkpoints(tmp_path):
    # A file-size limit of 1 MB (the checkpoints are 2 MB): the first save of the resumed run fails
    # half-way, as on a full disk. SIGXFSZ ignored, so that the write gets EFBIG instead of a core dump.
    before = _earlier_run(tmp_path)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    result = run([*FIT, *_resume_args(), "--trainer.default_root_dir", str(tmp_path), *QUIET], preexec_fn=limit)
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_line(result, "error:")
    assert line.startswith(f"error: cannot write {tmp_path / 'version_1' / 'checkpoints'}/epoch001-step4.ckpt: "), line
    assert "file-size limit" in line and "EFBIG" in line
    assert "_use_new_zipfile_serialization" not in line
    assert hashes(tmp_path / "version_0" / "checkpoints") == before  # earlier checkpoints intact, no temporary file left


def _without_root_powers() -> list[str]:
    """A command prefix under which root obeys file modes (it writes into read-only folders otherwise):
    `setpriv` drops the capabilities that override them. Empty when not root."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True)
    except OSError as err:
        pytest.skip(f"running as root, and setpriv is not there to drop root's power over file modes: {err}")
    if probe.returncode != 0:
        pytest.skip(f"running as root, and setpriv cannot drop root's power over file modes: {probe.stderr!r}")
    return prefix


@pytest.mark.slow
def test_read_only_root_dir_is_one_line_before_training(tmp_path):
    # The root directory of an earlier run, read-only now; the resumed run stops before training.
    root = tmp_path / "run"
    before = _earlier_run(root)
    prefix = _without_root_powers()
    for folder in (root / "version_0" / "checkpoints", root / "version_0", root):
        folder.chmod(0o555)
    try:
        result = run([*prefix, *FIT, *_resume_args(), "--trainer.default_root_dir", str(root), *QUIET])
    finally:
        for folder in (root, root / "version_0", root / "version_0" / "checkpoints"):
            folder.chmod(0o755)
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_line(result, "error:")
    assert str(root) in line and "permission denied (EACCES)" in line, line
    assert "step 4" not in result.stderr  # stopped before training
    assert hashes(root / "version_0" / "checkpoints") == before


@pytest.mark.parametrize("logger", ["false", "CSVLogger", "wandb"])
def test_root_dir_under_a_regular_file_is_one_line(tmp_path, logger):
    (tmp_path / "a-file").write_text("not a folder\n")
    root = tmp_path / "a-file" / "run"
    extra = [] if logger == "wandb" else ["--trainer.logger", logger]
    result = fit(root, *extra, "--trainer.max_epochs", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_line(result, "error:")
    assert str(tmp_path / "a-file") in line and "ENOTDIR" in line, line
    assert (tmp_path / "a-file").read_text() == "not a folder\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_asked_for_without_one_is_one_line(tmp_path):
    result = fit(tmp_path, "--trainer.accelerator", "gpu")
    assert result.returncode == 2, result.stderr[-3000:]
    line = one_line(result, "error:")
    assert line.startswith("error: --trainer.accelerator gpu: no CUDA GPU is available on this machine ("), line
    assert not list(tmp_path.rglob("*"))  # stopped before anything was written


# ---------------------------------------------------------------------------------------------- NaN, summary, leftovers


def test_nan_loss_with_per_step_checkpoints_keeps_the_last_finite_one(tmp_path):
    # Step 5's weights are finite but enormous: the last.ckpt of step 5 holds them, and the loss of
    # step 6 is not finite. last.ckpt must go back to step 4, whose weights made a finite loss.
    result = fit(
        tmp_path,
        "--trainer.logger",
        "false",
        "--checkpoint.every_n_train_steps",
        "1",
        callback_arg(ScaleWeightsAt, step=5),
    )
    assert result.returncode == 1, result.stderr[-3000:]
    last = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    line = one_line(result, "error:")
    assert "at step 5 (epoch 0)" in line and line.endswith(f"the last checkpoint is {last} (step 4, its loss was finite)"), line
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 4
    assert max(v.abs().max().item() for v in state["state_dict"].values() if v.is_floating_point()) < 1e3
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # no kept copy left behind


def test_nan_loss_after_two_saves_at_one_step_goes_back_past_both(tmp_path):
    # Step 16 ends epoch 0: last.ckpt is written there twice, every 8 steps and at the epoch's end, with the
    # enormous weights of step 16. Both are of the diverged weights: last.ckpt must go back to step 8.
    result = fit(
        tmp_path,
        "--trainer.logger",
        "false",
        "--checkpoint.every_n_train_steps",
        "8",
        callback_arg(ScaleWeightsAt, step=16),
    )
    assert result.returncode == 1, result.stderr[-3000:]
    last = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    line = one_line(result, "error:")
    assert "at step 16 (epoch 1)" in line and line.endswith(f"the last checkpoint is {last} (step 8, its loss was finite)"), line
    assert torch.load(last, weights_only=True)["global_step"] == 8
    assert sorted(p.name for p in last.parent.iterdir()) == ["epoch000-step16.ckpt", "last.ckpt"]


OLD_CHECKPOINT = ROOT / "tests" / "fixtures" / "toy-last-7ae343f.ckpt"  # scripts/fit.py at 7ae343f, 2 epochs (below)
OLD_RUN = [
    "--model.init_args.net.d_model",
    "16",
    "--model.init_args.net.dim_feedforward",
    "32",
    "--model.init_args.net.nhead",
    "2",
]


def test_a_checkpoint_written_before_the_checkpoint_callbacks_were_split_resumes_with_its_best_score(tmp_path):
    # Written by `scripts/fit.py --trainer.max_epochs 2 --trainer.logger CSVLogger --test false` and OLD_RUN at
    # 7ae343f (its sizes then spelled flat, `--model.init_args.d_model 16`), when one BestAndLastCheckpoint kept both
    # the best and the last checkpoint.
    from training.checkpointing import BestCheckpoint

    old = torch.load(OLD_CHECKPOINT, weights_only=True)
    (old_state,) = [v for k, v in old["callbacks"].items() if k.startswith("BestAndLastCheckpoint{")]
    result = fit(tmp_path, *OLD_RUN, *CSV, "--trainer.max_epochs", "3", "--test", "false", "--ckpt_path", str(OLD_CHECKPOINT))
    assert result.returncode == 0, result.stderr[-3000:]
    (last,) = tmp_path.rglob("last.ckpt")
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == old["global_step"] + 16 and state["epoch"] == 2
    (best,) = [v for k, v in state["callbacks"].items() if k.startswith("BestCheckpoint{")]
    (metrics,) = tmp_path.rglob("metrics.csv")
    epoch2 = [float(row["val/loss"]) for row in csv.DictReader(metrics.open()) if row.get("val/loss")]
    assert len(epoch2) == 1
    # The old run's best score carried over: the best is the better of it and epoch 2's.
    assert best["best_model_score"].item() == pytest.approx(min(old_state["best_model_score"].item(), epoch2[0]))
    # And what carries it, on its own: the old callback's state reaches the callback of today's name.
    callback = BestCheckpoint(monitor="val/loss", dirpath=tmp_path / "new")
    callback.on_load_checkpoint(None, None, old)
    callback.load_state_dict(old["callbacks"][callback.state_key])
    assert callback.best_model_score == old_state["best_model_score"]
    assert callback.best_k_models == old_state["best_k_models"]


@pytest.mark.slow
def test_one_epoch_summary_names_the_last_checkpoint(tmp_path):
    # MNIST has a test split: after fitting, the best checkpoint is tested, and loading it must not
    # replace what the summary knows of the last one.
    result = fit(tmp_path / "run", *recipe_args("mnist", tmp_path / "data"), *CSV, "--trainer.max_epochs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(next((tmp_path / "run").rglob("summary.json")).read_text())
    (last,) = (tmp_path / "run").rglob("last.ckpt")
    assert summary["last_checkpoint"] == str(last) and summary["test"], summary


def test_temporaries_of_dead_processes_are_removed_when_a_run_starts_there(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = os.getpid()
    names = {
        f".last.ckpt.tmp-{dead.pid}": False,
        f".epoch000-step2.ckpt.tmp-{dead.pid}": False,
        f".last.ckpt.prev-{dead.pid}": False,
        f".last.ckpt.tmp-{live}": True,  # a live process's save in progress: never touched
        "notes.tmp-1": True,  # not ours
    }
    for name in names:
        (folder / name).write_bytes(b"PK\x03\x04 half a checkpoint")
    short = ["--trainer.limit_train_batches", "2", "--trainer.max_epochs", "1"]
    result = fit(tmp_path, "--trainer.logger", "false", "--checkpoint.dirpath", str(folder), *short)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {name for name in names if (folder / name).exists()} == {name for name, kept in names.items() if kept}
    assert (folder / "last.ckpt").exists()


def test_remove_stale_temporaries_in_the_folder_of_a_resumed_checkpoint(tmp_path):
    from common.files import remove_stale_temporaries

    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f".last.ckpt.tmp-{dead.pid}", f".last.ckpt.tmp-{os.getppid()}", f".x.ckpt.prev-{os.getpid()}", "last.ckpt"):
        (tmp_path / name).write_bytes(b"x")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted([f".last.ckpt.tmp-{dead.pid}", f".x.ckpt.prev-{os.getpid()}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f".last.ckpt.tmp-{os.getppid()}", "last.ckpt"])
    # Folders too (the prepared-data cache's builds), and with a name only that name's.
    for name in (f".ids-a.tmp-{dead.pid}", f".ids-b.tmp-{dead.pid}"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.src.bin").write_bytes(b"x")
    assert [p.name for p in remove_stale_temporaries(tmp_path, "ids-a")] == [f".ids-a.tmp-{dead.pid}"]
    assert (tmp_path / f".ids-b.tmp-{dead.pid}" / "train.src.bin").exists()
