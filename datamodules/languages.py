"""Language names and the tags that tell a multilingual model which language to write: a language is its ISO 639-1
code, a direction `SRC-TGT`, a tag one symbol of the joint tokenizer (docs/guide/multilingual.md and
docs/guide/pretrained.md, "Multilingual models", give the rules)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from common.errors import HyperparameterError, InputError

_CODES = (
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee "
    "el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is "
    "it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms "
    "mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk "
    "sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi "
    "yo za zh zu"
)
ISO_639_1 = frozenset(_CODES.split())

Direction = tuple[str, str]  # (source language, target language)


def target_tag(lang: str) -> str:
    return f">>{lang}<<"


# A target tag as text: its spelling above, with any language's name in it (the one place the spelling is written).
_TAG = re.compile("^" + re.escape(target_tag("@")).replace("@", r"(\S+)") + "$")


def source_tag(lang: str) -> str:
    return f"__{lang}__"


def tags(directions: Iterable[Direction], with_source: bool) -> list[str]:
    """Every tag the directions need, targets first, each once, in a fixed order (the tokenizer's ids follow it)."""
    directions = list(directions)
    out = [target_tag(t) for t in sorted({t for _, t in directions})]
    return out + ([source_tag(s) for s in sorted({s for s, _ in directions})] if with_source else [])


def tagged(text: str, direction: Direction, with_source: bool = False) -> str:
    """`text` with the tags of `direction` in front; an empty line stays empty (the training split drops it)."""
    if not text:
        return text
    src, tgt = direction
    return f"{target_tag(tgt)} {source_tag(src) + ' ' if with_source else ''}{text}"


def parse_direction(name: str, what: str = "pair") -> Direction:
    """`"de-en"` → ("de", "en"), or one `HyperparameterError` line saying what is wrong with it."""
    parts = name.split("-") if isinstance(name, str) else []
    if len(parts) != 2 or not all(parts):
        raise HyperparameterError(f"{what} {name!r} is not SRC-TGT, two language codes joined by '-' (e.g. de-en)")
    for lang in parts:
        if lang not in ISO_639_1:
            raise HyperparameterError(
                f"{what} {name!r}: unknown language {lang!r}; name each language by its ISO 639-1 code, "
                "lowercase (de, en, fr, cs, ...)"
            )
    if parts[0] == parts[1]:
        raise HyperparameterError(f"{what} {name!r} translates a language into itself")
    return parts[0], parts[1]


def parse_directions(names: Iterable[str], what: str = "pairs") -> list[Direction]:
    """Each name parsed (`parse_direction`), none twice."""
    names = list(names) if not isinstance(names, str) else [names]
    if not names:
        raise HyperparameterError(f"{what}: give at least one direction (e.g. [de-en, fr-en])")
    out = [parse_direction(n, what.rstrip("s")) for n in names]
    twice = sorted({f"{s}-{t}" for s, t in out if out.count((s, t)) > 1})
    if twice:
        raise HyperparameterError(f"{what}: {', '.join(twice)} given twice")
    return out


def name(direction: Direction) -> str:
    return "-".join(direction)


# ---------------------------------------------------------------------------------- a trained model's languages


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
        return target_tag_ids(languages, tgt_lang) + ids
    if tgt_lang not in (None, typed):
        raise InputError(f"sentence {index} starts with {target_tag(typed)} but tgt_lang={tgt_lang!r}: give the language once")
    return ids


def target_tag_ids(languages: dict[str, int], tgt_lang: str | None) -> list[int]:
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
    if not isinstance(value, str) or not _TAG.match(target_tag(value)) or ">>" in value or "<<" in value:
        return "must be a language's name, as in its >>xx<< token (fr for >>fr<<)"
    return None
