"""One typed config per network (models/config.py): it checks itself, and the task modules' flat arguments,
the command line and the recipes reach every field of it by name, with the defaults the task ships."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import yaml

from common.errors import HyperparameterError
from datamodules import ToyTranslationDataModule
from models import MnistNet, MnistNetConfig, Seq2SeqConfig, Seq2SeqNet, TransformerConfig
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import FIT, ROOT, run

# What the data decides, passed by the task module itself rather than offered as an argument.
DERIVED = {Seq2SeqTransformer: {"src_vocab_size", "tgt_vocab_size", "pad_id"}, MnistSequenceClassifier: {"num_classes"}}
TASKS = [(Seq2SeqTransformer, Seq2SeqConfig), (MnistSequenceClassifier, MnistNetConfig)]


def build(task):
    """The task module with its shipped defaults (a translator needs the data's tokenizers)."""
    return task(tokenizers=ToyTranslationDataModule().tokenizers) if task is Seq2SeqTransformer else task()


@pytest.mark.parametrize("task, config_class", TASKS, ids=lambda x: getattr(x, "__name__", None))
def test_the_task_offers_every_field_of_its_network_config_with_the_default_it_ships(task, config_class):
    """A field added to a config without a task argument (or one renamed on one side only) fails here, so the
    command line, the recipes and the config cannot drift apart silently."""
    parameters = inspect.signature(task.__init__).parameters
    fields = {f.name for f in dataclasses.fields(config_class)}
    offered = fields - DERIVED[task]
    assert offered <= set(parameters), f"{task.__name__} lacks {sorted(offered - set(parameters))}"
    assert not DERIVED[task] & set(parameters)  # the data's, never an argument that could contradict it
    config = build(task).net.config
    assert type(config) is config_class
    shipped = {name: parameters[name].default for name in offered}
    assert {name: getattr(config, name) for name in offered} == shipped


@pytest.mark.parametrize("task, config_class", TASKS, ids=lambda x: getattr(x, "__name__", None))
def test_each_argument_reaches_its_field(task, config_class):
    """Every field takes the task's argument of its name, not the one beside it (a swap of two same-typed
    arguments, as positional passing allowed, fails here)."""
    parameters = inspect.signature(task.__init__).parameters
    changed = {}
    for name in sorted(set(config_class.field_names()) - DERIVED[task] - {"d_model", "nhead", "patch_size"}):
        default = parameters[name].default  # each number and flag moved off its default, sizes kept divisible
        if isinstance(default, bool):
            changed[name] = not default
        elif isinstance(default, int):
            changed[name] = default + 1
        elif isinstance(default, float):
            changed[name] = default / 2 or 0.05
    changed.pop("share_embeddings", None)  # the toy data has two vocabularies
    kwargs = {"tokenizers": ToyTranslationDataModule().tokenizers} if task is Seq2SeqTransformer else {}
    config = task(**kwargs, **changed).net.config
    assert {name: getattr(config, name) for name in changed} == changed


def test_a_config_checks_itself_and_names_itself():
    with pytest.raises(HyperparameterError, match=r"^Seq2SeqConfig: d_model=30 must be divisible by nhead=4$"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=30, nhead=4)
    with pytest.raises(HyperparameterError, match=r"^Seq2SeqConfig: .*share_embeddings=True needs one vocabulary"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=True)
    with pytest.raises(HyperparameterError, match=r"^TransformerConfig: dropout=1\.0 must lie in \[0, 1\)$"):
        TransformerConfig(dropout=1.0)
    with pytest.raises(TypeError):  # settings are named, never passed by position
        Seq2SeqConfig(10, 10)  # type: ignore[misc]
    config = Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64  # type: ignore[misc]
    with pytest.raises(HyperparameterError, match="nhead=0"):  # a changed copy is checked again
        dataclasses.replace(config, nhead=0)


def test_a_task_reports_its_own_and_its_networks_mistakes_in_one_line():
    """The network's rules run over the task's arguments under the task's name, with the task's own options."""
    with pytest.raises(HyperparameterError) as err:
        Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, max_len=2, eval_beam_size=0)
    assert str(err.value) == "Seq2SeqTransformer: max_len=2 must be at least 3; eval_beam_size=0 must be at least 1"
    with pytest.raises(HyperparameterError) as err:
        MnistSequenceClassifier(stem_norm=True, mixup=-1.0)
    assert str(err.value) == "MnistSequenceClassifier: mixup=-1.0 must be at least 0"  # single values before relations


def test_from_hparams_keeps_defaults_for_fields_a_checkpoint_lacks_and_ignores_the_tasks_own():
    hparams = {"d_model": 32, "nhead": 4, "lr": 1e-3, "tokenizers": {}}  # an old checkpoint: no layer_norm_eps, bias
    config = Seq2SeqConfig.from_hparams(hparams, src_vocab_size=9, tgt_vocab_size=11, pad_id=0)
    assert (config.d_model, config.nhead, config.src_vocab_size, config.tgt_vocab_size) == (32, 4, 9, 11)
    assert config.layer_norm_eps == Seq2SeqConfig.layer_norm_eps and config.bias is True
    assert Seq2SeqNet(config).config is config and MnistNet().config == MnistNetConfig()


@pytest.mark.parametrize(
    "recipe, task, config_class",
    [("toy_translation.yaml", Seq2SeqTransformer, Seq2SeqConfig), ("mnist.yaml", MnistSequenceClassifier, MnistNetConfig)],
)
def test_the_command_line_offers_every_field(recipe, task, config_class):
    """LightningCLI's `--model.init_args.<field>` reaches every field of the network's config."""
    result = run([*FIT, "--config", str(ROOT / "configs" / recipe), "--model.init_args.layer_norm_eps", "1e-6", "--print_config"])
    assert result.returncode == 0, result.stderr[-2000:]
    init_args = yaml.safe_load(result.stdout)["model"]["init_args"]
    assert set(config_class.field_names()) - DERIVED[task] <= set(init_args)
    assert init_args["layer_norm_eps"] == 1e-6
