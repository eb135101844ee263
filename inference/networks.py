"""One way from a checkpoint to a network: `read_network` (a task's checkpoint), `read_pretrained` (a Hugging Face
Marian model) and `build_network` (settings and tokenizers → the network); every load goes through these, and a
checkpoint of the other task or with an unknown setting is one `CheckpointError` line (docs/guide/variants.md, "A
network's settings")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from common.checkpoints import read_checkpoint, weights_of
from common.errors import CheckpointError, HyperparameterError
from datamodules.tokenizers import tokenizer_from_dict
from models import Seq2SeqNet
from models.config import MnistNetConfig, MnistNetSettings, Seq2SeqConfig, Seq2SeqSettings, TransformerConfig, nested_hparams
from models.marian import state_dict_from_marian
from models.mnist_net import MnistNet

from .marian import marian_folder, read_marian
from .options import DecodingOptions

TRANSLATION, MNIST = "Seq2SeqTransformer", "MnistSequenceClassifier"
SETTINGS: dict[str, type[TransformerConfig]] = {TRANSLATION: Seq2SeqSettings, MNIST: MnistNetSettings}  # each task's net
MNIST_CLASSES = 10


@dataclass(frozen=True)
class NetworkCheckpoint:
    """What a checkpoint holds for its network: the task's hyperparameters (`net` its settings, as plain data), the
    settings checked, the tokenizers (translation only) and the network's weights by the network's own names."""

    task: str
    hparams: dict
    settings: TransformerConfig
    weights: dict[str, torch.Tensor]
    tokenizers: tuple | None = None  # (source, target) tokenizers

    @property
    def options(self) -> DecodingOptions:
        """The decoding defaults the checkpoint carries (`inference.options.CHECKPOINT_DEFAULTS`)."""
        return DecodingOptions.from_mapping(self.hparams)

    @property
    def batch_size(self) -> int:
        return self.hparams.get("eval_batch_size", 64)

    def network(self, where: str = "the checkpoint") -> torch.nn.Module:
        """The network built from the settings, with the weights; weights that do not fit are one `CheckpointError`."""
        try:
            net = build_network(self.settings, self.tokenizers)  # settings that do not fit the vocabularies: refused here
            net.load_state_dict(self.weights)
        except (RuntimeError, HyperparameterError) as err:
            raise CheckpointError(f"{where} does not fit {self.task}: {_first_line(err)}") from None
        return net.eval()


def build_network(settings: TransformerConfig, tokenizers: tuple | None = None) -> torch.nn.Module:
    """The network of `settings`: a `Seq2SeqNet` sized by its (source, target) `tokenizers`, or an `MnistNet`."""
    if isinstance(settings, MnistNetSettings):
        return MnistNet(MnistNetConfig.from_settings(settings, num_classes=MNIST_CLASSES))
    src, tgt = tokenizers
    sizes = dict(src_vocab_size=len(src), tgt_vocab_size=len(tgt), pad_id=tgt.pad_id)
    return Seq2SeqNet(Seq2SeqConfig.from_settings(settings, **sizes))


def task_of(hparams: dict) -> str | None:
    """The task a checkpoint's hyperparameters are of: the class LightningCLI recorded, else translation when they
    hold tokenizers; None when they say neither (a checkpoint older than the recorded class, without tokenizers)."""
    found = str(hparams.get("_class_path", "")).rsplit(".", 1)[-1]
    return found or (TRANSLATION if "tokenizers" in hparams else None)


def checked_settings(hparams: dict, task: str, where: str) -> tuple[dict, TransformerConfig]:
    """The hyperparameters with `net` gathered (a checkpoint older than `net` holds it flat) and its settings, checked:
    a setting this version does not know, or a value it refuses, is one `CheckpointError` naming it."""
    settings_class = SETTINGS[task]
    hparams = nested_hparams(hparams, settings_class)
    net = dict(hparams["net"])
    unknown = sorted(set(net) - set(settings_class.field_names()))
    if unknown:
        named = ", ".join(f"{name}={net[name]!r}" for name in unknown)
        raise CheckpointError(
            f"{where}: its network settings hold {named}, which this version does not know (written by another "
            f"version?); this version's {settings_class.__name__} knows {', '.join(settings_class.field_names())}"
        )
    try:
        settings = settings_class(**net)
    except HyperparameterError as err:
        raise CheckpointError(f"{where}: {err}") from None
    return {**hparams, "net": settings.as_dict()}, settings


def read_network(path: str | Path, task: str = TRANSLATION, which: str = "averaged", verify: bool = True) -> NetworkCheckpoint:
    """What the checkpoint at `path` holds for `task`'s network, its `which` weights ("averaged" or "training",
    `common.checkpoints.weights_of`). A file that is no checkpoint, a checkpoint of the other task or of another
    model, or settings this version does not know: one `CheckpointError` line."""
    state = read_checkpoint(path, verify=verify)
    hparams = dict(state.get("hyper_parameters") or {})
    found = task_of(hparams)
    if found != task and (found is not None or task == TRANSLATION):
        other = f"a {found} checkpoint" if found else "a checkpoint of another model"
        advice = f" (load it with {found}.load_from_checkpoint)" if found in SETTINGS else ""
        raise CheckpointError(f"{path} holds {other}, not a {task} one{advice}")
    hparams, settings = checked_settings(hparams, task, str(path))
    tokenizers = None
    if task == TRANSLATION:
        given = hparams.get("tokenizers")
        if not isinstance(given, dict) or set(given) != {"src", "tgt"}:
            raise CheckpointError(f"{path} holds no tokenizers: not a {task} checkpoint of this project")
        tokenizers = (tokenizer_from_dict(given["src"]), tokenizer_from_dict(given["tgt"]))
    weights = {k.removeprefix("net."): v for k, v in weights_of(state, path, which).items() if k.startswith("net.")}
    return NetworkCheckpoint(task, hparams, settings, weights, tokenizers)


def read_pretrained(name_or_folder: str | Path, **hparams) -> NetworkCheckpoint:
    """What a Hugging Face Marian (OPUS-MT) model holds, from its folder or hub name (inference/marian.py), as a
    translation checkpoint's: its settings, tokenizers and weights under our names; `hparams` (a length penalty,
    say) are the task's other hyperparameters."""
    config, tokenizers, marian_weights = read_marian(marian_folder(name_or_folder))
    settings = Seq2SeqSettings(**config)
    pair = (tokenizer_from_dict(tokenizers["src"]), tokenizer_from_dict(tokenizers["tgt"]))
    with torch.device("meta"):  # only the names and shapes of our weights: nothing allocated
        ours = build_network(settings, pair).state_dict()
    weights = state_dict_from_marian(marian_weights, ours)
    return NetworkCheckpoint(
        TRANSLATION, {**hparams, "tokenizers": tokenizers, "net": settings.as_dict()}, settings, weights, pair
    )


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return next((line.strip() for line in lines[1:] if line.strip()), lines[0] if lines else type(err).__name__)
