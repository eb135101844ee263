"""A task module from its checkpoint, through `inference.networks.read_network` first: the wrong task or an unknown
setting is one `CheckpointError` line (not Lightning's "blocked to prevent arbitrary code execution" or a
jsonargparse traceback), and a checkpoint's settings from before the tasks took `net` are gathered into it, where
Lightning would drop them and build the default network (docs/guide/variants.md, "A network's settings")."""

from __future__ import annotations

from pathlib import Path

from inference.networks import read_network


class LoadsAnyCheckpoint:
    """What a task module (a LightningModule that names its network kind as `TASK`, inference.networks) takes
    first among its bases, so that its `load_from_checkpoint` reads checkpoints of any age."""

    TASK: str

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, *args, **kwargs):
        """Lightning's `load_from_checkpoint` with `net` given: the checkpoint's own, checked
        (`inference.networks.read_network`). A `net` in `kwargs` replaces it; a remote path or an open file (which
        Lightning reads itself) is passed on as it is."""
        if isinstance(checkpoint_path, (str, Path)) and "://" not in str(checkpoint_path):
            kwargs.setdefault("net", read_network(checkpoint_path, cls.TASK, verify=False).hparams["net"])
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
