"""One way from a checkpoint to a network (inference/networks.py), taken by the task modules, the `Translator`, the
exporter and the scripts: a checkpoint whose network settings hold a name this version does not know, or the other
task's checkpoint, is one line on every path; the Python API's mistakes are one clear line each; `DecodingOptions`
travels whole from the flags to the search; and loading a task pulls in no training code."""

from __future__ import annotations

import sys

import pytest
import torch

from common.errors import CheckpointError, InputError
from inference import DecodingOptions, Translator
from inference.networks import read_network
from models.config import Seq2SeqSettings
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import ENV, ROOT, run, run_script

SOURCES = ["我 是 学 生", "男 生"]
CLI = {"_class_path": "tasks.Seq2SeqTransformer", "_instantiator": "lightning.pytorch.cli.instantiate_module"}


@pytest.fixture(scope="module")
def later(ckpts, tmp_path_factory):
    """The good toy checkpoint as LightningCLI writes it (its class and instantiator recorded), its network settings
    holding `sandwich_norm`, a setting of a later version."""
    state = torch.load(ckpts["good"], weights_only=True)
    hparams = state["hyper_parameters"]
    state["hyper_parameters"] = {**hparams, **CLI, "net": {**hparams["net"], "sandwich_norm": True}}
    path = tmp_path_factory.mktemp("later") / "sandwich.ckpt"
    torch.save(state, path)
    return path


def one_error_line(code: int, err: str) -> str:
    """What a script printed for a user's mistake: a non-zero status, no traceback, one `error:` line last."""
    assert code not in (0, None), err
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and err.strip().splitlines()[-1] == lines[0], err
    return lines[0]


def test_a_later_version_s_setting_is_one_line_naming_it_in_python(later):
    known = ", ".join(Seq2SeqSettings.field_names())
    for load in (Seq2SeqTransformer.load_from_checkpoint, Translator.from_checkpoint, read_network):
        with pytest.raises(CheckpointError) as caught:
            load(later)
        message = str(caught.value)
        assert "\n" not in message and "sandwich_norm=True" in message and known in message, message


@pytest.mark.parametrize("script", ["export", "translate", "evaluate"])
def test_a_later_version_s_setting_is_one_line_naming_it_from_the_scripts(capsys, later, tmp_path, script):
    src = tmp_path / "src.txt"
    src.write_text("我 是 学 生\n", encoding="utf-8")
    argv = {
        "export": ["--ckpt", str(later), "--to", "ctranslate2", str(tmp_path / "out")],
        "translate": ["--ckpt", str(later), "我 是"],
        "evaluate": ["--ckpt", str(later), "--src", str(src), "--ref", str(src)],
    }[script]
    code, out, err = run_script(capsys, script, *argv)
    line = one_error_line(code, err)
    assert "sandwich_norm=True" in line and "does not know" in line and "d_model" in line, line
    assert not (tmp_path / "out").exists() and out == ""


def test_the_other_task_s_checkpoint_is_one_line_naming_it(ckpts):
    for load in (Seq2SeqTransformer.load_from_checkpoint, Translator.from_checkpoint):
        with pytest.raises(CheckpointError, match="holds a MnistSequenceClassifier checkpoint, not a Seq2SeqTransformer"):
            load(ckpts["mnist"])
    with pytest.raises(CheckpointError, match="holds a Seq2SeqTransformer checkpoint, not a MnistSequenceClassifier"):
        MnistSequenceClassifier.load_from_checkpoint(ckpts["good"])


def test_the_python_api_s_mistakes_are_one_line_each(ckpts):
    mnist = MnistSequenceClassifier()
    with pytest.raises(InputError, match="takes a Seq2SeqTransformer .* this is a MnistSequenceClassifier"):
        Translator.from_module(mnist)
    translator = Translator.from_checkpoint(ckpts["good"])
    with pytest.raises(InputError, match=r"takes no prefix \(did you mean prefixes\?\)"):
        translator.translate(SOURCES, prefix=["I", ""])
    with pytest.raises(InputError, match="options= or option keywords, not both"):
        translator.translate(SOURCES, options=DecodingOptions(beam_size=2), beam_size=3)


def test_one_reader_builds_the_network_the_task_loads(ckpts):
    module = Seq2SeqTransformer.load_from_checkpoint(ckpts["good"]).eval()
    read = read_network(ckpts["good"])
    translator = Translator.from_checkpoint(ckpts["good"])
    assert read.settings == Seq2SeqSettings(**module.hparams["net"]) and translator.options == read.options
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 7, 0]])
    with torch.no_grad():
        assert torch.equal(translator.net(src, tgt), module.net(src, tgt))


def test_options_travel_whole_and_decode_as_the_keywords_do(ckpts):
    translator = Translator.from_checkpoint(ckpts["good"])
    options = DecodingOptions(beam_size=3, nbest=2, length_penalty=0.5, max_len=6)
    best = options.replace(nbest=1)
    assert translator.translate(SOURCES, options=best) == translator.translate(
        SOURCES, beam_size=3, length_penalty=0.5, max_len=6
    )
    by_options = translator.translate(SOURCES, nbest=2, options=options)
    by_keywords = translator.translate(SOURCES, nbest=2, beam_size=3, length_penalty=0.5, max_len=6)
    assert [[(h.text, h.score) for h in row] for row in by_options] == [[(h.text, h.score) for h in row] for row in by_keywords]
    refs = [row[0].text or "我" for row in by_options]
    scored = translator.score(SOURCES, refs, options=options)
    assert [h.score for h in scored] == [h.score for h in translator.score(SOURCES, refs, length_penalty=0.5)]


def test_translate_py_builds_the_options_once_and_passes_them_whole(capsys, ckpts, monkeypatch):
    calls = []
    real = Translator.translate

    def spy(self, sentences, *args, **kwargs):
        calls.append(kwargs)
        return real(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", spy)
    code, out, err = run_script(
        capsys, "translate", "--ckpt", str(ckpts["good"]), "--beam-size", "2", "--nbest", "2", "--batch-size", "1", *SOURCES
    )
    assert code == 0, err
    assert len(calls) == 2 and calls[0]["options"] is calls[1]["options"]  # one object for every chunk
    assert set(calls[0]) == {"nbest", "options"} and calls[0]["options"] == DecodingOptions(beam_size=2, nbest=2)


def test_loading_a_task_pulls_in_no_training_code():
    # The classes themselves: the packages import theirs when first used (common/lazy.py).
    tasks = "from tasks import MnistSequenceClassifier, Seq2SeqTransformer; from inference import Translator"
    code = f"import sys; {tasks}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'training'))"
    result = run([sys.executable, "-c", code], env={**ENV, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
