"""Marian (OPUS-MT) checkpoints in our core, against `transformers.MarianMTModel` itself.

Real OPUS-MT weights cannot be downloaded here, so each test builds a randomly initialised Marian model from a
config (shared and separate vocabularies, tied and untied output layers, several widths, depths, heads and
activations), with SentencePiece models trained in the test, saves it as `save_pretrained` does, imports it
with `Seq2SeqTransformer.from_pretrained`, and compares: logits (fp32, to 1e-4), greedy and beam outputs with
`generate`'s under the same settings, token ids with `MarianTokenizer`'s.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from common.checkpoints import load_checkpoint, read_checkpoint
from datamodules.batching import frame_source
from models.beam import beam_search
from models.decoding import greedy_decode
from tasks import Seq2SeqTransformer
from tests.helpers import (
    ENV,
    MARIAN_CONFIGS,
    MARIAN_SOURCES,
    ROOT,
    SHARED_DATA,
    assert_same_rows,
    fit,
    make_marian,
    marian_generate,
    multi30k_lines,
    script,
    train_spm,
)

transformers = pytest.importorskip("transformers", reason="pip install -e '.[bench]'")

MULTI30K = SHARED_DATA / "multi30k"


@pytest.fixture(scope="module")
def spm_models() -> tuple[bytes, bytes]:
    return train_spm(multi30k_lines("train.de.gz", 400), 60), train_spm(multi30k_lines("train.en.gz", 400), 60)


# Two regimes, by the bias on </s>: "to-the-limit" (0) = no hypothesis ends before the limit (both searches
# force </s> as the 40th token, with its log-prob: `forced_eos`); "ends" (MARIAN_CONFIGS' bias) = every output
# ends with </s> before it. In between the two differ by design: the step before the limit, ours keeps only the
# unfinished hypotheses among the K best (models/beam.py), generate the K best unfinished. Each test checks its
# regime holds.
REGIMES = ("to-the-limit", "ends")


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("name", MARIAN_CONFIGS)
def test_logits_and_decoding_match_marian(tmp_path, spm_models, name, regime) -> None:
    hf, tok = make_marian(
        tmp_path / "marian", spm_models, name, eos_bias=0.0 if regime == "to-the-limit" else MARIAN_CONFIGS[name][2]
    )
    ours = Seq2SeqTransformer.from_pretrained(str(tmp_path / "marian"))
    pad = hf.config.pad_token_id
    assert (ours.pad_id, ours.bos_id, ours.eos_id) == (pad, pad, 0)

    # Token ids: MarianTokenizer's, </s> appended to the source, on both sides.
    batch = tok(MARIAN_SOURCES, return_tensors="pt", padding=True)
    src = ours.translator.encode_sources(MARIAN_SOURCES)
    assert torch.equal(src, batch["input_ids"])
    targets = multi30k_lines("train.en.gz", 5)
    theirs = tok(text_target=targets)["input_ids"]
    assert [frame_source(ours.tgt_tokenizer.encode(t), None, ours.eos_id) for t in targets] == theirs

    # Logits under teacher forcing, fp32: the decoder starts from <pad>.
    tgt = torch.randint(0, pad, (len(MARIAN_SOURCES), 9))
    tgt[:, 0] = pad
    with torch.no_grad():
        want = hf(**batch, decoder_input_ids=tgt).logits
        got = ours.net(src, tgt)
    diff = (got - want).abs().max().item()
    print(f"{name}: max |logit difference| {diff:.2e} (logits up to {want.abs().max().item():.1f})")
    assert diff < 1e-4

    # Greedy and beam search: the same ids as generate's (which bans <pad>, as every search of ours does, asked or
    # not), no length normalisation for beams.
    greedy = greedy_decode(ours.net, src, ours.bos_id, ours.eos_id, 40)
    assert_same_rows(greedy, marian_generate(hf, batch, pad, num_beams=1), pad)
    for beams in (2, 5):
        beam = beam_search(
            ours.net,
            src,
            ours.bos_id,
            ours.eos_id,
            40,
            beam_size=beams,
            length_penalty=0.0,
        )
        ended = torch.tensor([row.index(ours.eos_id, 1) < 40 for row in beam.tolist()])  # before the limit
        assert ended.all() if regime == "ends" else not ended.any(), f"not the {regime} regime: {ended.tolist()}"
        assert_same_rows(beam, marian_generate(hf, batch, pad, num_beams=beams, length_penalty=0.0), pad)
    # translate() decodes with the same search and gives the tokenizer's text of it.
    assert ours.translate(MARIAN_SOURCES, max_len=40) == [ours.tgt_tokenizer.decode(row[1:].tolist()) for row in greedy]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory, spm_models) -> Path:
    folder = tmp_path_factory.mktemp("pretrained") / "opus-mt-random"
    make_marian(folder, spm_models, "shared-tied-swish", eos_bias=2.0)
    return folder


def test_import_script_writes_a_checkpoint_the_scripts_take(tmp_path, marian_dir, script_here) -> None:
    script = script_here
    ckpt = tmp_path / "model.ckpt"
    done = script("import_pretrained", str(marian_dir), "--out", str(ckpt), "--length-penalty", "0")
    assert done.returncode == 0, done.stderr
    model = load_checkpoint(Seq2SeqTransformer, ckpt).eval()
    direct = Seq2SeqTransformer.from_pretrained(str(marian_dir))
    for name, value in direct.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    want = direct.translate(MARIAN_SOURCES[:3], beam_size=3, length_penalty=0.0)
    done = script("translate", "--ckpt", str(ckpt), "--beam-size", "3", *MARIAN_SOURCES[:3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == want
    # evaluate.py scores the same translations; export.py writes a CTranslate2 model of it.
    (tmp_path / "src.de").write_text("".join(f"{line}\n" for line in MARIAN_SOURCES[:3]), encoding="utf-8")
    (tmp_path / "ref.en").write_text("".join(f"{line}\n" for line in want), encoding="utf-8")
    hyp = tmp_path / "hyp.en"
    args = ["--src", str(tmp_path / "src.de"), "--ref", str(tmp_path / "ref.en"), "--hyp-out", str(hyp)]
    done = script("evaluate", "--ckpt", str(ckpt), "--beam-size", "3", *args)
    assert done.returncode == 0, done.stderr
    assert hyp.read_text(encoding="utf-8").splitlines() == want
    if importlib.util.find_spec("ctranslate2") is not None:
        done = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(tmp_path / "ct2"))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "ct2" / "model.bin").is_file()


@pytest.mark.parametrize("problem", ["unknown hub name", "missing file", "not marian", "out exists"])
def test_import_bad_input_is_one_line_and_writes_nothing(tmp_path, marian_dir, problem) -> None:
    out = tmp_path / "model.ckpt"
    source, env = str(marian_dir), {**ENV, "HF_HUB_OFFLINE": "1"}
    if problem == "unknown hub name":
        source = "Helsinki-NLP/opus-mt-xx-yy"
    elif problem in ("missing file", "not marian"):
        folder = tmp_path / "copy"
        shutil.copytree(marian_dir, folder)
        if problem == "missing file":
            (folder / "target.spm").unlink()
        else:
            config = json.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json.dumps({**config, "model_type": "bart"}))
        source = str(folder)
    else:
        out.write_bytes(b"earlier")
    done = script("import_pretrained", source, "--out", str(out), env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    expected = {
        "unknown hub name": "opus-mt-xx-yy",
        "missing file": "target.spm missing",
        "not marian": "model_type='bart'",
        "out exists": "--force",
    }[problem]
    assert expected in lines[0]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "copy")
    assert left == (["model.ckpt"] if problem == "out exists" else []), left
    if problem == "out exists":
        assert out.read_bytes() == b"earlier"


def test_import_names_the_vocabulary_whose_padding_id_or_size_disagrees(tmp_path, spm_models, script_here) -> None:
    script = script_here
    folder = tmp_path / "separate"
    make_marian(folder, spm_models, "separate-untied-gelu")
    pad = json.loads((folder / "config.json").read_text())["pad_token_id"]

    def refused(name: str, vocab: dict) -> str:
        bad = tmp_path / f"bad-{len(list(tmp_path.glob('bad-*')))}"
        shutil.copytree(folder, bad)
        (bad / name).write_text(json.dumps(vocab))
        done = script("import_pretrained", str(bad), "--out", str(tmp_path / "model.ckpt"))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        assert not (tmp_path / "model.ckpt").exists()
        return lines[0]

    for name in ("vocab.json", "target_vocab.json"):
        vocab = json.loads((folder / name).read_text())
        fifth = next(piece for piece, i in vocab.items() if i == 5)
        vocab[fifth], vocab["<pad>"] = pad, 5  # <pad> moved to id 5 on this side only
        assert refused(name, vocab).endswith(f"{name} puts <pad> at 5, config.json's pad_token_id is {pad}")
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab.pop(next(piece for piece, i in vocab.items() if i == 5))
    line = refused("vocab.json", vocab)
    assert f"vocab.json has {pad:,} entries and target_vocab.json {pad + 1:,}" in line and "differ in size" in line


def test_a_translator_reads_a_marian_folder_as_the_task_imports_it(marian_dir) -> None:
    """`Translator.from_pretrained` builds the network without the LightningModule: the same settings, weights and
    outputs as `Seq2SeqTransformer.from_pretrained`."""
    from inference import Translator

    module = Seq2SeqTransformer.from_pretrained(str(marian_dir))
    translator = Translator.from_pretrained(marian_dir)
    assert translator.net.config == module.net.config
    assert all(torch.equal(a, b) for a, b in zip(translator.net.state_dict().values(), module.net.state_dict().values()))
    for beams in (1, 3):
        want = module.translate(MARIAN_SOURCES, beam_size=beams, length_penalty=0.0, max_len=30)
        assert translator.translate(MARIAN_SOURCES, beam_size=beams, length_penalty=0.0, max_len=30) == want


def test_imported_model_exported_to_ctranslate2_decodes_greedy_identically(tmp_path, marian_dir) -> None:
    pytest.importorskip("ctranslate2")
    from deploy.ctranslate2 import export_ctranslate2
    from deploy.ctranslate2_translator import CTranslate2Translator

    model = Seq2SeqTransformer.from_pretrained(str(marian_dir))
    out = export_ctranslate2(model, tmp_path / "ct2")
    translator = CTranslate2Translator(out, search="exact")
    src = model.translator.encode_sources(MARIAN_SOURCES)
    ours = greedy_decode(model.net, src, model.bos_id, model.eos_id, 30)
    theirs = translator.translate_ids(translator.source_tokens(MARIAN_SOURCES), beam_size=1, max_len=30)
    assert [row[1:].tolist()[: len(ids)] for row, ids in zip(ours, theirs)] == theirs
    assert all(ids[-1] == model.eos_id or len(ids) == 30 for ids in theirs)
    assert translator.translate(MARIAN_SOURCES, max_len=30) == model.translate(MARIAN_SOURCES, max_len=30)


@pytest.mark.slow
def test_finetune_recipe_runs_on_an_imported_model(tmp_path, marian_dir) -> None:
    """configs/opus_mt_finetune.yaml as written, a few steps on Multi30k, from a random Marian model of another size
    imported by scripts/import_pretrained.py: its tokenizers encode the corpus, its weights start the fit."""
    ckpt = tmp_path / "imported.ckpt"
    assert script("import_pretrained", str(marian_dir), "--out", str(ckpt)).returncode == 0
    imported = load_checkpoint(Seq2SeqTransformer, ckpt)
    sizes = {
        k: imported.hparams.net[k]
        for k in ("d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "max_len")
    }
    args = ["--config", str(ROOT / "configs" / "opus_mt_finetune.yaml"), "--data.init_args.data_dir", str(MULTI30K)]
    args += ["--data.init_args.tokenizers_from", str(ckpt), "--model.init_args.init_weights", str(ckpt)]
    args += [arg for k, v in sizes.items() for arg in (f"--model.init_args.net.{k}", str(v))]
    args += ["--trainer.max_steps", "3", "--trainer.limit_val_batches", "1", "--trainer.logger", "CSVLogger"]
    args += ["--model.init_args.bleu_val_sentences", "4", "--model.init_args.warmup_steps", "0", "--test", "false"]
    args += ["--model.init_args.lr", "0.01", "--trainer.accelerator", "cpu"]
    result = fit(tmp_path / "run", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"weights from {ckpt}" in result.stdout + result.stderr
    last = next((tmp_path / "run").rglob("last.ckpt"))
    tuned = load_checkpoint(Seq2SeqTransformer, last)
    assert tuned.hparams.tokenizers == imported.hparams.tokenizers
    assert read_checkpoint(last)["global_step"] == 3
    # It started from the imported weights and trained: close to them, not equal (a random start is far).
    start, end = imported.net.generator.bias, tuned.net.generator.bias
    assert 0 < (end - start).abs().max() < 0.2 < (start - torch.zeros_like(start)).abs().max()
