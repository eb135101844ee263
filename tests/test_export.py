"""Export to CTranslate2: the exported model computes what ours computes, and decodes the same.

The oracle is our own network run in PyTorch: per-token log-probabilities of teacher-forced
targets (CTranslate2's `score_batch`) for every architecture option it can represent, then greedy
and beam outputs of a trained toy model and of a model trained briefly on real Tatoeba data."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from datamodules import ParallelCorpusDataModule
from datamodules.batching import frame_target, pad_sequences
from datamodules.toy import TOY_PAIRS
from models.config import Seq2SeqSettings
from tasks import Seq2SeqTransformer
from tests.helpers import (
    SHARED_DATA,
    biased_model,
    parse,
    quiet_trainer,
    run_script,
    save_checkpoint,
    sharpened_model,
)

ctranslate2 = pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
from common.errors import InputError  # noqa: E402
from deploy.ctranslate2 import TOKENIZERS_FILE, ExportError, export_ctranslate2, vocabulary  # noqa: E402
from deploy.ctranslate2_translator import CTranslate2Translator  # noqa: E402

SRC = ["w1 w2 w3 w4 w5", "w7 w8", "w9 w10 w11 w12 w13 w14 w15 w16", "w30"]
TGT = ["w3 w4 w5 w6", "w2 w2 w2 w2 w2 w2 w2", "w5", "w40 w41 w42"]


def our_log_probs(model, sources, targets) -> torch.Tensor:
    src = model.translator.encode_sources(sources)
    tgt = pad_sequences([frame_target(model.tgt_tokenizer.encode(t)) for t in targets], 0)
    with torch.no_grad():
        logp = model.net(src, tgt[:, :-1]).log_softmax(-1)  # (B, T, V)
    return logp.gather(-1, tgt[:, 1:, None])[..., 0]  # (B, T): the log-prob of each next target token


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"norm_first": True},
        {"activation": "gelu"},
        {"activation": "swiglu"},
        {"activation": "geglu"},
        {"norm": "rmsnorm"},
        {"bias": False},
        {"bias": False, "norm": "rmsnorm"},
        {"num_kv_heads": 2},
        {"num_kv_heads": 1},
        {"positional": "learned"},
        {"tie_embeddings": True, "share_embeddings": True},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "baseline",
)
def test_exported_model_scores_every_token_as_ours(tmp_path, options):
    model = sharpened_model(**options)
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    vocab = vocabulary(model.tgt_tokenizer)
    results = translator.translator.score_batch(
        translator.source_tokens(SRC), [[vocab[i] for i in model.tgt_tokenizer.encode(t)] for t in TGT]
    )
    ours = our_log_probs(model, SRC, TGT)
    assert ours.min() < -5  # far from uniform (log 1/64 = -4.2): the check below can fail
    for row, result in zip(ours, results):
        theirs = torch.tensor(result.log_probs)  # the target's tokens and <eos>
        torch.testing.assert_close(row[: len(theirs)], theirs, atol=2e-5, rtol=0)


def test_post_norm_final_norm_is_exported(tmp_path):
    """Our post-norm stacks end with a norm, which CTranslate2's post-norm spec lacks: with it
    disabled (gain 1, bias 0 on ours; absent in a naive export), the scores would not match."""
    model = sharpened_model()
    with torch.no_grad():
        model.net.core.decoder_norm.weight.mul_(2.0)  # a norm that matters
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    vocab = vocabulary(model.tgt_tokenizer)
    result = translator.translator.score_batch(
        translator.source_tokens(SRC[:1]), [[vocab[i] for i in model.tgt_tokenizer.encode(TGT[0])]]
    )
    torch.testing.assert_close(our_log_probs(model, SRC[:1], TGT[:1])[0], torch.tensor(result[0].log_probs), atol=2e-5, rtol=0)


def assert_same_decoding(model, translator, sentences, batch_size=16):
    """Greedy, and beam 4 without length penalty (where both searches stop alike), in the same batches."""
    for beam in (1, 4):
        ours = model.translate_many(sentences, beam_size=beam, batch_size=batch_size, length_penalty=0.0)
        theirs = translator.translate_many(sentences, beam_size=beam, batch_size=batch_size, length_penalty=0.0)
        mismatches = [(s, a, b) for s, a, b in zip(sentences, ours, theirs) if a != b]
        assert not mismatches, f"beam {beam}: {len(mismatches)} of {len(sentences)} differ, e.g. {mismatches[0]}"


def test_trained_toy_model_translates_the_same(tmp_path, trained_toy):
    translator = CTranslate2Translator(export_ctranslate2(trained_toy, tmp_path / "ct2"), search="exact")
    sources = [s for s, _ in TOY_PAIRS]
    assert translator.translate(sources) == [t for _, t in TOY_PAIRS]
    assert_same_decoding(trained_toy, translator, sources + ["我 是", "学 生 我", "是 是 是"])
    before = {k: v.clone() for k, v in trained_toy.state_dict().items()}
    int8 = CTranslate2Translator(export_ctranslate2(trained_toy, tmp_path / "int8", quantization="int8"), search="exact")
    assert int8.translate(sources) == [t for _, t in TOY_PAIRS]  # int8 weights: still the three pairs
    after = trained_toy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # quantizing the export leaves the model alone


CMN = SHARED_DATA / "cmn-eng"


@pytest.mark.slow
@pytest.mark.skipif(not (CMN / "cmn.txt").exists(), reason=f"real Tatoeba data absent: put cmn.txt in {CMN}")
def test_model_trained_on_real_data_translates_the_same(tmp_path):
    """Chinese characters in, English BPE out: a few hundred steps on Tatoeba, then 64 test sentences."""
    L.seed_everything(0)
    dm = ParallelCorpusDataModule(
        str(CMN), src_vocab_size=2000, tgt_vocab_size=2000, max_tokens=1024, download=False
    )  # fmt: skip
    model = Seq2SeqTransformer(
        tokenizers=dm.tokenizers,
        net=Seq2SeqSettings(d_model=64, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128, max_len=128),
        lr=2e-3, warmup_steps=50, bleu_every_n_epochs=0,
    )  # fmt: skip
    quiet_trainer(max_steps=300, limit_val_batches=0).fit(model, datamodule=dm)
    model.eval()
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    sentences = [s for s, _ in dm.test_pairs()[:64]]
    assert len(set(model.translate_many(sentences))) > 10  # it translates, not one string for everything
    assert_same_decoding(model, translator, sentences)


def test_options_ctranslate2_cannot_represent_are_refused(tmp_path):
    for options, name in (
        ({"positional": "rotary"}, "rotary"),
        ({"qk_norm": True}, "qk_norm"),
        ({"positional": "none"}, "positional=none"),
        ({"relative_bias": "t5"}, "relative_bias=t5"),
        ({"positional": "none", "relative_bias": "alibi"}, "positional=none"),
        ({"relative_bias": "alibi"}, "relative_bias=alibi"),
    ):
        with pytest.raises(ExportError, match=name):
            export_ctranslate2(sharpened_model(**options), tmp_path / name)
        assert not (tmp_path / name).exists()


def test_export_and_translate_scripts(tmp_path, trained_toy, script_here):
    script = script_here
    ckpt = save_checkpoint(trained_toy, tmp_path / "toy.ckpt")
    out = tmp_path / "ct2"
    result = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    sources = [s for s, _ in TOY_PAIRS]
    result = script("translate", "--engine", "ctranslate2", "--model", str(out), "--beam-size", "1", *sources)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [t for _, t in TOY_PAIRS]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "ref.txt").write_text("".join(t + "\n" for _, t in TOY_PAIRS))
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
    scored = script("evaluate", "--engine", "ctranslate2", "--model", str(out), "--compute-type", "int8", *files)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "engine: ctranslate2 (int8, fast search, patience 1.5)" in scored.stdout, scored.stdout  # the default search
    assert "SacreBLEU: 100.00" in scored.stdout  # the toy set at beam 4 (evaluate.py's default)
    exact = script("evaluate", "--engine", "ctranslate2", "--model", str(out), "--ct2-search", "exact", *files)
    assert exact.returncode == 0 and "engine: ctranslate2 (default, exact search)" in exact.stdout, exact.stdout
    assert "SacreBLEU: 100.00" in exact.stdout
    refused = script("evaluate", "--ckpt", str(ckpt), "--ct2-search", "exact", *files)
    assert refused.returncode == 2 and "they go with --engine ctranslate2" in refused.stderr

    # An existing directory is kept unless --force, and --force never replaces something else.
    again = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr
    assert script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(out), "--force").returncode == 0
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    refused = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(precious), "--force")
    assert refused.returncode == 2 and "refusing" in refused.stderr and (precious / "notes.txt").read_text() == "keep me"

    # Bad inputs: one line, exit status 2.
    rotary = save_checkpoint(sharpened_model(positional="rotary"), tmp_path / "rotary.ckpt")
    for args in (
        ("export", "--ckpt", str(rotary), "--to", "ctranslate2", str(tmp_path / "r")),
        ("export", "--ckpt", str(tmp_path / "missing.ckpt"), "--to", "ctranslate2", str(tmp_path / "m")),
        ("translate", "--engine", "ctranslate2", "--model", str(tmp_path), "hello"),
    ):
        bad = script(*args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error:"), (args, bad.stderr)


# ------------------------------------------------------------------------------------ decoding tools


def test_decoding_tools_through_ctranslate2_match_ours(tmp_path, trained_toy):
    """n-best lists, scores, prefixes, constraints and sampling through CTranslate2's own options give
    what our decoding gives (alpha 0, where both searches stop alike); the scores are ours. The
    sharpened random model's outputs run to the length limit, the toy translator's end."""
    model = sharpened_model()
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    toy = CTranslate2Translator(export_ctranslate2(trained_toy, tmp_path / "toy"), search="exact")

    def same(ours, theirs):
        assert [[h.text for h in row] for row in theirs] == [[h.text for h in row] for row in ours]
        for a, b in zip(sum(theirs, []), sum(ours, [])):
            assert a.tokens == b.tokens and a.score == pytest.approx(b.score, abs=1e-4)

    toy_sources = [s for s, _ in TOY_PAIRS] + ["我 是", "学 生 我"]
    cases = [
        (model, translator, SRC, [{"prefixes": ["w3 w4", "", "w5", "w40"]}, {"no_repeat_ngram_size": 1}, {"ban_unk": True}]),
        (
            trained_toy,
            toy,
            toy_sources,
            [{"prefixes": ["I like", "", "I am a", "a", ""]}, {"no_repeat_ngram_size": 1}, {"min_len": 6}],
        ),
    ]
    for ours, theirs, sources, tool_sets in cases:
        for tools in ({}, *tool_sets):
            same(ours.translate(sources, beam_size=1, nbest=1, **tools), theirs.translate(sources, beam_size=1, nbest=1, **tools))
        # n-best: the lists share their best and every score is ours (full lists are compared in
        # tests/test_ctranslate2_translator.py, on a model whose <pad>/<bos> mass cannot reorder them).
        mine = ours.translate(sources, beam_size=4, nbest=3, length_penalty=0.0)
        lists = theirs.translate(sources, beam_size=4, nbest=3, length_penalty=0.0)
        same([row[:1] for row in mine], [row[:1] for row in lists])
        for source, row in zip(sources, lists):
            assert len(row) == 3 and [h.score for h in row] == sorted((h.score for h in row), reverse=True)
            finished = [h for h in row if h.tokens[-1] == 2]
            for h, scored in zip(finished, ours.translator.score([source] * len(finished), [h.text for h in finished], 0.0)):
                assert h.score == pytest.approx(scored.score, abs=1e-4)
    assert all(len(t.split()) >= 6 for t in toy.translate(toy_sources, min_len=6))  # the constraint is active
    scored = translator.score(SRC, TGT, 0.5)
    for a, b in zip(scored, model.translator.score(SRC, TGT, 0.5)):
        assert a.tokens == b.tokens and a.score == pytest.approx(b.score, abs=1e-4)
    greedy = model.translate(SRC, beam_size=1)
    assert translator.translate(SRC, sampling=True, top_k=1, seed=0) == greedy
    samples = translator.translate(SRC, nbest=3, sampling=True, temperature=2.0, seed=1)
    again = CTranslate2Translator(tmp_path / "ct2", search="exact").translate(
        SRC, nbest=3, sampling=True, temperature=2.0, seed=1
    )
    assert [[h.tokens for h in row] for row in again] == [[h.tokens for h in row] for row in samples]  # seeded
    assert len({h.text for row in samples for h in row}) > 4
    with pytest.raises(InputError, match="alignments"):
        translator.translate(SRC, alignment_layer=-1)
    with pytest.raises(InputError, match="larger than beam_size"):
        translator.translate(SRC, beam_size=2, nbest=3)


MORE_SRC = [*SRC, "w20 w21 w22", "w50 w51", "w33 w34 w35 w36", "w12", "w44 w45 w46 w47 w48"]


def test_a_model_that_ends_at_once_translates_alike_through_ctranslate2(tmp_path):
    """Some of the model's best outputs are empty (`<eos>` first): CTranslate2, told our minimum length (0),
    gives them too, where its own default (1) would make it write a token first."""
    model = biased_model(eos=7.0)
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    ours = model.translate(MORE_SRC)
    assert 0 < ours.count("") < len(ours)  # some end at once, some do not
    assert translator.translate(MORE_SRC) == ours
    assert translator.translate(MORE_SRC, beam_size=3, length_penalty=0.0) == model.translate(
        MORE_SRC, beam_size=3, length_penalty=0.0
    )


def test_no_hypothesis_holds_pad_or_bos_in_either_engine(tmp_path):
    """A model whose likeliest tokens are <pad> and <bos>: no hypothesis of an n-best list, a sample or a
    greedy output holds either, through our decoder or CTranslate2."""
    model = biased_model(pad=12.0, bos=12.0)
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    src = model.translator.encode_sources(MORE_SRC)
    with torch.no_grad():
        memory, src_pad = model.net.encode(src)
        first = model.net.decode(torch.full((len(MORE_SRC), 1), model.bos_id), memory, src_pad)[:, -1].argmax(-1)
    specials = {model.pad_id, model.bos_id}
    assert set(first.tolist()) <= specials  # unbanned, every output would start with one
    for engine in (model, translator):
        lists = engine.translate(MORE_SRC, beam_size=4, nbest=4, length_penalty=0.0)
        lists += engine.translate(MORE_SRC, nbest=4, sampling=True, seed=0)
        lists += engine.translate(MORE_SRC, nbest=1, min_len=2)
        tokens = [h.tokens for row in lists for h in row]
        assert len(tokens) == 9 * len(MORE_SRC) and all(tokens)
        assert not [t for t in tokens if specials & set(t)], engine


def test_an_export_carries_the_decoding_defaults_and_reads_older_exports(tmp_path):
    """The export's metadata holds the model's decoding defaults as a plain dict, which the CTranslate2 translator
    takes as its options; an export written before that (the defaults at the top level) reads the same."""
    model = sharpened_model(decoding=dict(length_penalty=0.3, max_len_a=0.5, max_len_b=3))
    out = export_ctranslate2(model, tmp_path / "ct2")
    meta = json.loads((out / TOKENIZERS_FILE).read_text())
    assert meta["decoding"] == {"length_penalty": 0.3, "max_len_a": 0.5, "max_len_b": 3}
    assert CTranslate2Translator(out, search="exact").options == model.translator.options
    (out / TOKENIZERS_FILE).write_text(json.dumps({k: v for k, v in meta.items() if k != "decoding"} | meta["decoding"]))
    older = CTranslate2Translator(out, search="exact")
    assert older.options == model.translator.options
    assert older.translate(SRC) == model.translate(SRC)
    assert all(len(t.split()) <= int(0.5 * 9 + 3) for t in older.translate(SRC))  # max_len_a × source + max_len_b


def test_translate_script_nbest_format_is_the_same_on_ctranslate2(tmp_path, trained_toy, capsys):
    ckpt = str(save_checkpoint(trained_toy, tmp_path / "toy.ckpt"))
    out = str(export_ctranslate2(trained_toy, tmp_path / "ct2"))
    sources = [s for s, _ in TOY_PAIRS]
    argv = ["--beam-size", "2", "--nbest", "2", "--length-penalty", "0", "--print-scores", *sources]
    code, ours, err = run_script(capsys, "translate", "--ckpt", ckpt, *argv)
    assert code == 0, err
    code, theirs, err = run_script(capsys, "translate", "--engine", "ctranslate2", "--model", out, "--ct2-search", "exact", *argv)
    assert code == 0, err
    assert [r[:1] + r[2:3] for r in parse(theirs)] == [r[:1] + r[2:3] for r in parse(ours)]
    for a, b in zip(parse(theirs), parse(ours)):
        assert float(a[1]) == pytest.approx(float(b[1]), abs=1e-4) and len(a) == len(b) == 5
    for extra, message in ((["--print-alignment"], "alignments"), (["--ckpt", ckpt, ckpt], "one model")):
        code, text, err = run_script(capsys, "translate", "--engine", "ctranslate2", "--model", out, *extra, *sources)
        assert code == 2 and text == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_export_makes_missing_parent_folders(tmp_path, script_here):
    """The README's `export.py ... exported/multi30k` on a fresh clone: the folders are made as `mkdir -p`
    makes them, and the export in them translates as our model does; a regular file in the way is one line."""
    script = script_here
    model = sharpened_model()
    ckpt = save_checkpoint(model, tmp_path / "model.ckpt")
    out = tmp_path / "exported" / "deeper" / "toy"
    result = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert CTranslate2Translator(out, search="exact").translate(SRC) == model.translate(SRC)
    (tmp_path / "a-file").write_text("not a folder\n")
    blocked = script("export", "--ckpt", str(ckpt), "--to", "ctranslate2", str(tmp_path / "a-file" / "sub" / "toy"))
    assert blocked.returncode == 1 and blocked.stderr.count("\n") == 1 and "cannot write" in blocked.stderr, blocked.stderr
