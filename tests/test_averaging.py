"""scripts/average_checkpoints.py: the mean of a run's checkpoints, loadable like any checkpoint, and
refusals that never overwrite a checkpoint."""

from __future__ import annotations

from dataclasses import replace

import lightning as L
import pytest
import torch

from datamodules import ToyTranslationDataModule
from tasks import Seq2SeqTransformer
from tests.helpers import TINY, quiet_trainer, script, trainer_with_callbacks
from training.callbacks import EMA
from training.checkpointing import BestCheckpoint


@pytest.fixture(scope="module")
def epochs(tmp_path_factory):
    """Four checkpoints of one EMA run, one per epoch, oldest first."""
    root = tmp_path_factory.mktemp("per_epoch")
    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=4)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, **TINY)
    checkpoint = BestCheckpoint(
        dirpath=root, filename="epoch{epoch:03d}-step{step}", auto_insert_metric_name=False, monitor="val/loss", save_top_k=-1
    )
    trainer_with_callbacks(root, [EMA(decay=0.9), checkpoint], max_epochs=4).fit(model, datamodule=dm)
    paths = sorted(root.glob("epoch*.ckpt"), key=lambda p: int(p.stem.split("step")[1]))
    assert len(paths) == 4
    return paths


@pytest.mark.parametrize("weights, key", [("averaged", "state_dict"), ("training", "current_model_state")])
def test_average_is_the_mean_and_loads_like_a_checkpoint(epochs, tmp_path, weights, key):
    out = tmp_path / "avg.ckpt"
    result = script("average_checkpoints", str(epochs[0].parent), "--last", "3", "--out", str(out), "--weights", weights)
    assert result.returncode == 0, result.stderr
    which = {"averaged": "EMA weights", "training": "training weights"}[weights]
    assert f"wrote {out}: the mean of the {which} of 3 checkpoints ({epochs[1].name} … {epochs[3].name})" in result.stdout
    states = [torch.load(p, map_location="cpu", weights_only=True)[key] for p in epochs[1:]]  # the 3 of highest step
    averaged = torch.load(out, map_location="cpu", weights_only=True)
    assert averaged["averaged_from"] == [str(p) for p in epochs[1:]]
    assert "optimizer_states" not in averaged
    for name, tensor in averaged["state_dict"].items():
        torch.testing.assert_close(tensor, sum(s[name] for s in states) / 3, rtol=0, atol=1e-6)
    model = Seq2SeqTransformer.load_from_checkpoint(out, map_location="cpu")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, averaged["state_dict"][name]), name
    trained = torch.load(epochs[-1], map_location="cpu", weights_only=True)["hyper_parameters"]["tokenizers"]
    assert model.hparams.tokenizers == trained  # the tokenizers came along


def test_refusals_leave_every_checkpoint_as_it_was(epochs, tmp_path):
    before = {p: p.read_bytes() for p in epochs}
    cases = [
        ([str(epochs[0]), str(epochs[1]), "--out", str(epochs[1])], "one of the checkpoints being averaged"),
        ([str(epochs[0]), "--out", str(tmp_path / "a.ckpt")], "at least two"),
        ([str(epochs[0].parent), "--last", "9", "--out", str(tmp_path / "b.ckpt")], "fewer than the 9"),
        ([str(epochs[0]), str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "c.ckpt")], "not found"),
    ]
    for args, message in cases:
        result = script("average_checkpoints", *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    existing = tmp_path / "existing.ckpt"
    existing.write_bytes(b"keep me")
    result = script("average_checkpoints", str(epochs[0]), str(epochs[1]), "--out", str(existing))
    assert result.returncode == 2 and "--force" in result.stderr
    assert existing.read_bytes() == b"keep me"
    assert all(p.read_bytes() == data for p, data in before.items())
    assert script("average_checkpoints", str(epochs[0]), str(epochs[1]), "--out", str(existing), "--force").returncode == 0


def test_a_run_folder_names_the_folder_of_its_checkpoints(tmp_path):
    # fit.py writes a run's checkpoints one folder down, in <run>/checkpoints (and checkpoints-2, ... when resumed).
    run = tmp_path / "version_0"
    for folder in ("checkpoints", "checkpoints-2"):
        (run / folder).mkdir(parents=True)
        for step in (1, 2):
            (run / folder / f"epoch00{step}-step{step}.ckpt").write_bytes(b"")
    result = script("average_checkpoints", str(run), "--last", "2", "--out", str(tmp_path / "a.ckpt"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    folders = f"{run / 'checkpoints'}, {run / 'checkpoints-2'}"
    assert f"{run} holds no checkpoints itself; pass the folder that does: {folders}" in result.stderr
    assert "save_top_k" not in result.stderr


def test_checkpoints_of_different_models_are_refused(epochs, tmp_path):
    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=1)
    other = Seq2SeqTransformer(tokenizers=dm.tokenizers, **{**TINY, "net": replace(TINY["net"], d_model=48)})
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(other, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "other.ckpt")
    result = script("average_checkpoints", str(epochs[0]), str(tmp_path / "other.ckpt"), "--out", str(tmp_path / "x.ckpt"))
    assert result.returncode == 2 and "not of the same model" in result.stderr, result.stderr


def test_a_checkpoint_from_before_net_averages_with_its_runs_later_ones(epochs, tmp_path):
    """A run resumed across the change that put the network's settings under `net`: its earlier checkpoints hold them
    flat. They are the same model, and average as one; a flat one of another size is still refused."""
    state = torch.load(epochs[2], map_location="cpu", weights_only=True)
    net = state["hyper_parameters"].pop("net")
    state["hyper_parameters"].update(net)  # the spelling of checkpoints written before `net`
    flat = tmp_path / "flat.ckpt"
    torch.save(state, flat)
    out = tmp_path / "avg.ckpt"
    result = script("average_checkpoints", str(flat), str(epochs[3]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert torch.load(out, map_location="cpu", weights_only=True)["hyper_parameters"]["net"] == net  # the last one's
    state["hyper_parameters"]["d_model"] = 48
    torch.save(state, flat)
    result = script("average_checkpoints", str(flat), str(epochs[3]), "--out", str(tmp_path / "x.ckpt"), "--force")
    assert result.returncode == 2 and "not of the same model" in result.stderr, result.stderr
