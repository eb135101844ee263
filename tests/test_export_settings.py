"""Every network setting, exported to both engines: refused in one line naming it, or translating as ours.

The cases are generated from the settings' fields (models/config.py: `Seq2SeqSettings`), as x-transformers' tests
are from its options: for each field, a value other than the small base model's (every allowed value of a field
checked by `one_of`, read from the settings' `CHECKS`, so that a new table entry is a new case; the other value of
a boolean; a nearby number the settings accept). A small random model with it is exported to CTranslate2 and to a
Hugging Face folder, and each engine itself is the oracle: its teacher-forced log-probs and greedy outputs of
sentences are ours, or the export is one `ExportError` line naming the setting, with nothing written. A new field
with no rule in an exporter's allow-list fails `test_every_setting_has_a_rule_in_each_exporter`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
import yaml

from datamodules.batching import frame_target, pad_sequences
from datamodules.toy import ToyTranslationDataModule
from datamodules.vocab import Vocab
from models.activations import ACTIVATIONS, Activation
from models.config import Seq2SeqConfig, Seq2SeqSettings
from models.marian import options_from_config
from tasks import Seq2SeqTransformer
from tests.helpers import ROOT, save_checkpoint, script

ctranslate2 = pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
transformers = pytest.importorskip("transformers", reason="pip install -e '.[deploy]'")
from deploy import ctranslate2 as ct2_export  # noqa: E402
from deploy import marian_shape  # noqa: E402
from deploy.ctranslate2 import export_ctranslate2, vocabulary  # noqa: E402
from deploy.huggingface import HubExportError, export_huggingface  # noqa: E402
from deploy.verify import ExportError, check_greedy, probes  # noqa: E402

WORDS = Vocab([f"w{i}" for i in range(60)], "word").to_dict()
SRC = ["w1 w2 w3 w4 w5", "w7 w8", "w9 w10 w11 w12 w13 w14 w15 w16", "w30"]
TGT = ["w3 w4 w5 w6", "w2 w2 w2 w2 w2 w2 w2", "w5", "w40 w41 w42"]
BASE = dict(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64, max_len=64)
LIMIT = 12  # greedy output tokens: a random model's outputs seldom end; ours then ends with <eos> forced as
# the LIMIT-th token (models/decoding.py), as the exported generation config does; CTranslate2 is run one short
ATOL = 1e-4  # log-probs, as tests/test_export.py and tests/test_export_hf.py allow
EXPORTS = {"ctranslate2": export_ctranslate2, "hf": export_huggingface}


def _accepted(**values) -> bool:
    try:
        Seq2SeqSettings(**{**BASE, **values})
    except ValueError:
        return False
    return True


def other_values(field: dataclasses.Field) -> list:
    """The values of `field` a case is made for: every option of a `one_of` check, the other boolean, or the
    first nearby number the settings accept."""
    base = BASE.get(field.name, field.default)
    check = Seq2SeqSettings.CHECKS.get(field.name)
    if hasattr(check, "options"):
        return [v for v in check.options if v != base]
    if isinstance(base, bool):
        return [not base]
    numbers = [1, 2] if base is None else [base + 1, base * 2, base / 2, 0.25, 1, 2]
    kind = int if "int" in str(field.type) else float
    for value in numbers:
        if kind(value) != base and _accepted(**{field.name: kind(value)}):
            return [kind(value)]
    raise AssertionError(f"no other value of {field.name} ({field.type}) for the generated export test: add one here")


CASES = [(f.name, v) for f in dataclasses.fields(Seq2SeqSettings) for v in other_values(f)]


def random_model(**options) -> Seq2SeqTransformer:
    """A small random model, weights scaled up so that a wrongly mapped weight shows (as tests/test_export.py's)."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(tokenizers={"src": WORDS, "tgt": WORDS}, net=Seq2SeqSettings(**{**BASE, **options})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3) if p.dim() >= 2 else p.add_(0.3 * torch.randn_like(p))
    return model


def ours(model) -> tuple[torch.Tensor, list[str]]:
    """Our teacher-forced log-probs of TGT (B, T, V) and greedy translations of SRC."""
    src = model.translator.encode_sources(SRC)
    tgt = pad_sequences([frame_target(model.tgt_tokenizer.encode(t)) for t in TGT], 0)
    with torch.no_grad():
        log_probs = model.net(src, tgt[:, :-1]).log_softmax(-1)
    return log_probs, model.translate(SRC, beam_size=1, max_len=LIMIT)


def assert_ctranslate2_translates_as_ours(model, folder) -> None:
    translator = ctranslate2.Translator(str(folder), compute_type="float32")
    src_vocab, tgt_vocab = vocabulary(model.src_tokenizer), vocabulary(model.tgt_tokenizer)
    sources = [[src_vocab[i] for i in ids if i != model.net.pad_id] for ids in model.translator.encode_sources(SRC).tolist()]
    log_probs, greedy = ours(model)
    scored = translator.score_batch(sources, [[tgt_vocab[i] for i in model.tgt_tokenizer.encode(t)] for t in TGT])
    for i, (target, result) in enumerate(zip(TGT, scored)):
        ids = [*model.tgt_tokenizer.encode(target), model.eos_id]
        mine = log_probs[i, torch.arange(len(ids)), ids]
        torch.testing.assert_close(torch.tensor(result.log_probs), mine, atol=ATOL, rtol=0)
    banned = [[tgt_vocab[model.pad_id]], [tgt_vocab[model.bos_id]]]
    results = translator.translate_batch(
        sources, beam_size=1, max_decoding_length=LIMIT - 1, min_decoding_length=0, suppress_sequences=banned
    )
    index = {t: i for i, t in enumerate(tgt_vocab)}
    assert [model.tgt_tokenizer.decode([index[t] for t in r.hypotheses[0]]) for r in results] == greedy


def assert_hf_translates_as_ours(model, folder) -> None:
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(SRC, return_tensors="pt", padding=True)
    tgt = pad_sequences([frame_target(model.tgt_tokenizer.encode(t)) for t in TGT], 0)
    log_probs, greedy = ours(model)
    with torch.no_grad():
        theirs = hf(**batch, decoder_input_ids=tgt[:, :-1]).logits.log_softmax(-1)
    real = tgt[:, 1:].ne(0)  # what follows a target's <eos> is padding, which neither reads
    torch.testing.assert_close(theirs[real], log_probs[real], atol=ATOL, rtol=0)
    outputs = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=LIMIT)  # <eos> forced as the last, as ours
    assert tokenizer.batch_decode(outputs, skip_special_tokens=True) == greedy


ORACLES = {"ctranslate2": assert_ctranslate2_translates_as_ours, "hf": assert_hf_translates_as_ours}


def test_every_setting_has_a_rule_in_each_exporter():
    """An allow-list entry for every field of the network's settings, none for a field that no longer exists."""
    fields = set(Seq2SeqConfig.field_names())
    for allowed in (ct2_export.ALLOWED, marian_shape.ALLOWED):
        assert set(allowed) == fields, (sorted(fields - set(allowed)), sorted(set(allowed) - fields))


def test_the_cases_cover_every_setting_and_every_option():
    assert {name for name, _ in CASES} == set(Seq2SeqSettings.field_names())
    assert {v for name, v in CASES if name == "positional"} == set(Seq2SeqSettings.CHECKS["positional"].options) - {"sinusoidal"}


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_each_setting_exports_as_ours_or_is_refused_by_name(tmp_path, name, value):
    model = random_model(**{name: value})
    for engine, export in EXPORTS.items():
        out = tmp_path / engine
        try:
            export(model, out)
        except ExportError as err:
            assert "\n" not in str(err) and f"{name}={value}" in str(err), str(err)
            assert not out.exists()
            continue
        ORACLES[engine](model, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in tmp_path.iterdir() if p.name in EXPORTS)


# ---------------------------------------------------------------------------------------------- what no exporter knows


@dataclasses.dataclass(frozen=True, kw_only=True)
class TomorrowsConfig(Seq2SeqConfig):
    """A setting added after the exporters' allow-lists were written."""

    sandwich_norm: bool = False


@pytest.mark.parametrize("engine", EXPORTS)
def test_a_setting_no_exporter_knows_is_refused(tmp_path, engine):
    model = random_model()
    model.net.config = TomorrowsConfig(**model.net.config.as_dict())
    with pytest.raises(ExportError, match="sandwich_norm=False has no rule") as err:
        EXPORTS[engine](model, tmp_path / "out")
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("engine", EXPORTS)
@pytest.mark.parametrize("name", ["norm4", "sandwich"])
def test_a_weight_no_exporter_knows_is_refused(tmp_path, engine, name):
    """A module the mappings do not know (a sublayer norm added to the network without an export rule): its
    weight is named, and nothing is written. By a checkpoint, the reader refuses it before any exporter."""
    model = random_model()
    setattr(model.net.core.encoder_layers[1], name, torch.nn.LayerNorm(32))
    with pytest.raises(ExportError, match=f"core.encoder_layers.1.{name}.weight") as err:
        EXPORTS[engine](model, tmp_path / "out")
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []
    ckpt = save_checkpoint(model, tmp_path / "extra.ckpt")
    done = script("export", "--ckpt", str(ckpt), "--to", engine, str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "does not fit" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [ckpt]


@pytest.mark.parametrize("engine", EXPORTS)
def test_a_network_that_computes_otherwise_is_refused_by_its_probes(tmp_path, engine):
    """Settings and weights as the exporters know them, but ours computes something else (a norm applied twice, as
    an option forgotten by the mappings would): the exported model's log-probs differ, and the export is refused."""
    model = random_model()
    norm = model.net.core.decoder_norm
    forward = norm.forward
    norm.forward = lambda x: forward(forward(x) * 3.0)
    with pytest.raises(ExportError, match=r"log-probs differ from ours by .* \(more than 0.001\)") as err:
        EXPORTS[engine](model, tmp_path / "out")
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []


def test_a_quantized_export_is_checked_in_float32_first(tmp_path, monkeypatch):
    """int8 weights change the log-probs by more than float tolerance: the float32 conversion is what is checked,
    then quantized in place; a probe failure refuses an int8 export too."""
    model = random_model()
    out = export_ctranslate2(model, tmp_path / "int8", quantization="int8")
    assert json.loads((out / "tokenizers.json").read_text())["quantization"] == "int8"
    norm = model.net.core.decoder_norm
    forward = norm.forward
    norm.forward = lambda x: 2.0 * forward(x)
    with pytest.raises(ExportError, match="differ from ours"):
        export_ctranslate2(model, tmp_path / "bad", quantization="int8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8"]


# ---------------------------------------------------------------------------------------------- the Hugging Face specifics


def test_the_toy_data_modules_two_vocabularies_are_refused_with_what_is_true(tmp_path):
    """The toy data module has no `shared_vocab`: the refusal does not tell its user to set it."""
    model = Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, net=Seq2SeqSettings(**BASE))
    with pytest.raises(HubExportError) as err:
        export_huggingface(model, tmp_path / "hf")
    message = str(err.value)
    assert "two vocabularies" in message and "the toy data module has two" in message and "no such option" in message
    assert list(tmp_path.iterdir()) == []


def test_generation_config_carries_our_length_limit(tmp_path):
    """`max_length` is the model's max_len; our max_len_a × S + max_len_b is recorded beside it. A plain `generate`
    of outputs that never end runs to max_len - 1 tokens, where ours stops at a·S + b; with `max_new_tokens` from
    the config's own a and b, `generate` stops where ours does, token for token."""
    model = random_model(generator_bias=True)
    with torch.no_grad():
        model.net.generator.bias[model.eos_id] = -100.0  # no output ends
    out = export_huggingface(model, tmp_path / "hf")
    config = json.loads((out / "generation_config.json").read_text())
    a, b = config["max_len_a"], config["max_len_b"]
    assert (a, b, config["max_length"]) == (1.5, 10, BASE["max_len"])
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    mine = model.translate(SRC, beam_size=1)
    for sentence, text in zip(SRC, mine):  # each sentence's own limit: generate takes one limit a call
        batch = tokenizer([sentence], return_tensors="pt")
        S = batch["input_ids"].shape[1]  # the source's tokens, <eos> included
        assert len(text.split()) == int(a * S + b) - 1  # words, then <eos> forced as the last token
        plain = hf.generate(**batch, num_beams=1)
        assert plain.shape[1] - 1 == BASE["max_len"] - 1  # generate's own limit: the model's positions
        ours_limit = hf.generate(**batch, num_beams=1, max_new_tokens=min(int(a * S + b), BASE["max_len"] - 1))
        assert ours_limit.shape[1] - 1 == int(a * S + b)
        assert tokenizer.batch_decode(ours_limit, skip_special_tokens=True) == [text]
    assert len({len(t.split()) for t in mine}) > 1  # the sources' lengths differ, and so do their limits


def refused_settings(check_exportable) -> set[str]:
    """The settings of CASES an exporter's allow-list refuses."""
    refused = set()
    for name, value in CASES:
        try:
            check_exportable(Seq2SeqConfig(**{**BASE, name: value}, src_vocab_size=60, tgt_vocab_size=60))
        except ExportError:
            refused.add(name)
    return refused


def test_the_docs_list_each_exporters_refusals():
    """Every sentence of the README and the guide saying what an export refuses names exactly the settings its
    allow-list refuses."""
    refusals = {
        "CTranslate2": refused_settings(ct2_export.check_exportable),
        "Hugging Face": refused_settings(marian_shape.check_exportable),
    }
    fields = set(Seq2SeqConfig.field_names())
    for doc in ("README.md", "docs/guide/export-deploy.md"):
        text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())
        sentences = re.findall(r"The (CTranslate2|Hugging Face) export refuses(.*?)\.(?:\s|$)", text)
        assert {engine for engine, _ in sentences} == set(refusals), doc
        for engine, sentence in sentences:
            assert set(re.findall(r"`(\w+)`", sentence)) & fields == refusals[engine], (doc, engine, sentence)


def test_the_docs_refusal_lists_are_what_regenerate_writes():
    from scripts.regenerate import COMMAND, DOCS, with_refusals

    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert with_refusals(text) == text, f"{doc}'s list of what an export refuses is stale: run {COMMAND}"


# ---------------------------------------------------------------------------------------------- a new activation


# ReLU² (So et al., 2021, "Primer"): Hugging Face's relu2; CTranslate2 has no such activation.
SQUARED_RELU = Activation(lambda x: F.relu(x).square(), marian=("relu2",))


def test_a_new_activation_is_its_code_and_one_table_entry(tmp_path, monkeypatch):
    """docs/guide/variants.md's checklist: an activation registered in models.activations.ACTIVATIONS and its variant file are
    all the rest needs. The regenerated sweeps run the file and count it; the README's table check asks for the name;
    the regenerated docs say which export refuses it; the Hugging Face export writes it under the entry's name and
    computes ours, the CTranslate2 export (the entry names none) refuses it by name with nothing written."""
    import training.variants
    from scripts.regenerate import refusals, sweep_of_variants, with_refusals
    from tests.helpers import readme_options_missing

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    monkeypatch.setitem(ACTIVATIONS, "squared_relu", SQUARED_RELU)
    folder = shutil.copytree(training.variants.VARIANTS_DIR, tmp_path / "variants")
    (folder / "squared_relu.yaml").write_text("fits: [text, image]\nmodel: {init_args: {net: {activation: squared_relu}}}\n")
    monkeypatch.setattr(training.variants, "VARIANTS_DIR", folder)
    for sweep in ("mnist_variants", "multi30k_variants"):
        text = (ROOT / "configs" / "sweeps" / f"{sweep}.yaml").read_text()
        new = sweep_of_variants(text)
        values = [yaml.safe_load(t)["parameters"]["config"]["values"] for t in (text, new)]
        assert set(values[1]) - set(values[0]) == {"configs/variants/squared_relu.yaml"} and len(values[1]) == len(values[0]) + 1
        counts = [int(re.search(r"(\d+) (?:× \d+ )?runs", t)[1]) for t in (text, new)]
        assert counts == [len(values[0]), len(values[1])], sweep
    assert readme_options_missing(readme) == ["activation: `squared_relu`"]
    assert readme_options_missing(readme.replace("\\| `geglu` |", "\\| `geglu` \\| `squared_relu` |")) == []
    assert "`activation` squared_relu;" in refusals(ct2_export.ALLOWED)
    assert "`activation` swiglu or geglu;" in refusals(marian_shape.ALLOWED)  # the Hugging Face export takes it
    assert "`activation` squared_relu;" in with_refusals(readme) and "`activation` squared_relu" not in readme

    model = random_model(activation="squared_relu")
    with pytest.raises(ExportError, match=r"activation=squared_relu \(its entry in models/activations.py names no CTranslate2"):
        export_ctranslate2(model, tmp_path / "ct2")
    out = export_huggingface(model, tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["activation_function"] == "relu2"
    assert_hf_translates_as_ours(model, out)
    assert options_from_config(json.loads((out / "config.json").read_text()))["activation"] == "squared_relu"  # and back
    assert not (tmp_path / "ct2").exists()


# Entries for what each engine runs: the one named, or refused by name; an entry naming the wrong function is refused
# by the probes (its export computes otherwise than ours).
ENTRIES = {
    "gelu_tanh": Activation(functools.partial(F.gelu, approximate="tanh"), ctranslate2="GELUTanh", marian=("gelu_pytorch_tanh",)),
    "reglu": Activation(F.relu, gated=True, ctranslate2="RELU"),  # gated (Shazeer, 2020): CTranslate2's ffn_glu
    "mislabelled": Activation(lambda x: F.relu(x).square(), ctranslate2="RELU", marian=("relu",)),
}


@pytest.mark.parametrize("name", ENTRIES)
def test_each_exporter_runs_what_an_activations_entry_names_or_refuses_it(tmp_path, monkeypatch, name):
    entry = ENTRIES[name]
    monkeypatch.setitem(ACTIVATIONS, name, entry)
    model = random_model(activation=name)
    for engine, named in (("ctranslate2", entry.ctranslate2), ("hf", entry.marian and not entry.gated)):
        out = tmp_path / engine
        if not named:
            with pytest.raises(ExportError, match=f"activation={name} \\(its entry in models/activations.py names no"):
                EXPORTS[engine](model, out)
        elif name == "mislabelled":
            with pytest.raises(ExportError, match="log-probs differ from ours"):
                EXPORTS[engine](model, out)
        else:
            ORACLES[engine](model, EXPORTS[engine](model, out))
            continue
        assert not out.exists()


def test_greedy_outputs_part_only_at_a_tie():
    """The probes' greedy check, with our own network as the oracle: an output that takes a token ours finds
    less likely is refused; where two tokens tie exactly (the same output weights and bias), either is ours."""
    model = random_model(generator_bias=True)
    probe = probes(model)
    first = probe.greedy[0][0]
    other = next(t for t in range(4, 60) if t != first)
    wrong = [list(row) for row in probe.greedy]
    wrong[0][0] = other
    with pytest.raises(ExportError, match="parts from ours at token 1"):
        check_greedy("test", model, probe, wrong)
    with torch.no_grad():  # `other` scores exactly as `first` does at every step
        model.net.generator.weight[other] = model.net.generator.weight[first]
        model.net.generator.bias[other] = model.net.generator.bias[first]
    probe = probes(model)
    tied = [list(row) for row in probe.greedy]
    tied[0][0] = other if probe.greedy[0][0] == first else first
    check_greedy("test", model, probe, tied)  # accepted
    check_greedy("test", model, probe, probe.greedy)
