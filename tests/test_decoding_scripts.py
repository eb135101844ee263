"""The decoding tools through `Seq2SeqTransformer.translate`/`score` and scripts/translate.py and
scripts/evaluate.py: n-best lists and their format, scoring given translations (the oracle of every
score), forced prefixes, sampling, ensembles, alignments, and one line and exit status 2 for bad
input, with nothing written. The models are the toy translator trained for a few epochs (seconds)."""

from __future__ import annotations

import copy
import re

import lightning as L
import pytest
import torch

from datamodules import ToyTranslationDataModule
from datamodules.toy import TOY_PAIRS
from datamodules.vocab import EOS, Vocab
from models.decoding import length_penalty_factor
from tasks import Seq2SeqTransformer
from tests.helpers import TOY_MODEL, parse, quiet_trainer, run_script, save_checkpoint

SOURCES = [s for s, _ in TOY_PAIRS]
# Sentences the two toy models translate differently (unseen combinations): an ensemble's outputs differ from either's.
DISPUTED = [*SOURCES, "我 是", "男 生 学 习"]


def _train(root, seed: int, epochs: int) -> tuple[Seq2SeqTransformer, str]:
    L.seed_everything(seed)
    dm = ToyTranslationDataModule(batch_size=3, repeats=16)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, bleu_every_n_epochs=0, **TOY_MODEL)
    quiet_trainer(root, max_epochs=epochs, gradient_clip_val=1.0).fit(model, datamodule=dm)
    return model.eval(), str(save_checkpoint(model, root / f"toy{seed}.ckpt"))


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    """Two toy translators: one trained well, one for a few epochs only (flatter, so n-best lists and samples vary)."""
    root = tmp_path_factory.mktemp("toys")
    return _train(root, 0, 12), _train(root, 1, 4)


# ----------------------------------------------------------------------------------- n-best, scoring


def test_nbest_lines_are_ranked_and_scored_as_the_module_does(toys, capsys):
    (_, ckpt), (weak, weak_ckpt) = toys
    code, out, err = run_script(
        capsys, "translate", "--ckpt", weak_ckpt, "--beam-size", "3", "--nbest", "3", "--print-scores", *SOURCES
    )
    assert code == 0, err
    rows = parse(out)
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    expected = weak.translate(SOURCES, beam_size=3, nbest=3)
    alpha = weak.hparams.length_penalty
    for r, h in zip(rows, [h for row in expected for h in row]):
        index, score, text, raw, tokens = r
        assert text == h.text and float(score) == pytest.approx(h.score, abs=1e-6)
        values = [float(x) for x in tokens.split()]
        assert float(raw) == pytest.approx(sum(values), abs=1e-5)
        assert float(score) == pytest.approx(float(raw) / length_penalty_factor(len(values), alpha), abs=1e-5)
    for i in range(3):
        scores = [float(r[1]) for r in rows[3 * i : 3 * i + 3]]
        assert scores == sorted(scores, reverse=True) and len({r[2] for r in rows[3 * i : 3 * i + 3]}) == 3


@pytest.mark.parametrize("beam_size", ["1", "3"])
def test_scoring_the_1best_gives_its_nbest_score_back(toys, capsys, tmp_path, beam_size):
    (_, ckpt), _ = toys
    code, out, err = run_script(capsys, "translate", "--ckpt", ckpt, "--beam-size", beam_size, "--nbest", "1", *SOURCES)
    assert code == 0, err
    best = parse(out)
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(r[2] + "\n" for r in best), encoding="utf-8")
    code, out, err = run_script(
        capsys, "translate", "--ckpt", ckpt, "--beam-size", beam_size, "--score-reference", str(ref), *SOURCES
    )
    assert code == 0, err
    scored = parse(out)
    assert [r[2] for r in scored] == [r[2] for r in best]
    for a, b in zip(scored, best):
        assert float(a[1]) == pytest.approx(float(b[1]), abs=1e-4)


def test_forced_prefixes_start_the_outputs_and_score_as_references(toys, capsys, tmp_path):
    _, (weak, weak_ckpt) = toys
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("I like\n\nI am a\n", encoding="utf-8")
    code, out, err = run_script(
        capsys, "translate", "--ckpt", weak_ckpt, "--beam-size", "2", "--nbest", "2", "--prefix-file", str(prefixes), *SOURCES
    )
    assert code == 0, err
    rows = parse(out)
    assert all(r[2].startswith("I like") for r in rows[:2]) and all(r[2].startswith("I am a") for r in rows[4:])
    assert not weak.translate(SOURCES[:1], beam_size=2)[0].startswith("I like")  # the prefix changed the output
    scored = weak.translator.score(
        [SOURCES[int(r[0])] for r in rows], [r[2] for r in rows], weak.translator.options.replace(beam_size=2).ranking_alpha
    )
    for r, h in zip(rows, scored):
        assert float(r[1]) == pytest.approx(h.score, abs=1e-4)


def test_sampling_is_seeded_and_top_k_one_is_greedy(toys, capsys):
    _, (weak, weak_ckpt) = toys
    argv = ["translate", "--ckpt", weak_ckpt, "--sampling", "--nbest", "4", "--seed", "3", "--temperature", "1.5", *SOURCES]
    code, first, err = run_script(capsys, *argv)
    assert code == 0, err
    assert run_script(capsys, *argv)[1] == first
    rows = parse(first)
    assert len(rows) == 12 and len({r[2] for r in rows}) > 3  # samples differ
    hyps = [h for row in weak.translate(SOURCES, nbest=4, sampling=True, seed=3, temperature=1.5) for h in row]
    assert [r[2] for r in rows] == [h.text for h in hyps]
    finished = [(r, h) for r, h in zip(rows, hyps) if h.tokens[-1] == EOS]
    assert len(finished) > 6
    scored = weak.translator.score([SOURCES[int(r[0])] for r, _ in finished], [r[2] for r, _ in finished])
    for (r, _), h in zip(finished, scored):
        assert float(r[1]) == pytest.approx(h.score, abs=1e-4)  # the model's own log-prob, at temperature 1
    code, out, err = run_script(capsys, "translate", "--ckpt", weak_ckpt, "--sampling", "--sampling-topk", "1", *SOURCES)
    assert code == 0, err
    assert out.splitlines() == weak.translate(SOURCES, beam_size=1)


def test_constraints_through_the_script(toys, capsys, tmp_path):
    """Each constraint changes what the model writes: without its flag the outputs break it, with it none does."""
    _, (weak, weak_ckpt) = toys

    def lines(ckpt, *flags):
        code, out, err = run_script(capsys, "translate", "--ckpt", ckpt, "--beam-size", "2", *flags, *SOURCES)
        assert code == 0, err
        return [line.split() for line in out.splitlines()]

    def repeats_a_bigram(words):
        return len(set(zip(words, words[1:]))) < len(words) - 1

    # --min-len: the outputs are shorter than 5 tokens without it; --min-len 5 makes them repeat bigrams instead.
    assert all(len(words) < 5 for words in lines(weak_ckpt))
    long = lines(weak_ckpt, "--min-len", "5")
    assert all(len(words) >= 5 for words in long) and any(repeats_a_bigram(words) for words in long)
    # --no-repeat-ngram-size 2: the same minimum length without a repeated bigram.
    assert not any(repeats_a_bigram(words) for words in lines(weak_ckpt, "--min-len", "5", "--no-repeat-ngram-size", "2"))
    # --ban-unk: a model whose <unk> takes the logits of "student" writes it; banned, it writes "student" again.
    fond_of_unk, tokenizer = copy.deepcopy(weak), weak.tgt_tokenizer
    with torch.no_grad():
        rows = fond_of_unk.net.generator.weight
        rows[tokenizer.unk_id] = 2 * rows[tokenizer.encode("student")[0]]
    unk_ckpt = str(save_checkpoint(fond_of_unk, tmp_path / "unk.ckpt"))
    assert any("<unk>" in words for words in lines(unk_ckpt))
    assert not any("<unk>" in words for words in lines(unk_ckpt, "--ban-unk"))
    assert lines(unk_ckpt, "--ban-unk") == lines(weak_ckpt)


# ---------------------------------------------------------------------------------- ensembles, alignment


def test_an_ensemble_of_two_copies_is_the_model_and_of_two_models_their_average(toys, capsys):
    (strong, ckpt), (weak, weak_ckpt) = toys
    code, alone, err = run_script(capsys, "translate", "--ckpt", ckpt, "--beam-size", "2", "--nbest", "2", *SOURCES)
    assert code == 0, err
    code, twice, err = run_script(capsys, "translate", "--ckpt", ckpt, ckpt, "--beam-size", "2", "--nbest", "2", *SOURCES)
    assert code == 0, err
    assert [r[2] for r in parse(twice)] == [r[2] for r in parse(alone)]
    assert [float(r[1]) for r in parse(twice)] == pytest.approx([float(r[1]) for r in parse(alone)], abs=1e-5)
    code, both, err = run_script(capsys, "translate", "--ckpt", ckpt, weak_ckpt, "--beam-size", "2", *DISPUTED)
    assert code == 0, err
    assert both.splitlines() == strong.translate(DISPUTED, beam_size=2, ensemble=[weak])
    assert both.splitlines() != strong.translate(DISPUTED, beam_size=2)  # the weaker model changed some outputs


def test_alignments_pair_every_target_token_with_a_source_token(toys, capsys, tmp_path):
    (strong, ckpt), _ = toys
    code, out, err = run_script(capsys, "translate", "--ckpt", ckpt, "--print-alignment", "--alignment-layer", "0", *SOURCES)
    assert code == 0, err
    for r in parse(out):
        pairs = [tuple(map(int, p.split("-"))) for p in r[3].split()]
        assert re.fullmatch(r"(\d+-\d+ ?)+", r[3])
        assert [j for _, j in pairs] == list(range(len(r[2].split())))  # a word vocabulary: one token per word
        assert all(0 <= i < len(SOURCES[int(r[0])].split()) for i, _ in pairs)
        # The oracle: the argmax of the module's own attention map (greedy output, layer 0, heads averaged).
        weights, _, _ = strong.translator.attention_weights(SOURCES[int(r[0])], layer=0)
        assert [i for i, _ in pairs] == weights[: len(pairs), :-1].argmax(-1).tolist()
    # Forced alignment: scoring the outputs as references aligns them the same way.
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(r[2] + "\n" for r in parse(out)), encoding="utf-8")
    code, forced, err = run_script(
        capsys,
        "translate",
        "--ckpt",
        ckpt,
        "--print-alignment",
        "--alignment-layer",
        "0",
        "--score-reference",
        str(ref),
        *SOURCES,
    )
    assert code == 0, err
    assert [r[3] for r in parse(forced)] == [r[3] for r in parse(out)]


def test_evaluate_takes_an_ensemble_and_the_constraints(toys, capsys, tmp_path):
    (strong, ckpt), (weak, weak_ckpt) = toys
    src, ref, hyp = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt"
    src.write_text("".join(s + "\n" for s in DISPUTED), encoding="utf-8")
    ref.write_text("".join(t + "\n" for t in [*(t for _, t in TOY_PAIRS), "I am", "a boy learning"]), encoding="utf-8")
    argv = ["--src", str(src), "--ref", str(ref), "--beam-size", "2", "--no-repeat-ngram-size", "2", "--hyp-out", str(hyp)]
    code, out, err = run_script(capsys, "evaluate", "--ckpt", ckpt, weak_ckpt, *argv)
    assert code == 0, err
    assert "ensemble of 2" in out
    expected = strong.translate(DISPUTED, beam_size=2, ensemble=[weak], no_repeat_ngram_size=2)
    assert hyp.read_text(encoding="utf-8").splitlines() == expected
    assert expected != strong.translate(DISPUTED, beam_size=2, no_repeat_ngram_size=2)  # not the stronger model alone


# ------------------------------------------------------------------------------------------ bad input


def test_bad_decoding_input_is_one_line_and_status_2_with_nothing_written(toys, capsys, tmp_path):
    (strong, ckpt), _ = toys
    other = Seq2SeqTransformer(
        tokenizers={"src": strong.hparams.tokenizers["src"], "tgt": Vocab(["a", "b"], "word").to_dict()}, **TOY_MODEL
    )
    other_ckpt = str(save_checkpoint(other, tmp_path / "other.ckpt"))
    two_lines = tmp_path / "two.txt"
    two_lines.write_text("I\nI am\n", encoding="utf-8")
    cases = [
        (["--beam-size", "2", "--nbest", "3"], "larger than --beam-size"),
        (["--sampling", "--sampling-topp", "0"], "(0, 1]"),
        (["--sampling", "--sampling-topp", "1.5"], "(0, 1]"),
        (["--sampling-topk", "3"], "--sampling only"),
        (["--prefix-file", str(two_lines)], "2 lines for 3 inputs"),
        (["--score-reference", str(two_lines)], "2 lines for 3 inputs"),
        (["--score-reference", str(tmp_path / "none.txt")], "not found"),
        (["--ckpt", ckpt, other_ckpt], "another target vocabulary"),
        (["--print-alignment", "--alignment-layer", "99"], "alignment layer 99 is out of range"),
        (["--print-alignment", "--alignment-layer", "-3"], "2 decoder layers"),
        (["--score-reference", str(tmp_path / "three.txt"), "--print-alignment", "--alignment-layer", "2"], "out of range"),
        (["--length-penalty", "-1"], "--length-penalty"),
        (["--length-penalty", "nan"], "--length-penalty"),
        (["--sampling", "--temperature", "inf"], "--temperature"),
    ]
    (tmp_path / "three.txt").write_text("I\nI am\nI like\n", encoding="utf-8")
    for extra, message in cases:
        argv = ["--ckpt", ckpt, *extra] if extra[0] != "--ckpt" else extra
        code, out, err = run_script(capsys, "translate", *argv, *SOURCES)
        assert code == 2 and out == "", (extra, out)
        assert message in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
