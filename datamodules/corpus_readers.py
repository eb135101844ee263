"""Readers of parallel corpora: Tatoeba/manythings files (`english<TAB>other<TAB>attribution`, one
pair a line) and line-aligned pairs of files (Multi30k), plain or gzip; a duplicate-safe split; the
download of a missing file. Each bad file is one `CorpusFormatError` naming the file (and the line,
or the byte offset of text that is not UTF-8).
"""

from __future__ import annotations

import codecs
import gzip
import io
import itertools
import os
import random
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from common.errors import CorpusFormatError
from common.files import new_folders_removed_if_empty

Pair = tuple[str, str]


def read_tatoeba(path: str | os.PathLike) -> list[Pair]:
    """(english, other) pairs from a manythings file: `english<TAB>other<TAB>attribution` per line; the byte-order mark
    dropped, blank lines skipped, anything else malformed an error with its line number (docs/guide/data.md, "Sources")."""
    pairs = []
    for lineno, line in enumerate(io.StringIO(_read_text(Path(path)), newline="\n"), 1):
        if not line.strip():
            continue
        fields = line.removesuffix("\n").removesuffix("\r").split("\t")
        if len(fields) < 2:
            raise CorpusFormatError(f"{path}, line {lineno}: expected 'english<TAB>translation', found no tab")
        english, other = fields[0].strip(), fields[1].strip()
        if not english or not other:
            raise CorpusFormatError(f"{path}, line {lineno}: empty sentence in 'english<TAB>translation'")
        pairs.append((english, other))
    if not pairs:
        raise CorpusFormatError(f"{path}: no sentence pairs in it ({_emptiness(path)})")
    return pairs


def _read_text(path: Path) -> str:
    """The whole file (gunzipped if the name ends in .gz) as UTF-8 text without a byte-order mark, or one
    `CorpusFormatError` naming the file: not gzip, truncated, or not UTF-8 (with the line and byte offset)."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError; a truncated gzip an EOFError
        what = "not a readable gzip file, truncated or corrupt" if path.suffix == ".gz" and path.is_file() else "unreadable"
        raise CorpusFormatError(f"{path}: {what} ({getattr(err, 'strerror', None) or err})") from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = bom + err.start
        line = data.count(b"\n", 0, offset) + 1
        gunzipped = " of the gunzipped text" if path.suffix == ".gz" else ""
        utf16 = ", it is UTF-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else ""
        raise CorpusFormatError(
            f"{path}, line {line} (byte offset {offset}{gunzipped}): not UTF-8 text "
            f"(byte 0x{data[offset]:02x}: {err.reason}{utf16}); save the file as UTF-8"
        ) from None


class LineDecodeError(ValueError):
    """A line of bytes that does not decode: where (line number, byte offset of the bad byte), and why."""

    def __init__(self, lineno: int, offset: int, err: UnicodeDecodeError, raw: bytes):
        super().__init__(f"line {lineno} (byte offset {offset}): {err.reason}")
        self.lineno, self.offset, self.err = lineno, offset, err
        self.bad = raw[err.start : err.end]
        self.utf16 = lineno == 1 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def decode_lines(raw_lines: Iterable[bytes], encoding: str = "utf-8", errors: str = "strict") -> Iterator[str]:
    """Text lines of an iterable of byte lines (a binary file, stdin's buffer), one at a time, without their
    line ends; a line ends at LF (a CRLF ending is one line end too); a UTF-8 byte-order mark on the first is
    dropped. A lone CR is kept inside its line: text pasted from the web carries them, and ending lines there
    (universal newlines) would add lines and shift every later line away from its aligned partner.
    A line that does not decode is a `LineDecodeError` with its line number and the bad byte's offset."""
    offset = 0
    for lineno, raw in enumerate(raw_lines, 1):
        start = len(codecs.BOM_UTF8) if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else 0
        try:
            text = raw[start:].decode(encoding, errors)
        except UnicodeDecodeError as err:
            err.start, err.end = err.start + start, err.end + start
            raise LineDecodeError(lineno, offset + err.start, err, raw) from None
        offset += len(raw)
        yield text.removesuffix("\n").removesuffix("\r")


def iter_lines(path: Path, strip: bool = True) -> Iterator[str]:
    """The file's lines, stripped (unless `strip` is False), one at a time, gunzipped if the name ends in .gz (see
    `decode_lines`).
    Errors as `_read_text`'s, found where they are: a bad byte 3 million lines in is one `CorpusFormatError`
    with its line and byte offset, after the lines before it."""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            for line in decode_lines(f):
                yield line.strip() if strip else line
    except LineDecodeError as bad:
        gunzipped = " of the gunzipped text" if path.suffix == ".gz" else ""
        raise CorpusFormatError(
            f"{path}, line {bad.lineno} (byte offset {bad.offset}{gunzipped}): not UTF-8 text "
            f"(byte 0x{bad.bad[0]:02x}: {bad.err.reason}{', it is UTF-16' if bad.utf16 else ''}); save the file as UTF-8"
        ) from None
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError; a truncated gzip an EOFError
        what = "not a readable gzip file, truncated or corrupt" if path.suffix == ".gz" and path.is_file() else "unreadable"
        raise CorpusFormatError(f"{path}: {what} ({getattr(err, 'strerror', None) or err})") from None


def _emptiness(path: Path) -> str:
    return "it holds no text" if not _read_text(path) else "it holds only blank lines"


def iter_aligned(src_path: str | os.PathLike, tgt_path: str | os.PathLike, strip: bool = True) -> Iterator[Pair]:
    """(source, target) pairs of two line-aligned files, streamed, stripped unless `strip` is False. Unequal line
    counts are an error naming both counts, raised where the shorter file ends; so is a file without a sentence."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    content = {src_path: False, tgt_path: False}
    for s, t in itertools.zip_longest(iter_lines(src_path, strip), iter_lines(tgt_path, strip)):
        if s is None or t is None:
            raise CorpusFormatError(
                f"Line-aligned files differ in length: {src_path} has {_count_lines(src_path)} lines, "
                f"{tgt_path} has {_count_lines(tgt_path)}"
            )
        content[src_path] = content[src_path] or bool(s.strip())
        content[tgt_path] = content[tgt_path] or bool(t.strip())
        yield s, t
    for path, seen in content.items():
        if not seen:
            raise CorpusFormatError(f"{path}: no sentences in it ({_emptiness(path)})")


def _count_lines(path: Path) -> int:
    return sum(1 for _ in iter_lines(path))


def read_aligned(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> list[Pair]:
    """(source, target) pairs from two line-aligned files (gzip if the name ends in .gz): line i ↔ line i."""
    return list(iter_aligned(src_path, tgt_path))


def split_pairs(
    pairs: Sequence[Pair], val_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Random train/val/test split in which every copy of a repeated pair lands in the same split.

    Tatoeba repeats pairs (and "Hi." → "你好。" in train with the same pair in test would reward
    memorising), so whole groups of identical pairs are shuffled and cut, not single lines.
    """
    groups: dict[Pair, list[Pair]] = {}
    for p in pairs:
        groups.setdefault(p, []).append(p)
    keys = list(groups)  # first-appearance order: the same file and seed always give the same split
    random.Random(seed).shuffle(keys)
    n_test, n_val = round(test_fraction * len(keys)), round(val_fraction * len(keys))
    cut = lambda ks: [p for k in ks for p in groups[k]]  # noqa: E731
    return cut(keys[n_test + n_val :]), cut(keys[n_test : n_test + n_val]), cut(keys[:n_test])


def download(url: str, dest: Path) -> None:
    """Fetch `url` to `dest` through a temporary name, so an interrupted download never looks complete; a failed
    one leaves no folder it made."""
    import urllib.request  # here: the scripts read their input through this module, and a download is rare

    # manythings.org refuses urllib's default user agent.
    req = urllib.request.Request(url, headers={"User-Agent": "Mozilla/5.0 (transformer-lightning)"})
    tmp = dest.with_name(dest.name + ".part")
    with new_folders_removed_if_empty(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(req, timeout=30) as r, open(tmp, "wb") as f:
                f.write(r.read())
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
