"""The target languages of a multilingual model, and the tag that asks for one.

A multilingual model (OPUS-MT's `opus-mt-en-ROMANCE`, say) is told which language to write by a token at the
start of the source, `>>fr<<`, one id of its source vocabulary. Its languages are those tokens, read from the
tokenizer itself: the checkpoint, an imported Marian folder and either export (deploy/) carry the tokenizer,
so each knows the languages with no list of its own to fall out of step. A vocabulary without such tokens is
a bilingual model's. Both engines (inference.Translator, deploy.ctranslate2_translator) put the tag's id before
each sentence's own ids (`source_tag`), so no tokenizer ever splits it, and refuse a language the model lacks,
a multilingual model's missing one and a bilingual model's given one, each in one `InputError` line. A sentence
whose text already starts with a tag (OPUS-MT's own usage, and how the multilingual data module and
`scripts/evaluate.py --pair` write their sources: datamodules/languages.py) keeps it and needs no `tgt_lang`.
"""

from __future__ import annotations

import re

from common.errors import InputError
from datamodules.languages import target_tag as tag  # one spelling of the tag, the data module's

_TAG = re.compile(r"^>>(\S+)<<$")


def tokens_of(tokenizer) -> list[str]:
    """The token string of every id, in id order, for each of our tokenizers."""
    inner = getattr(tokenizer, "tokenizer", None)  # a SubwordTokenizer's Hugging Face tokenizer
    if inner is not None:
        return [inner.id_to_token(i) for i in range(len(tokenizer))]
    return list(tokenizer.tokens)


def target_languages(tokenizer) -> dict[str, int]:
    """A source tokenizer's target languages, each with its tag's id, in id order: {} for a bilingual model."""
    return {m.group(1): i for i, token in enumerate(tokens_of(tokenizer)) if token and (m := _TAG.match(token))}


def with_target_tag(languages: dict[str, int], tgt_lang: str | None, sentence: str, ids: list[int], index: int = 0) -> list[int]:
    """A source sentence's own ids (`ids` of the text `sentence`, number `index`) after `tgt_lang`'s tag for a
    multilingual model (`languages`: `target_languages`). Ids that already start with a tag, typed into the text,
    are kept as they are; a `tgt_lang` that asks for another language than that tag, or a typed tag the model
    does not know (which its tokenizer would split into pieces), is one `InputError` line."""
    typed = next((lang for lang, i in languages.items() if ids and ids[0] == i), None)
    if typed is None:
        first = sentence.split(maxsplit=1)[0] if sentence.strip() else ""
        if languages and (unknown := _TAG.match(first)):
            raise InputError(
                f"sentence {index} starts with {first}: no target language {unknown.group(1)!r} in this model, "
                f"which knows {', '.join(languages)}"
            )
        return source_tag(languages, tgt_lang) + ids
    if tgt_lang not in (None, typed):
        raise InputError(f"sentence {index} starts with {tag(typed)} but tgt_lang={tgt_lang!r}: give the language once")
    return ids


def source_tag(languages: dict[str, int], tgt_lang: str | None) -> list[int]:
    """The ids that go before each source sentence for `tgt_lang`: [its tag's id] for a multilingual model
    (`languages`: `target_languages`), [] for a bilingual one with none asked."""
    if tgt_lang is None:
        if languages:
            raise InputError(
                f"this model is multilingual: give the target language (tgt_lang=, --tgt-lang), one of {', '.join(languages)}"
            )
        return []
    if not languages:
        raise InputError(
            f"tgt_lang={tgt_lang!r}: this model translates into one language (its vocabulary has no >>xx<< "
            "tokens); give no target language"
        )
    if tgt_lang not in languages:
        raise InputError(f"no target language {tgt_lang!r} in this model: it knows {', '.join(languages)}")
    return [languages[tgt_lang]]


def language_check(value) -> str | None:
    """`DecodingOptions.tgt_lang`'s check: a language's name, as its tag has it between >> and <<."""
    if not isinstance(value, str) or not _TAG.match(tag(value)) or ">>" in value or "<<" in value:
        return "must be a language's name, as in its >>xx<< token (fr for >>fr<<)"
    return None
