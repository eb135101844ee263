"""tasks.metrics.LanguageIdentifier against the language each Multi30k file is in, and the on-target share that
scores_by_set logs for a multilingual model's sets (a zero-shot direction's outputs in the wrong language)."""

from __future__ import annotations

import pytest

from tasks.metrics import LanguageIdentifier, on_target_percent, scores_by_set
from tests.helpers import multi30k_lines

LANGS = ("de", "en", "fr", "cs")


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier({lang: multi30k_lines(f"val.{lang}.gz", 1014) for lang in LANGS})


@pytest.mark.parametrize("lang", LANGS)
def test_each_test_sentence_is_named_in_its_own_language(identifier, lang):
    found = identifier.languages_of(multi30k_lines(f"test_2016_flickr.{lang}.gz", 1000))
    assert on_target_percent(found, lang) >= 99.5, found  # all 1,000 of each, measured


def test_an_empty_output_is_in_no_language_and_counts_off_target(identifier):
    found = identifier.languages_of(["", "   ", "Ein Hund rennt durch den Schnee."])
    assert found == {None: 2, "de": 1}
    assert on_target_percent(found, "de") == pytest.approx(100 / 3)


def test_one_language_is_refused():
    with pytest.raises(ValueError, match="at least two languages"):
        LanguageIdentifier({"en": ["A dog runs."]})


def sets_of(names: list[str], n: int = 60) -> list:
    """Multi30k's first `n` val lines as (source, reference) pairs of each direction."""
    lines = {lang: multi30k_lines(f"val.{lang}.gz", n) for lang in LANGS}
    return [(name, list(zip(lines[name[:2]], lines[name[3:]])), name != "de-fr") for name in names]


def test_a_zero_shot_direction_answering_in_english_is_off_target():
    sets = sets_of(["de-en", "en-fr", "de-fr"])
    references = [r for _, pairs, _ in sets for _, r in pairs]
    english = [r for _, r in sets[0][1]]
    hyps = references[:120] + english  # de-fr answered with the English sentences
    values, lines, _ = scores_by_set("test", sets, hyps)
    assert values["test/on_target/de-en"] == 100.0 and values["test/on_target/en-fr"] == 100.0
    assert values["test/on_target/de-fr"] <= 2.0
    assert lines[-1].startswith("test/bleu/de-fr=") and " test/on_target/de-fr=" in lines[-1]
    assert lines[-1].endswith("on 60 sentences, not in the mean")


@pytest.mark.parametrize("names", [[""], ["de-en", "fr-en", "cs-en"]])
def test_sets_into_one_language_get_no_on_target_share(names):
    sets = sets_of(["de-en"]) if names == [""] else sets_of(names)
    if names == [""]:
        sets = [("", sets[0][1], True)]
    hyps = [r for _, pairs, _ in sets for _, r in pairs]
    values, _, _ = scores_by_set("val", sets, hyps)
    assert not [key for key in values if "on_target" in key]
