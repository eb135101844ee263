"""One typed config per network (models/config.py): it checks itself; the task modules take its settings whole
(`net`), and the command line (`--model.init_args.net.<field>`) and the recipes reach every field of it, each
declared once, with one default."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import pytest
import torch
import yaml

from common.errors import HyperparameterError
from datamodules import ParallelCorpusDataModule, ToyTranslationDataModule
from models import MnistNet, MnistNetConfig, MnistNetSettings, Seq2SeqConfig, Seq2SeqNet, Seq2SeqSettings, TransformerConfig
from models.activations import ACTIVATIONS
from models.config import nested_hparams
from models.norms import NORMS
from models.positional import POSITIONALS
from models.relative import RELATIVE_BIASES
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import FIT, ROOT, SHARED_DATA, run

# What the data decides: the network's config has it, the settings a user gives (the task's `net`) do not.
DERIVED = {Seq2SeqTransformer: {"src_vocab_size", "tgt_vocab_size", "pad_id"}, MnistSequenceClassifier: {"num_classes"}}
TASKS = [(Seq2SeqTransformer, Seq2SeqSettings, Seq2SeqConfig), (MnistSequenceClassifier, MnistNetSettings, MnistNetConfig)]
IDS = ["Seq2SeqTransformer", "MnistSequenceClassifier"]


def build(task, **kwargs):
    """The task module (a translator needs the data's tokenizers)."""
    tokenizers = {"tokenizers": ToyTranslationDataModule().tokenizers} if task is Seq2SeqTransformer else {}
    return task(**tokenizers, **kwargs)


@pytest.mark.parametrize("task, settings, config_class", TASKS, ids=IDS)
def test_the_task_takes_its_networks_settings_whole_with_their_defaults(task, settings, config_class):
    """The task's `net` is the settings class, defaulting to its defaults; the network's config is those settings and
    what the data decides, which no argument offers."""
    parameters = inspect.signature(task.__init__).parameters
    assert parameters["net"].annotation in (settings, settings.__name__) and parameters["net"].default == settings()
    assert set(config_class.field_names()) == set(settings.field_names()) | DERIVED[task]
    assert not DERIVED[task] & (set(parameters) | set(settings.field_names()))  # the data's, never the user's
    config = build(task).net.config
    assert type(config) is config_class
    assert {name: getattr(config, name) for name in settings.field_names()} == settings().as_dict()


@pytest.mark.parametrize("task, settings, config_class", TASKS, ids=IDS)
def test_each_setting_reaches_its_field(task, settings, config_class):
    """Every field of the network's config takes the setting of its name, not the one beside it."""
    changed = {}
    for field in dataclasses.fields(settings):
        if field.name in {"d_model", "nhead", "patch_size"}:
            continue
        default = field.default  # each number and flag moved off its default, sizes kept divisible
        if isinstance(default, bool):
            changed[field.name] = not default
        elif isinstance(default, int):
            changed[field.name] = default + 1
        elif isinstance(default, float):
            changed[field.name] = default / 2 or 0.05
    changed.pop("share_embeddings", None)  # the toy data has two vocabularies
    config = build(task, net=settings(**changed)).net.config
    assert {name: getattr(config, name) for name in changed} == changed
    again = build(task, net=settings(**changed).as_dict())
    assert again.net.config == config  # a checkpoint's settings (a dict) build the same network


def test_each_setting_is_declared_once():
    """A setting's name, type and default live in models/config.py alone, once: no class of a network's config
    declares a field its parent declared (a network's own choices of the stack's settings are its recipes'), no
    task argument, no other dataclass of the project and no benchmark's command-line flag declares one again."""
    names = set(Seq2SeqConfig.field_names()) | set(MnistNetConfig.field_names())
    for task in (Seq2SeqTransformer, MnistSequenceClassifier):
        assert not names & set(inspect.signature(task.__init__).parameters), task.__name__
    declared: dict[str, set[str]] = {}
    for network in (Seq2SeqConfig, MnistNetConfig):  # each network's classes, the stack's first
        for cls in reversed([c for c in network.__mro__ if issubclass(c, TransformerConfig)]):
            for name in cls.__dict__.get("__annotations__", {}):
                if name not in ("CHECKS", "RELATIONS"):
                    declared.setdefault(name, set()).add(cls.__name__)
    again = {name: where for name, where in declared.items() if len(where) > 1}
    assert not again, again  # e.g. MnistNetSettings declaring d_model again with a default of its own
    # Every other dataclass of the project's packages: none declares a setting again (a field of its name and type;
    # a Hypothesis's `tokens`, a list of ids, is not MnistNet's `tokens`).
    settings = {(f.name, str(f.type)) for config in (Seq2SeqConfig, MnistNetConfig) for f in dataclasses.fields(config)}
    for package in ("models", "tasks", "training", "inference", "datamodules", "deploy"):
        for path in sorted((ROOT / package).glob("*.py")):
            module = importlib.import_module(f"{package}.{path.stem}")
            for obj in vars(module).values():
                if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__ and not issubclass(obj, TransformerConfig):
                    assert not settings & {(f.name, str(f.type)) for f in dataclasses.fields(obj)}, obj
    # The benchmarks: sizes are flags of benchmarks/_common.py's `add_size_arguments`, named for the fields they set
    # (a flag of a data module's argument, as data_scale.py's --max-len, is the data's).
    data = set(inspect.signature(ParallelCorpusDataModule.__init__).parameters)
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for flag in re.findall(r"add_argument\(\s*\"--([\w-]+)\"", path.read_text()):
            if flag.replace("-", "_") in names - data:
                assert path.name == "_common.py", f"{path.name} declares --{flag}"


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


def test_settings_and_a_tasks_own_arguments_report_their_mistakes_in_one_line_each():
    """The network's settings are checked by themselves, under their own name; the task's own arguments under the
    task's, every mistake in one line."""
    with pytest.raises(HyperparameterError) as err:
        Seq2SeqSettings(max_len=2, dropout=1.5)
    assert str(err.value) == "Seq2SeqSettings: dropout=1.5 must lie in [0, 1); max_len=2 must be at least 3"
    with pytest.raises(HyperparameterError) as err:
        Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, eval_beam_size=0, lr=0)
    assert str(err.value) == "Seq2SeqTransformer: lr=0 must be above 0; eval_beam_size=0 must be at least 1"
    with pytest.raises(HyperparameterError) as err:
        MnistSequenceClassifier(net={"stem_norm": True}, mixup=-1.0)
    assert str(err.value) == "MnistNetSettings: stem_norm needs a stem: stem_channels > 0"  # a checkpoint's dict, checked
    with pytest.raises(HyperparameterError) as err:
        MnistSequenceClassifier(mixup=-1.0)
    assert str(err.value) == "MnistSequenceClassifier: mixup=-1.0 must be at least 0"


def test_nested_hparams_gathers_a_checkpoints_flat_settings_and_keeps_defaults_for_fields_it_lacks():
    hparams = {"d_model": 32, "nhead": 4, "lr": 1e-3, "tokenizers": {}}  # an old checkpoint: no layer_norm_eps, bias
    nested = nested_hparams(hparams, Seq2SeqSettings)
    assert nested == {"lr": 1e-3, "tokenizers": {}, "net": {"d_model": 32, "nhead": 4}}
    assert nested_hparams(nested, Seq2SeqSettings) == nested  # a checkpoint written with `net` is left as it is
    config = Seq2SeqConfig.from_settings(nested["net"], src_vocab_size=9, tgt_vocab_size=11, pad_id=0)
    assert (config.d_model, config.nhead, config.src_vocab_size, config.tgt_vocab_size) == (32, 4, 9, 11)
    assert config.layer_norm_eps == Seq2SeqConfig.layer_norm_eps and config.bias is True
    assert Seq2SeqNet(config).config is config and MnistNet().config == MnistNetConfig()


@pytest.mark.parametrize(
    "recipe, settings",
    [("toy_translation.yaml", Seq2SeqSettings), ("mnist.yaml", MnistNetSettings)],
)
def test_the_command_line_offers_every_setting_under_net(recipe, settings):
    """LightningCLI's `--model.init_args.net.<field>` reaches every setting, and nothing the data decides."""
    flag = "--model.init_args.net.layer_norm_eps"
    result = run([*FIT, "--config", str(ROOT / "configs" / recipe), flag, "1e-6", "--print_config"])
    assert result.returncode == 0, result.stderr[-2000:]
    net = yaml.safe_load(result.stdout)["model"]["init_args"]["net"]
    assert set(net) == set(settings.field_names())
    assert net["layer_norm_eps"] == 1e-6


def test_mnist_takes_every_activation_and_position_scheme_of_the_core():
    """MNIST's settings are the core's: silu and Marian's [sin | cos] positions, which a copy of the choices once
    refused, reach the network."""
    flags = ["--model.init_args.net.activation", "silu", "--model.init_args.net.positional", "sinusoidal_halves"]
    result = run([*FIT, "--config", str(ROOT / "configs" / "mnist_subset.yaml"), *flags, "--print_config"])
    assert result.returncode == 0, result.stderr[-2000:]
    net = yaml.safe_load(result.stdout)["model"]["init_args"]["net"]
    assert (net["activation"], net["positional"]) == ("silu", "sinusoidal_halves")
    model = MnistSequenceClassifier(net=MnistNetSettings(**net))
    assert (model.net.config.activation, model.net.config.positional) == ("silu", "sinusoidal_halves")
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    for activation in ACTIVATIONS:
        for positional in POSITIONALS:
            MnistNetSettings(activation=activation, positional=positional)  # every pair the core offers


TABLES = {"activation": ACTIVATIONS, "norm": NORMS, "positional": POSITIONALS, "relative_bias": RELATIVE_BIASES}


@pytest.mark.parametrize("settings", [Seq2SeqSettings, MnistNetSettings], ids=["Seq2SeqSettings", "MnistNetSettings"])
def test_a_schemes_setting_takes_the_names_of_its_table_that_fit_the_network_and_each_builds(settings):
    """The allowed values are the tables' names (models.registry): those whose entry fits the network's input, and
    each of them builds a network that runs; a name of another network's scheme is refused in one line."""
    small = dict(d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=48)
    for setting, table in TABLES.items():
        for name, entry in table.items():
            fits = settings.INPUT in getattr(entry, "fits", (settings.INPUT,))
            if not fits:
                with pytest.raises(HyperparameterError, match=rf"^{settings.__name__}: {setting}={name!r} must be one of"):
                    settings(**{setting: name})
                continue
            net = build(
                Seq2SeqTransformer if settings is Seq2SeqSettings else MnistSequenceClassifier,
                net=settings(**small, **{setting: name}),
            ).net
            if settings is Seq2SeqSettings:
                assert torch.isfinite(net(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]]))).all(), (setting, name)
            else:
                assert torch.isfinite(net(torch.zeros(1, 1, 28, 28))).all(), (setting, name)


@pytest.mark.slow
def test_a_variant_file_is_refused_in_one_line_by_a_recipe_whose_network_it_does_not_fit(tmp_path):
    """configs/variants/learned2d.yaml says `fits: [image]`: with the translation recipe, one line and nothing run; with
    the MNIST recipe, a --config like any other."""
    variant = str(ROOT / "configs" / "variants" / "learned2d.yaml")
    result = run(
        [
            *FIT,
            "--config",
            str(ROOT / "configs" / "toy_translation.yaml"),
            "--config",
            variant,
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: a variant (--config) that does not fit this recipe: it is for image networks (its fits:), "
        "and Seq2SeqTransformer reads text"
    )
    assert not list(tmp_path.iterdir())
    result = run([*FIT, "--config", str(ROOT / "configs" / "mnist_subset.yaml"), "--config", variant, "--print_config"])
    assert result.returncode == 0, result.stderr[-2000:]
    printed = yaml.safe_load(result.stdout)
    assert printed["fits"] == ["image"] and printed["model"]["init_args"]["net"]["positional"] == "learned2d"


@pytest.mark.parametrize("where", ["flag", "recipe", "variant"])
def test_a_setting_in_the_old_flat_spelling_gets_one_line_naming_the_new_one(tmp_path, where):
    """A flag, a recipe or a variant file written before the settings moved under `net`."""
    old = "model:\n  class_path: tasks.Seq2SeqTransformer\n  init_args:\n    d_model: 256\n"
    (tmp_path / "old.yaml").write_text(old if where == "recipe" else old.replace("  class_path: tasks.Seq2SeqTransformer\n", ""))
    args = {
        "flag": ["--model.init_args.d_model", "256"],
        "recipe": ["--config", str(tmp_path / "old.yaml")],
        "variant": ["--config", str(ROOT / "configs" / "toy_translation.yaml"), "--config", str(tmp_path / "old.yaml")],
    }[where]
    result = run([*FIT, *args, "--trainer.default_root_dir", str(tmp_path)])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model.init_args.d_model: "), result.stderr[-2000:]
    assert "--model.init_args.net.d_model" in lines[0]
    assert not list(tmp_path.glob("version_*"))  # refused before any run folder


def test_an_option_that_is_no_setting_keeps_jsonargparses_error():
    result = run([*FIT, "--model.init_args.no_such_option", "1"])
    assert result.returncode == 2 and "no_such_option" in result.stderr and "init_args.net." not in result.stderr


def test_the_distillation_student_is_about_a_quarter_of_the_teacher():
    """configs/distillation/multi30k_student.yaml on top of the Multi30k recipe: the same recipe with a network of
    20-35 % of the teacher's parameters (the distillation recipe's "about a quarter"), and nothing else changed but
    the run's folder and time limit."""
    teacher = yaml.safe_load((ROOT / "configs/multi30k.yaml").read_text())
    layer = yaml.safe_load((ROOT / "configs/distillation/multi30k_student.yaml").read_text())
    assert set(layer) == {"trainer", "model"} and set(layer["trainer"]) == {"max_time", "default_root_dir"}
    assert set(layer["model"]) == {"init_args"} and set(layer["model"]["init_args"]) == {"net"}
    vocab = {"src_vocab_size": 8000, "tgt_vocab_size": 8000, "pad_id": 0}

    def parameters(net: dict) -> int:
        config = Seq2SeqConfig(**{**Seq2SeqSettings(**net).as_dict(), **vocab})
        return sum(p.numel() for p in Seq2SeqNet(config).parameters())

    big = teacher["model"]["init_args"]["net"]
    small = {**big, **layer["model"]["init_args"]["net"]}
    assert 0.20 < parameters(small) / parameters(big) < 0.35


def test_the_back_translation_models_are_the_students_network_with_more_dropout():
    """configs/backtranslation/multi30k_10k.yaml: the four models of the back-translation recipe are the distillation
    student's network (a model sized for the data) with dropout 0.3 for 10k pairs, and the command line takes it
    on top of the Multi30k recipe."""
    student = yaml.safe_load((ROOT / "configs/distillation/multi30k_student.yaml").read_text())
    path = ROOT / "configs/backtranslation/multi30k_10k.yaml"
    layer = yaml.safe_load(path.read_text())
    assert set(layer) == {"trainer", "model"} and set(layer["trainer"]) == {"max_time", "default_root_dir"}
    net = layer["model"]["init_args"]["net"]
    assert net == {**student["model"]["init_args"]["net"], "dropout": 0.3}
    result = run([*FIT, "--config", str(ROOT / "configs/multi30k.yaml"), "--config", str(path), "--print_config"])
    assert result.returncode == 0, result.stderr[-2000:]
    printed = yaml.safe_load(result.stdout)["model"]["init_args"]["net"]
    assert {k: printed[k] for k in net} == net


@pytest.mark.parametrize(
    "recipe",
    [
        ["multi30k.yaml", "distillation/multi30k_student.yaml"],
        ["multi30k.yaml", "backtranslation/multi30k_10k.yaml"],
        ["multi30k.yaml"],
        ["multi30k_many_to_one.yaml"],
        ["multi30k_zero_shot.yaml"],
    ],
    ids=lambda r: r[-1].removesuffix(".yaml"),
)
def test_the_convergence_protocol_on_any_compared_recipe_leaves_no_budget_but_epochs_and_validation(recipe, tmp_path):
    """configs/protocols/convergence.yaml applied last: whatever wall-time limit, step budget or time-fitted schedule
    the recipe has, the run is defined by epochs and early stopping on the recipe's checkpoint metric."""
    from lightning.pytorch.callbacks import EarlyStopping

    from training.cli import TransformerCLI

    configs = [a for name in [*recipe, "protocols/convergence.yaml"] for a in ("--config", str(ROOT / "configs" / name))]
    data = ["--data.data_dir", str(SHARED_DATA / "multi30k"), "--data.cache_dir", str(tmp_path / "cache")]
    cli = TransformerCLI(args=[*configs, *data, "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path)])
    config, trainer = cli.config, cli.trainer
    assert (trainer.max_epochs, trainer.max_steps, config.trainer.max_time) == (80, -1, None)
    assert not config.fit_schedule_to_time and cli.model.hparams.lr_schedule == "inverse_sqrt"
    (stop,) = [c for c in trainer.callbacks if isinstance(c, EarlyStopping)]
    assert (stop.monitor, stop.patience, stop.min_delta) == (config.checkpoint.monitor, 5, 0.1)
