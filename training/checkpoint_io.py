"""How a checkpoint reaches the disk: `AtomicCheckpointIO`, the CheckpointIO plugin of every run from the CLI
(training/cli.py), and `check_writable`, a folder's writability checked before a run writes there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from common.errors import OutputError
from common.exits import write_fault
from common.files import atomic_torch_save, temporary_name


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that writes `<dir>/.<name>.tmp-<pid>`, flushes it to disk and renames it
    onto `<name>` (`os.replace` is atomic within a file system): a reader, or a resume after a crash,
    sees the old checkpoint or the new one, never half of one. A write that fails (full disk, file-size
    limit, read-only folder, a file where a folder should be) removes the temporary file and raises
    `common.errors.OutputError` naming the checkpoint. Remote paths (s3://…) keep the default behaviour."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options, got {storage_options}")
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(write_fault(err, path), err.errno) from None
        atomic_torch_save(checkpoint, path)


def check_writable(folder: str | Path, name: str) -> None:
    """Make `folder` and write a file there, so that a read-only place, or a path under a regular file,
    is one `OutputError` (naming `folder/name`, the file to come) before training rather than after
    its first epoch."""
    folder = Path(folder)
    probe = temporary_name(folder / "write-check", "tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.open("wb").close()
        probe.unlink()
    except OSError as err:
        raise OutputError(write_fault(err, folder / name), err.errno) from None
