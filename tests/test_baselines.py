"""What the translation and MNIST baselines rely on: an EMA of the weights that is validated, checkpointed,
tested and reloaded as the averaged weights; a joint vocabulary with three-way tying; checkpoints kept
by a metric computed every n epochs; evaluation decoding split across DDP processes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import lightning as L
import pytest
import torch

from datamodules import ParallelCorpusDataModule, ToyTranslationDataModule
from tasks import Seq2SeqTransformer
from tests.helpers import (
    HANG_TIMEOUT,
    ROOT,
    SHARED_DATA,
    TINY,
    chinese,
    english,
    quiet_trainer,
    trainer_with_callbacks,
    write_tatoeba,
)
from training.callbacks import EMA
from training.checkpointing import BestCheckpoint, last_path


class RecordsValidationWeights(Seq2SeqTransformer):
    """Notes the generator weights seen by the first validation batch and by the module's epoch-end hook."""

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen_in_step = self.net.generator.weight.detach().clone()
        return super().validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        self.seen_at_epoch_end = self.net.generator.weight.detach().clone()
        super().on_validation_epoch_end()


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ema")
    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=8)
    model = RecordsValidationWeights(tokenizers=dm.tokenizers, **TINY)
    checkpoint = BestCheckpoint(dirpath=root, monitor="val/bleu", mode="max", save_last=True)
    ema = EMA(decay=0.9)
    trainer = trainer_with_callbacks(root, [ema, checkpoint])
    trainer.fit(model, datamodule=dm)
    return trainer, model, ema, checkpoint, dm


def test_ema_weights_are_the_ones_validated_and_bleu_scored(ema_run):
    trainer, model, ema, _, _ = ema_run
    # Lightning swaps the training weights back before the module's epoch-end hook; EMA keeps the
    # average in place until validation ends, so BLEU scores the same weights as the validation loss.
    assert torch.equal(model.seen_in_step, model.seen_at_epoch_end)
    assert "val/bleu" in trainer.callback_metrics


class LinearRegression(L.LightningModule):
    """A linear layer fit by SGD; its validation loss on one batch of 8 is the epoch's `val/loss`."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class RecordsTrainingWeights(L.Callback):
    """The module's weights after each optimiser step, and `val/loss` after each validation."""

    def __init__(self):
        self.weights, self.val_losses = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.weights.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.val_losses.append(trainer.callback_metrics["val/loss"].item())


def test_ema_validation_scores_the_average_and_training_goes_on_from_the_training_weights(tmp_path):
    # An oracle outside Lightning: the average computed by hand from the recorded training weights, with the
    # decay's warm-up, evaluated by hand on the validation batch. A swap that went wrong fails either half:
    # a validation of the training weights, or training that goes on from the average.
    x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 1.0
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:16], y[:16]), batch_size=4)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[16:], y[16:]), batch_size=8)
    decay, runs = 0.9, {}
    for name, callbacks in (("with EMA", [EMA(decay=decay)]), ("without", [])):
        L.seed_everything(0)
        model, recorder = LinearRegression(), RecordsTrainingWeights()
        quiet_trainer(tmp_path, max_epochs=3, callbacks=[*callbacks, recorder]).fit(model, train, val)
        runs[name] = recorder, model

    recorder, model = runs["with EMA"]
    assert len(recorder.weights) == 12 and len(recorder.val_losses) == 3  # 4 steps an epoch, a validation after each
    for with_ema, without in zip(recorder.weights, runs["without"][0].weights, strict=True):
        for key in with_ema:
            assert torch.equal(with_ema[key], without[key]), f"the EMA changed the training of {key}"

    def val_loss(weights):
        return torch.nn.functional.mse_loss(x[16:] @ weights["layer.weight"].T + weights["layer.bias"], y[16:]).item()

    average, averages = None, []
    for n, weights in enumerate(recorder.weights):  # n: the updates before this one
        d = min(decay, (1 + n) / (10 + n))
        average = weights if average is None else {k: average[k] + (1 - d) * (weights[k] - average[k]) for k in weights}
        averages.append(average)
    for epoch, logged in enumerate(recorder.val_losses):
        after = 4 * (epoch + 1) - 1  # the last step of the epoch
        assert logged == pytest.approx(val_loss(averages[after]), rel=1e-5)
        assert logged != pytest.approx(val_loss(recorder.weights[after]), rel=1e-3)  # the two differ: a real check
    # Training ends with the average in the module, as the checkpoints' `state_dict` holds it.
    for key, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, averages[-1][key])


def test_ema_checkpoint_holds_both_and_reloads_the_average(ema_run, tmp_path):
    trainer, model, ema, checkpoint, dm = ema_run
    state = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=True)
    average, current = state["state_dict"], state["current_model_state"]
    assert average.keys() == current.keys()
    assert any(not torch.equal(average[k], current[k]) for k in average)
    reloaded = Seq2SeqTransformer.load_from_checkpoint(checkpoint.best_model_path, map_location="cpu")
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, average[name]), name
    # After fit the module holds the average of the last step (Lightning copies it in at train end).
    last = torch.load(last_path(trainer), map_location="cpu", weights_only=True)
    assert torch.equal(model.net.generator.weight, last["state_dict"]["net.generator.weight"])


def test_evaluating_a_checkpoint_after_fit_uses_its_averaged_weights(ema_run):
    # What scripts/fit.py does after fitting (trainer.test(ckpt_path="best")), here with validate:
    # Lightning's callback would load the checkpoint's training weights over the average.
    trainer, model, _, checkpoint, dm = ema_run
    trainer.validate(model, datamodule=dm, ckpt_path=checkpoint.best_model_path, verbose=False)
    state = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["state_dict"][name]), f"{name}: the training weights were evaluated"


def test_best_checkpoint_waits_for_a_metric_computed_every_n_epochs(tmp_path):
    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=2)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, **{**TINY, "bleu_every_n_epochs": 2})
    checkpoint = BestCheckpoint(
        dirpath=tmp_path, monitor="val/bleu", mode="max", save_last=True, filename="epoch{epoch}", auto_insert_metric_name=False
    )
    trainer = trainer_with_callbacks(tmp_path, [checkpoint], max_epochs=3)
    trainer.fit(model, datamodule=dm)  # BLEU after epochs 1 only
    assert Path(checkpoint.best_model_path).name == "epoch1.ckpt"
    assert torch.load(last_path(trainer), weights_only=True)["epoch"] == 2


class ScriptedScore(L.LightningModule):
    """Logs `scores[epoch]` as val/score: a checkpoint callback's choices, with no training in the way."""

    def __init__(self, scores: list[float | None]):
        super().__init__()
        self.scores = scores
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight - 1.0).pow(2).sum()

    def validation_step(self, batch, batch_idx):
        if self.scores[self.current_epoch] is not None:  # None: not scored this epoch (BLEU every n epochs)
            self.log("val/score", self.scores[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return [torch.zeros(1)]

    val_dataloader = train_dataloader


def _scored_checkpoint(root: Path, **kwargs) -> BestCheckpoint:
    """Keeps checkpoints by ScriptedScore's val/score, named e<epoch>.ckpt."""
    return BestCheckpoint(
        dirpath=root, monitor="val/score", filename="e{epoch}", auto_insert_metric_name=False, **{"mode": "max", **kwargs}
    )


# Ties at the top, ties at the k-th place, a tie that comes after a better score, equal scores at the end.
SCORES = [0.5, 0.7, 0.7, 0.6, 0.9, 0.6, 0.9, 0.9, 0.8, 0.6]


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("save_top_k", [1, 2, 3, -1])
def test_ties_go_to_the_later_checkpoint(tmp_path, mode, save_top_k):
    scores = SCORES if mode == "max" else [-s for s in SCORES]
    checkpoint = _scored_checkpoint(tmp_path, mode=mode, save_top_k=save_top_k)
    trainer_with_callbacks(tmp_path, [checkpoint], max_epochs=len(scores)).fit(ScriptedScore(scores))
    # Oracle: rank every epoch by (score, epoch), better first, and keep the first k.
    sign = 1 if mode == "max" else -1
    ranked = sorted(range(len(scores)), key=lambda e: (sign * scores[e], e), reverse=True)
    kept = ranked if save_top_k == -1 else ranked[:save_top_k]
    assert sorted(p.name for p in tmp_path.glob("e*.ckpt")) == sorted(f"e{e}.ckpt" for e in kept)
    assert Path(checkpoint.best_model_path).name == f"e{ranked[0]}.ckpt"
    saved = torch.load(checkpoint.best_model_path, weights_only=True)["callbacks"]
    (state,) = [v for k, v in saved.items() if k.startswith("BestCheckpoint")]
    assert Path(state["best_model_path"]).name == f"e{ranked[0]}.ckpt"  # what a resumed run starts from


@pytest.mark.parametrize("check_val_every_n_epoch", [1, 2])  # Lightning saves at the train epoch's end / at validation's
def test_a_metric_not_logged_this_epoch_does_not_tie_with_its_last_value(tmp_path, check_val_every_n_epoch):
    scores = [0.5, 0.9, None, None, 0.7, 0.9, None, 0.9, None, None]
    checkpoint = _scored_checkpoint(tmp_path)
    trainer = trainer_with_callbacks(
        tmp_path, [checkpoint], max_epochs=len(scores), check_val_every_n_epoch=check_val_every_n_epoch
    )
    trainer.fit(ScriptedScore(scores))
    scored = [e for e in range(len(scores)) if (e + 1) % check_val_every_n_epoch == 0 and scores[e] is not None]
    best = max(scored, key=lambda e: (scores[e], e))
    assert Path(checkpoint.best_model_path).name == f"e{best}.ckpt"


def test_ties_can_go_to_the_earlier_checkpoint_as_in_lightning(tmp_path):
    checkpoint = _scored_checkpoint(tmp_path, ties="earlier")
    trainer_with_callbacks(tmp_path, [checkpoint], max_epochs=len(SCORES)).fit(ScriptedScore(SCORES))
    assert Path(checkpoint.best_model_path).name == f"e{SCORES.index(max(SCORES))}.ckpt"


def test_ties_setting_is_checked():
    with pytest.raises(ValueError, match='ties must be "later" or "earlier"'):
        BestCheckpoint(monitor="val/score", ties="first")


# ---------------------------------------------------------------------------------------------- shared vocabulary


def _corpus(tmp_path: Path, **kwargs) -> ParallelCorpusDataModule:
    write_tatoeba(tmp_path / "cmn.txt", list(zip(english(), chinese())))
    return ParallelCorpusDataModule(
        data_dir=str(tmp_path),
        download=False,
        src_tokenizer="bpe",
        tgt_tokenizer="bpe",
        src_vocab_size=150,
        tgt_vocab_size=150,
        max_tokens=400,
        max_len=48,
        **kwargs,
    )


def test_shared_vocabulary_ties_all_three_embeddings_through_a_checkpoint(tmp_path):
    dm = _corpus(tmp_path, shared_vocab=True)
    tokenizers = dm.tokenizers
    assert tokenizers["src"] == tokenizers["tgt"]
    vocab = dm.src_vocab
    assert vocab.encode("我喜欢苹果。") and vocab.encode("I like apples.")  # both languages in one model
    model = Seq2SeqTransformer(
        tokenizers=tokenizers, **{**TINY, "net": replace(TINY["net"], share_embeddings=True, tie_embeddings=True)}
    )
    net = model.net
    assert net.src_embed.weight is net.tgt_embed.weight is net.generator.weight
    separate = Seq2SeqTransformer(tokenizers=tokenizers, **TINY)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in separate.parameters()) - 2 * len(vocab) * 32

    trainer = trainer_with_callbacks(tmp_path, [], max_epochs=1, limit_train_batches=3, limit_val_batches=1)
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "shared.ckpt")
    reloaded = Seq2SeqTransformer.load_from_checkpoint(tmp_path / "shared.ckpt", map_location="cpu")
    assert reloaded.net.src_embed.weight is reloaded.net.tgt_embed.weight is reloaded.net.generator.weight
    assert torch.equal(reloaded.net.generator.weight, model.net.generator.weight)
    sentences = ["我喜欢苹果。", "汤姆买了那辆红车。"]
    assert reloaded.translate(sentences) == model.translate(sentences)


def test_shared_vocabulary_refuses_mismatched_settings(tmp_path):
    with pytest.raises(ValueError, match="shared_vocab=True trains one tokenizer"):
        ParallelCorpusDataModule(data_dir=str(tmp_path), shared_vocab=True, src_tokenizer="char", tgt_tokenizer="bpe")
    dm = _corpus(tmp_path)  # two vocabularies
    with pytest.raises(ValueError, match="share_embeddings=True needs one vocabulary"):
        Seq2SeqTransformer(tokenizers=dm.tokenizers, **{**TINY, "net": replace(TINY["net"], share_embeddings=True)})


# ---------------------------------------------------------------------------------------------- DDP decoding

DDP_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import lightning as L
from datamodules import ParallelCorpusDataModule
from tasks import Seq2SeqTransformer

devices = int(sys.argv[1])
model = Seq2SeqTransformer.load_from_checkpoint({ckpt!r}, map_location="cpu")
decoded = []
translate_many = model.translate_many
model.translate_many = lambda sources, **kw: decoded.extend(sources) or translate_many(sources, **kw)
import tasks.seq2seq as task
shared = task.translate_shared
hyps = []
task.translate_shared = lambda module, sources, beam: hyps.extend(shared(module, sources, beam)) or hyps
dm = ParallelCorpusDataModule(data_dir={data!r}, download=False, src_tokenizer="bpe", tgt_tokenizer="bpe",
                              src_vocab_size=150, tgt_vocab_size=150, max_tokens=400, max_len=48)
dm.tokenizers = model.hparams.tokenizers
trainer = L.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", logger=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.test(model, datamodule=dm, verbose=False)
with open(f"{out}/rank{{trainer.global_rank}}-of-{{devices}}.json", "w") as f:
    json.dump({{"bleu": float(trainer.callback_metrics["test/bleu"]), "decoded": len(decoded), "hyps": hyps}}, f)
"""


@pytest.mark.slow
def test_test_decoding_is_split_across_two_processes_with_the_same_bleu(tmp_path):
    dm = _corpus(tmp_path / "data")
    L.seed_everything(0)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, eval_beam_size=2, **TINY)
    trainer = trainer_with_callbacks(tmp_path, [], max_epochs=4)
    trainer.fit(model, datamodule=dm)
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    script = tmp_path / "ddp_test.py"
    script.write_text(DDP_SCRIPT.format(root=str(ROOT), ckpt=str(ckpt), data=str(tmp_path / "data"), out=str(tmp_path)))
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for devices in ("1", "2"):
        result = subprocess.run(
            [sys.executable, str(script), devices], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=HANG_TIMEOUT
        )
        assert result.returncode == 0, result.stderr[-3000:]
    one = json.loads((tmp_path / "rank0-of-1.json").read_text())
    ranks = [json.loads((tmp_path / f"rank{r}-of-2.json").read_text()) for r in (0, 1)]
    n = len(dm.test_pairs())
    assert one["decoded"] == n and [r["decoded"] for r in ranks] == [(n + 1) // 2, n // 2]  # each rank its share
    assert ranks[0]["hyps"] == ranks[1]["hyps"] == one["hyps"]  # gathered back in order, on every rank
    assert any(one["hyps"]) and ranks[0]["bleu"] == ranks[1]["bleu"] == pytest.approx(one["bleu"])


# ---------------------------------------------------------------------------------------------- recipes


@pytest.mark.parametrize(
    "recipe, data",
    [("toy_translation", None), ("multi30k", "multi30k"), ("cmn_eng", "cmn-eng"), ("mnist_subset", "mnist"), ("mnist", "mnist")],
)
@pytest.mark.slow
def test_every_recipe_trains_and_tests_on_the_shared_data(tmp_path, recipe, data):
    """Each shipped recipe as written (its sizes, EMA, checkpoint metric), a few steps on the real data."""
    from tests.helpers import fit

    args = [
        "--config",
        str(ROOT / "configs" / f"{recipe}.yaml"),
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.limit_val_batches",
        "2",
        "--trainer.limit_test_batches",
        "2",
        "--trainer.logger",
        "CSVLogger",
    ]
    if data:
        args += ["--data.init_args.data_dir", str(SHARED_DATA / data)]
    if recipe in ("multi30k", "cmn_eng"):  # an untrained model decodes to the length limit: keep BLEU small
        args += ["--model.init_args.bleu_val_sentences", "4", "--test", "false"]
    result = fit(tmp_path, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best checkpoint" in result.stdout + result.stderr


def test_ema_decay_warms_up_so_the_initial_weights_fade_quickly():
    from torch.optim.swa_utils import AveragedModel

    from training.callbacks import _ema_with_warmup

    param = torch.nn.Parameter(torch.zeros(1))
    module = torch.nn.Module()
    module.p = param
    average = AveragedModel(module, avg_fn=_ema_with_warmup(0.999))
    with torch.no_grad():
        param.fill_(0.0)
        average.update_parameters(module)  # the first update copies the weights: 0
        param.fill_(1.0)
        for n in range(1, 201):
            expected = average.module.p.item() + (1 - min(0.999, (1 + n) / (10 + n))) * (1.0 - average.module.p.item())
            average.update_parameters(module)
            assert average.module.p.item() == pytest.approx(expected, rel=1e-5)
    # 200 steps toward 1 from a start at 0: a fixed 0.999 would still be at 1 - 0.999^200 ≈ 0.18.
    assert average.module.p.item() > 0.9
