"""Language names and the tags that tell a multilingual model which language to write.

A language has one name, its ISO 639-1 code (`de`, `en`, `fr`, `cs`: Multi30k's file suffixes and the tags of
OPUS-MT's multilingual models): German given as `de` in one pair and `deu` in another would be two languages to
the model and the tokenizer, so only the two-letter codes are taken. A direction is `SRC-TGT` (`de-en`).

The target language is a token at the start of the source, OPUS-MT's way: `>>fr<< Ein Hund rennt.`; a recipe may
add the source language after it (`>>fr<< __de__ Ein Hund rennt.`, fairseq's spelling of a language token). Both
are symbols of the joint tokenizer (tokenizers.with_symbols): one id each, never split, whatever spaces surround
them. The tags are put into the text itself, so a sentence tagged by hand (scripts/evaluate.py --pair) and one
tagged by the data module are the same ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.errors import HyperparameterError

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
