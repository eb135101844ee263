"""Environment faults, generated for real, while the scripts run: a full disk (a small tmpfs, a file-size
limit), a read-only file system, a folder without write permission, a missing folder, a path under a
regular file, /dev/full as standard output, a reader that goes away, undecodable standard input, a
checkpoint with flipped bytes. Each is one line `error: ...` naming the path and a non-zero exit (the
closed pipe: a quiet one), never a traceback; no half-written output is left, and every file that was
there before (the checkpoints, an earlier output) has the same sha256 after.

The tmpfs cases run the script in a private mount namespace (`unshare -m`, root with CAP_SYS_ADMIN) and
are skipped where that is not allowed. Root ignores permission bits: the read-only-folder case runs the
script as root without CAP_DAC_OVERRIDE (dropped from its bounding set before exec), so that the folder's
mode applies to it as to any user."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from common.checkpoints import read_checkpoint
from common.errors import CheckpointError, OutputError
from common.exits import fault_message
from common.files import atomic_output, atomic_write_text
from tests.helpers import ENV, HANG_TIMEOUT, IN_TMPFS, ROOT, assert_one_line_error, can_mount, snapshot, succeeds

FILE_LIMIT = 512  # bytes: RLIMIT_FSIZE of the "file-size limit" case, below every output tried here
SOURCE_LINES = 600  # evaluate's source: at least one byte of hypotheses a line, more than FILE_LIMIT


def script(name: str, *args) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *map(str, args)]


def run(cmd, timeout=HANG_TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", ENV)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, **kwargs)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- faults


def limit_file_size():
    """preexec_fn: files can grow to FILE_LIMIT bytes; a write beyond gets EFBIG (SIGXFSZ ignored, as a
    shell's `ulimit -f` leaves it to kill the process otherwise)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def drop_dac_override():
    """preexec_fn for root: lose CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH at exec (dropped from the
    bounding set), so that permission bits bind; root still reads what it owns (the repository, the venv)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_deny_root(tmp: Path) -> bool:
    folder = tmp / "probe"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        preexec = drop_dac_override if os.geteuid() == 0 else None
        return not succeeds([sys.executable, "-c", f"open({str(folder / 'x')!r}, 'w')"], preexec_fn=preexec)
    finally:
        folder.chmod(0o755)


# fault: (the errno's name in the line, whether an earlier output can sit in the place)
FAULTS = {
    "file-size limit": ("EFBIG", True),
    "full disk": ("ENOSPC", True),
    "read-only file system": ("EROFS", True),
    "permission denied": ("EACCES", True),
    "missing folder": ("ENOENT", False),
    "under a regular file": ("ENOTDIR", False),
}


def earlier_output(entry: str, where: Path) -> Path:
    """What an earlier run left at the output's path: the file or folder a failed run must not touch."""
    if entry == "average":
        (where / "avg.ckpt").write_bytes(b"an earlier average\n" * 100)
        return where / "avg.ckpt"
    if entry == "export":
        (where / "ct2").mkdir()
        (where / "ct2" / "model.bin").write_bytes(b"an earlier export\n" * 100)
        (where / "ct2" / "tokenizers.json").write_text("{}")
        return where / "ct2"
    (where / "hyps.txt").write_text("an earlier hypothesis\n" * 10)
    return where / "hyps.txt"


def command(entry: str, out: Path, ckpt: Path, source: Path) -> list[str]:
    """`entry` writing `out`, replacing an earlier output there (--force where the script asks for it)."""
    if entry == "average":
        return script("average_checkpoints", ckpt, ckpt, "--out", out, "--force")
    if entry == "export":
        return script("export", "--ckpt", ckpt, "--to", "ctranslate2", out, "--force")
    return script(
        "evaluate", "--ckpt", ckpt, "--src", source, "--ref", source, "--beam-size", "1", "--max-len", "4", "--hyp-out", out
    )


OUTPUT_NAMES = {"average": "avg.ckpt", "export": "ct2", "evaluate": "hyps.txt"}


@pytest.mark.parametrize(
    "entry, fault",
    # export makes a missing folder, as `mkdir -p` does (test_export.py); the others name it.
    [(e, f) for e in ("average", "export", "evaluate") for f in FAULTS if (e, f) != ("export", "missing folder")],
)
def test_an_output_that_cannot_be_written_is_one_line_and_loses_nothing(ckpts, tmp_path, entry, fault):  # noqa: F811
    if entry == "export":
        pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
    code, has_earlier = FAULTS[fault]
    ckpt = ckpts["good"]
    source = tmp_path / "src.txt"
    source.write_text("我 是 学 生\n" * SOURCE_LINES, encoding="utf-8")
    inputs_before = {p: sha256(p) for p in (ckpt, source)}
    place = tmp_path / "place"
    place.mkdir()
    preexec = None
    if fault in ("full disk", "read-only file system"):
        if not can_mount():
            pytest.skip("no private mount namespace here (unshare -m and mount need root with CAP_SYS_ADMIN)")
        earlier = tmp_path / "earlier"
        earlier.mkdir()
        earlier_output(entry, earlier)
        before, after = tmp_path / "before", tmp_path / "after"
        before.mkdir(), after.mkdir()
        out = place / OUTPUT_NAMES[entry]
        env = {**ENV, "PLACE": str(place), "EARLIER": str(earlier), "BEFORE": str(before), "AFTER": str(after)}
        env["FAULT"] = "full" if fault == "full disk" else "read-only"
        result = run(["unshare", "-m", "sh", "-c", IN_TMPFS, "sh", *command(entry, out, ckpt, source)], env=env)
        state_before, state_after = snapshot(before), snapshot(after)
    else:
        if fault == "missing folder":
            out = place / "missing" / "sub" / OUTPUT_NAMES[entry]
        elif fault == "under a regular file":
            (place / "notes.txt").write_text("a file, not a folder\n")
            out = place / "notes.txt" / OUTPUT_NAMES[entry]
        else:
            out = earlier_output(entry, place)
        if fault == "file-size limit":
            preexec = limit_file_size
        elif fault == "permission denied":
            if not can_deny_root(tmp_path):
                pytest.skip("cannot make a folder unwritable for the script here")
            preexec = drop_dac_override if os.geteuid() == 0 else None
            place.chmod(0o555)
        state_before = snapshot(place)
        try:
            result = run(command(entry, out, ckpt, source), preexec_fn=preexec)
        finally:
            place.chmod(0o755)
        state_after = snapshot(place)

    line = assert_one_line_error(result, f"cannot write {out}", f"({code})")
    assert result.returncode == 1, result.stderr[-2000:]
    assert state_after == state_before  # no half-written output; the earlier one whole
    assert (OUTPUT_NAMES[entry] in state_before) == has_earlier  # the earlier output was there, and is intact
    assert {p: sha256(p) for p in inputs_before} == inputs_before, line


# ---------------------------------------------------------------------------------------------- streams


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("entry", ["translate", "evaluate"])
def test_standard_output_on_a_full_device(ckpts, tmp_path, entry):  # noqa: F811
    source = tmp_path / "src.txt"
    source.write_text("我 是 学 生\n我 是\n", encoding="utf-8")
    args = ["--ckpt", ckpts["good"], "--beam-size", "1"]
    cmd = script(entry, *args, "我 是") if entry == "translate" else script(entry, *args, "--src", source, "--ref", source)
    with open("/dev/full", "w") as full:
        result = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT)
    line = assert_one_line_error(result, "cannot write standard output: no space left on device (ENOSPC)")
    assert result.returncode == 1, line


def test_standard_output_over_the_file_size_limit(ckpts, tmp_path):  # noqa: F811
    source = tmp_path / "src.txt"
    source.write_text("我 是 学 生\n" * SOURCE_LINES, encoding="utf-8")
    with open(source, "rb") as stdin, open(tmp_path / "out.txt", "w") as stdout:
        result = subprocess.run(
            script("translate", "--ckpt", ckpts["good"], "--beam-size", "1", "--max-len", "4"),
            stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT,
            preexec_fn=limit_file_size,
        )  # fmt: skip
    assert_one_line_error(result, "cannot write standard output: no space left: the file-size limit is reached", "(EFBIG)")
    assert result.returncode == 1


def test_a_reader_that_goes_away_is_a_quiet_exit(ckpts, tmp_path):  # noqa: F811
    """`translate.py < big.txt | head -1`: no traceback, no "Exception ignored ... BrokenPipeError"."""
    big = tmp_path / "big.txt"
    big.write_text("我 是 学 生\n" * 3000, encoding="utf-8")
    cmd = script("translate", "--ckpt", ckpts["good"], "--beam-size", "1", "--max-len", "4", "--batch-size", "8")
    with open(big, "rb") as stdin:
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
        proc.stdout.readline()  # as `head -1` does: one line, then the pipe is closed
        proc.stdout.close()
        running = proc.poll() is None  # with 2,999 lines still to write: the closed pipe interrupts it
        stderr = proc.stderr.read().decode()
        status = proc.wait(timeout=HANG_TIMEOUT)
    assert running, "translate.py had ended before its reader went away"
    assert status == 141, stderr[-2000:]  # 128 + SIGPIPE, as docs/guide/faults-and-exits.md promises
    for noise in ("Traceback", "BrokenPipe", "Exception ignored", "error:"):
        assert noise not in stderr, stderr[-2000:]


@pytest.mark.parametrize("encoding", ["utf-8:strict", None], ids=["strict", "locale"])
def test_undecodable_standard_input_names_the_line_and_byte(ckpts, encoding):  # noqa: F811
    """PYTHONIOENCODING=utf-8:strict, or the C locale's surrogateescape (which counts as strict)."""
    env = {**ENV, "PYTHONIOENCODING": encoding} if encoding else {k: v for k, v in ENV.items() if k != "PYTHONIOENCODING"}
    data = "我 是\n学 生\n".encode() + b"caf\xe9 au lait\n"  # latin-1 on line 3: é at byte 16 + 3
    result = subprocess.run(
        script("translate", "--ckpt", ckpts["good"], "--beam-size", "1"),
        input=data, capture_output=True, cwd=ROOT, env=env, timeout=HANG_TIMEOUT,
    )  # fmt: skip
    result = subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())
    assert_one_line_error(result, "standard input, line 3 (byte 19): cannot decode b'\\xe9' as utf-8")
    assert result.returncode == 2


# ---------------------------------------------------------------------------------------------- checkpoints


def flip_bytes_in_a_weight(src: Path, dst: Path) -> str:
    """Copy `src` to `dst` with four bytes flipped in the middle of its largest tensor record; the record's name."""
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    for k in range(4):
        data[start + k] ^= 0x5A
    dst.write_bytes(bytes(data))
    return info.filename.split("/", 1)[1]


@pytest.mark.parametrize("entry", ["translate", "evaluate", "export", "average", "evaluate_mnist"])
def test_a_damaged_checkpoint_is_named_with_its_record(ckpts, tmp_path, entry):  # noqa: F811
    damaged = tmp_path / "damaged.ckpt"
    record = flip_bytes_in_a_weight(ckpts["good"], damaged)
    before = sha256(damaged)
    source = tmp_path / "src.txt"
    source.write_text("我 是\n", encoding="utf-8")
    out = tmp_path / "out"
    cmd = {
        "translate": script("translate", "--ckpt", damaged, "我 是"),
        "evaluate": script("evaluate", "--ckpt", damaged, "--src", source, "--ref", source, "--hyp-out", out),
        "export": script("export", "--ckpt", damaged, "--to", "ctranslate2", out),
        "average": script("average_checkpoints", ckpts["good"], damaged, "--out", out),
        "evaluate_mnist": script("evaluate_mnist", "--ckpt", damaged, "--data-dir", tmp_path),
    }[entry]
    result = run(cmd)
    assert_one_line_error(result, f"error: {damaged} is damaged: record {record} fails its CRC-32 check; restore it from a copy")
    assert result.returncode == 2
    assert sha256(damaged) == before and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.ckpt", "src.txt"]  # no temporary left


@pytest.mark.parametrize("kind, why", [("corrupt", "not a zip archive"), ("truncated", "a zip archive cut short")])
def test_checkpoint_errors_carry_no_advice_about_zipfile_serialization(ckpts, kind, why):  # noqa: F811
    """(The scripts print these as one line: tests/test_bad_input.py.)"""
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(ckpts[kind])
    message = str(err.value)
    assert f"{ckpts[kind]} is not a readable checkpoint (truncated or corrupt?): {why}" in message, message
    assert "_use_new_zipfile_serialization" not in message and "please" not in message, message


def test_an_unreadable_checkpoint_is_one_line(ckpts, tmp_path):  # noqa: F811
    if not can_deny_root(tmp_path):
        pytest.skip("cannot make a file unreadable for the script here")
    locked = tmp_path / "locked.ckpt"
    shutil.copy(ckpts["good"], locked)
    locked.chmod(0)
    preexec = drop_dac_override if os.geteuid() == 0 else None
    result = run(script("translate", "--ckpt", locked, "我 是"), preexec_fn=preexec)
    assert_one_line_error(result, f"cannot read {locked}: permission denied (EACCES)")


def test_a_damaged_export_is_one_line(ckpts, tmp_path):  # noqa: F811
    pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
    from common.checkpoints import load_checkpoint
    from deploy.ctranslate2 import export_ctranslate2
    from tasks import Seq2SeqTransformer

    out = export_ctranslate2(load_checkpoint(Seq2SeqTransformer, ckpts["good"]).eval(), tmp_path / "ct2")
    model_bin = out / "model.bin"
    model_bin.write_bytes(model_bin.read_bytes()[:5000])  # cut short, as a full disk once left it
    result = run(script("translate", "--engine", "ctranslate2", "--model", out, "我 是"))
    assert_one_line_error(result, f"{out}: CTranslate2 cannot load it on cpu", "invalid payload size")
    assert result.returncode == 2


# ---------------------------------------------------------------------------------------------- atomic_output


def test_atomic_output_never_replaces_a_device_or_a_link(tmp_path):
    """/dev/null stays a device (written in place); a symbolic link stays a link, its target replaced."""
    with atomic_output("/dev/null") as path:
        assert path == Path("/dev/null")
        path.write_text("x")
    assert Path("/dev/null").is_char_device()
    target = tmp_path / "target.txt"
    target.write_text("old")
    (tmp_path / "link.txt").symlink_to(target.name)
    atomic_write_text(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new"


def test_a_stop_that_interrupts_torchs_writer_is_a_stop_not_a_write_failure(tmp_path, monkeypatch):
    """A second SIGTERM during a checkpoint save raises `Stopped` inside torch's zip writer, which wraps it in a
    RuntimeError: the run must still stop by the signal (exit 143), not report a failed write (exit 1)."""
    import io

    import torch

    from common import files
    from common.signals import Stopped

    calls = [0]

    class InterruptedFile(io.FileIO):
        def write(self, data):
            calls[0] += 1
            if calls[0] == 3:
                raise Stopped(15)
            return super().write(data)

    monkeypatch.setattr(files, "open", lambda path, mode: InterruptedFile(path, mode), raising=False)
    path = tmp_path / "last.ckpt"
    path.write_bytes(b"the earlier checkpoint")
    with pytest.raises(Stopped):
        files.atomic_torch_save({"w": torch.zeros(1000)}, path)
    assert path.read_bytes() == b"the earlier checkpoint" and sorted(os.listdir(tmp_path)) == ["last.ckpt"]


def test_atomic_output_keeps_the_earlier_folder_when_the_block_fails(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    (out / "model.bin").write_text("earlier")
    no_space = f"cannot write {out}: no space left on device \\(ENOSPC\\)"
    with pytest.raises(OutputError, match=no_space), atomic_output(out, folder=True) as tmp:
        (tmp / "model.bin").write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(KeyError), atomic_output(out, folder=True):  # not an output fault: unchanged, cleaned up
        raise KeyError("a bug")
    with pytest.raises(FileNotFoundError) as err, atomic_output(out, folder=True):  # an input's error names the input
        (tmp_path / "some-input.txt").read_text()
    assert not isinstance(err.value, OutputError)
    assert snapshot(tmp_path) == {".": "folder", "export": "folder", "export/model.bin": sha256(out / "model.bin")}
    with atomic_output(out, folder=True) as tmp:
        (tmp / "model.bin").write_text("new")
    assert (out / "model.bin").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["export"]


def test_torch_zip_writer_failures_are_recognised():
    """torch.save to a path turns a failed write into "RuntimeError: [enforce fail at inline_container.cc...]
    unexpected pos"; to a file object, the OSError stays as that RuntimeError's context."""
    bare = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    assert fault_message(bare) == "cannot write a checkpoint: the write failed (a full disk or a file-size limit?)"
    try:
        try:
            raise OSError(errno.EFBIG, "File too large")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None
    except RuntimeError as err:
        with_context = err
    efbig = "no space left: the file-size limit is reached (ulimit -f) (EFBIG)"
    assert fault_message(with_context, "avg.ckpt") == f"avg.ckpt: {efbig}"
    assert fault_message(RuntimeError("a bug")) is None and fault_message(KeyError("x")) is None
