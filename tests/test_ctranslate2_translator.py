"""The CTranslate2 engine translates as ours: the same outputs, n-best lists and scores at beam 4 with the default
length penalty, outputs that reach the length limit included, and every printed score is what scoring its text
gives back (`--score-reference`), in both engines.

The oracles are our own search (models/beam.py, itself checked against exhaustive search in
tests/test_beam_search.py) and teacher-forced scoring of the printed text."""

from __future__ import annotations

import random

import pytest

from datamodules.toy import TOY_PAIRS
from inference.options import DecodingOptions
from tests.helpers import biased_model, parse, run_script, save_checkpoint, sharpened_model

pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
from common.errors import InputError  # noqa: E402
from deploy.ctranslate2 import export_ctranslate2  # noqa: E402
from deploy.ctranslate2_translator import CTranslate2Translator  # noqa: E402

TOY_SOURCES = [s for s, _ in TOY_PAIRS]


def random_sources(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(60)}" for _ in range(rng.randint(1, 9))) for _ in range(n)]


def assert_same_lists(ours, theirs, abs=1e-4):
    """The same hypotheses in the same order, with the same scores. Two engines' floats differ by ~1e-6: where
    hypotheses tie within `abs` (a repeated word one place further on, say) either order is the search's."""
    assert [len(row) for row in theirs] == [len(row) for row in ours]
    ties = 0
    for mine, other in zip(ours, theirs):
        for i, (a, b) in enumerate(zip(mine, other)):
            assert b.score == pytest.approx(a.score, abs=abs) and b.tokens[-1] == a.tokens[-1]
            if b.tokens != a.tokens:
                tied = [h for j, h in enumerate(mine) if j != i and h.score == pytest.approx(a.score, abs=abs)]
                assert tied or i == len(mine) - 1, (i, a, b)  # the last one may tie with the next, not shown
                ties += 1
    assert ties <= sum(len(row) for row in ours) // 20, f"{ties} tied places"


def test_toy_model_at_beam_4_with_default_flags(tmp_path, trained_toy):
    """The shipped toy model's three sentences at --beam-size 4 and its own length penalty (1.0): CTranslate2's
    beam, stopped after beam_size finished hypotheses, ended one of them early; run to the limit and ranked by
    our penalty it gives our translations, and our n-best lists with our scores."""
    translator = CTranslate2Translator(export_ctranslate2(trained_toy, tmp_path / "ct2"), search="exact")
    assert translator.options.length_penalty == 1.0
    ours = trained_toy.translate(TOY_SOURCES, beam_size=4)
    assert ours == [t for _, t in TOY_PAIRS]
    assert translator.translate(TOY_SOURCES, beam_size=4) == ours
    for nbest in (2, 4):
        assert_same_lists(
            trained_toy.translate(TOY_SOURCES, beam_size=4, nbest=nbest),
            translator.translate(TOY_SOURCES, beam_size=4, nbest=nbest),
        )


def test_the_fast_search_keeps_the_toy_set_and_ranks_by_our_score(tmp_path, trained_toy):
    """`search="fast"`, the default: CTranslate2 ends a sentence after beam × patience finished hypotheses. At the default
    patience (1.5) the toy set is right at beam 4 (at 1 it ends "I am a boy" before it finishes); its n-best lists are
    ranked and scored by ours: each score is what teacher-forced scoring of the text gives."""
    folder = export_ctranslate2(trained_toy, tmp_path / "ct2")
    fast = CTranslate2Translator(folder)  # the default search
    assert fast.search == "fast" and fast.patience == 1.5
    assert fast.translate(TOY_SOURCES, beam_size=4) == [t for _, t in TOY_PAIRS]
    impatient = CTranslate2Translator(folder, search="fast", patience=1)
    assert impatient.translate(TOY_SOURCES, beam_size=4) != [t for _, t in TOY_PAIRS]
    alpha = trained_toy.translator.options.length_penalty
    for source, row in zip(TOY_SOURCES, fast.translate(TOY_SOURCES, beam_size=4, nbest=3)):
        assert len(row) == 3 and [h.score for h in row] == sorted((h.score for h in row), reverse=True)
        scored = trained_toy.translator.score([source] * 3, [h.text for h in row], length_penalty=alpha)
        assert [h.score for h in row] == pytest.approx([h.score for h in scored], abs=1e-4)


@pytest.mark.parametrize("max_len", [None, 4])
def test_the_fast_search_stops_each_output_at_its_sentence_s_limit(tmp_path, max_len):
    model = biased_model(pad=-30.0, bos=-30.0)
    fast = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="fast")
    sources = random_sources(40)
    limits = [max_len or int(1.5 * (len(s.split()) + 1) + 10) for s in sources]
    found = fast.translate(sources, beam_size=4, nbest=2, max_len=max_len)
    assert all(len(h.tokens) <= limit and h.tokens[-1] == fast.eos_id for row, limit in zip(found, limits) for h in row)
    assert sum(len(h.tokens) == limit for row, limit in zip(found, limits) for h in row) > 20  # <eos> forced there
    assert [row[0].text for row in found] == fast.translate(sources, beam_size=4, max_len=max_len)
    with pytest.raises(InputError, match="the search is one of fast, exact"):
        CTranslate2Translator(tmp_path / "ct2", search="greedy")


@pytest.mark.parametrize("max_len", [None, 4])
def test_random_model_over_many_sources_at_beam_4(tmp_path, max_len):
    """A random, sharpened model over 60 random sources: best outputs and 4-best lists at beam 4 with the default
    length penalty are ours, at the checkpoint's length limit and at one that most outputs reach. Its <pad> and
    <bos> are made improbable: CTranslate2's beam ranks by log-probs renormalised over the tokens it may
    generate (the module's docstring), ours by the model's own; with their mass at ~e-30 the two are the same."""
    model = biased_model(pad=-30.0, bos=-30.0)
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    sources = random_sources(60)
    flags = dict(beam_size=4, max_len=max_len)
    assert translator.translate(sources, **flags) == model.translate(sources, **flags)
    ours = model.translate(sources, nbest=4, **flags)
    assert_same_lists(ours, translator.translate(sources, nbest=4, **flags))
    assert len({h.text for row in ours for h in row}) > 25  # not one output for everything
    limits = [max_len or int(1.5 * (len(s.split()) + 1) + 10) for s in sources]  # each source's own, with its <eos>
    assert sum(len(h.tokens) == limit for row, limit in zip(ours, limits) for h in row) > 120  # <eos> forced there


# Each decoding's flags, and the --score-reference flags that rank as it does (sampling and greedy: alpha 0).
DECODINGS = [
    (("--beam-size", "4", "--nbest", "2"), ("--beam-size", "4")),
    (("--beam-size", "1"), ("--beam-size", "1")),
    (("--sampling", "--nbest", "3", "--seed", "3"), ("--beam-size", "1")),
]


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
@pytest.mark.parametrize("decoding,search", DECODINGS)
def test_a_printed_score_is_what_score_reference_gives_back(tmp_path, capsys, engine, decoding, search):
    """translate.py's printed score of each output, outputs cut at --max-len 4 among them, is the score
    `--score-reference` gives the printed text, in both engines (the oracle: teacher-forced scoring)."""
    model = sharpened_model()
    where = ["--ckpt", str(save_checkpoint(model, tmp_path / "m.ckpt"))]
    if engine == "ctranslate2":
        where = ["--engine", "ctranslate2", "--model", str(export_ctranslate2(model, tmp_path / "ct2"))]
    sources = random_sources(12, seed=1)
    code, out, err = run_script(capsys, "translate", *where, *decoding, "--max-len", "4", "--print-scores", *sources)
    assert code == 0, err
    rows = parse(out)
    assert sum(len(r[4].split()) == 4 for r in rows) >= 6  # outputs at the limit: 3 tokens and the forced <eos>
    n = len(rows) // len(sources)
    for rank in range(n):
        printed = rows[rank::n]
        (tmp_path / "ref.txt").write_text("".join(r[2] + "\n" for r in printed))
        code, scored, err = run_script(
            capsys, "translate", *where, *search, "--score-reference", str(tmp_path / "ref.txt"), *sources
        )
        assert code == 0, err
        for a, b in zip(printed, parse(scored)):
            assert a[2] == b[2] and float(a[1]) == pytest.approx(float(b[1]), abs=1e-5)


def test_options_as_one_object_and_what_is_refused(tmp_path):
    """`options=` (a whole DecodingOptions) decodes as the same keywords do; given with keywords, a forced prefix
    in beam search, alignments: one InputError line each."""
    model = sharpened_model()
    translator = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    sources = random_sources(6, seed=2)
    options = translator.options.replace(beam_size=3, nbest=2, length_penalty=0.6)
    assert_same_lists(
        translator.translate(sources, nbest=2, beam_size=3, length_penalty=0.6),
        translator.translate(sources, nbest=2, options=options),
    )
    assert translator.translate_many(sources, options=DecodingOptions(beam_size=3)) == model.translate(sources, beam_size=3)
    scored = translator.score(sources, ["w1 w2"] * 6, options=options)
    assert [h.score for h in scored] == [h.score for h in translator.score(sources, ["w1 w2"] * 6, 0.6)]
    for call, message in (
        (lambda: translator.translate(sources, options=options, beam_size=2), "not both"),
        (lambda: translator.translate(sources, beam_size=2, prefixes=["w3"] * 6), "prefix"),
        (lambda: translator.translate(sources, alignment_layer=-1), "alignments"),
        (lambda: translator.translate(sources, beam_size=2, min_len=2), "renormalises what --min-len"),
        (
            lambda: translator.translate(sources, beam_size=2, ban_unk=True, no_repeat_ngram_size=2),
            "--no-repeat-ngram-size, --ban-unk",
        ),
    ):
        with pytest.raises(InputError, match=message) as err:
            call()
        assert "\n" not in str(err.value)
