"""Saving matplotlib figures next to a run's logs, and sending them to the logger when it takes images;
attention heat maps whose labels draw in a font that has their characters (Chinese included)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

import matplotlib

from common.runs import run_folder

matplotlib.use("Agg")  # headless: no display on training machines
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager, ft2font  # noqa: E402

# Fonts with Chinese glyphs, best first, tried before any other installed font that has the characters
# a label needs. Matplotlib's default (DejaVu Sans) has none: a label's characters missing from the first
# family are drawn from the next one (font fallback), so Latin stays in the default font.
PREFERRED_FAMILIES = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Noto Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans GB",
    "Heiti SC",
    "SimHei",
    "Noto Sans CJK TC",
    "Noto Sans CJK HK",
    "Noto Sans CJK JP",
    "Noto Sans CJK KR",
)
# Matplotlib's own last fallback: its charmap "covers" everything, with one placeholder box per Unicode block.
LAST_RESORT = "LastResortHE-Regular.ttf"
SUBWORD_MARK = "\u2581"  # "▁", the word-start marker of SentencePiece / Metaspace pieces


def attached_trainer(module):
    """The trainer `module` is attached to, or None (Lightning's public `module.trainer` raises without one)."""
    try:
        return module.trainer
    except RuntimeError:
        return None


def figure_dir(module) -> Path:
    """The run's folder (`common.runs.run_folder`: its logger's version or W&B run), else "."."""
    trainer = attached_trainer(module)
    return Path(".") if trainer is None else run_folder(trainer)


def save_and_log_figure(module, fig, name: str, key: str | None = None) -> Path | None:
    """Save `fig` as `<log dir>/<name>.png` and log it under `key` (default: `name`) to every logger
    of `module`'s trainer that takes images (W&B: `log_image`; TensorBoard: `add_figure`). Closes the
    figure. Rank zero saves and logs; the others only close the figure and return None. Returns the PNG's path."""
    trainer = attached_trainer(module)
    key = key or name.replace(os.sep, "/")
    try:
        if trainer is not None and not trainer.is_global_zero:
            return None
        path = figure_dir(module) / f"{name}.png"
        os.makedirs(path.parent, exist_ok=True)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        step = trainer.global_step if trainer is not None else 0
        for logger in trainer.loggers if trainer is not None else []:
            if hasattr(logger, "log_image"):  # WandbLogger and friends
                logger.log_image(key=key, images=[str(path)], step=step)
            else:
                experiment = getattr(logger, "experiment", None)
                if hasattr(experiment, "add_figure"):  # TensorBoard's SummaryWriter
                    experiment.add_figure(key, fig, global_step=step, close=False)
        return path
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- fonts


@cache
def _charmap(path: str, index: int = 0) -> frozenset[int]:
    """The code points a font face has glyphs for (empty when the file cannot be read)."""
    try:
        face = ft2font.FT2Font(path, face_index=index) if index else ft2font.FT2Font(path)
        return frozenset(face.get_charmap())
    except Exception:  # an unreadable or exotic font file is simply not a candidate
        return frozenset()


def _is_last_resort(path: str) -> bool:
    return Path(path).name == LAST_RESORT


def _default_faces() -> list[tuple[str, int]]:
    """The font files behind `rcParams["font.family"]` (DejaVu Sans unless the user changed it)."""
    faces = []
    for family in plt.rcParams["font.family"]:
        try:
            path = font_manager.findfont(font_manager.FontProperties(family=[family]), fallback_to_default=False)
        except ValueError:  # not installed
            continue
        faces.append((str(path), getattr(path, "face_index", 0)))
    return faces


def packaged_font_files() -> list[str]:
    """The CJK font shipped by the `noto-cjk-sans-otc` package (Noto Sans CJK, SIL OFL 1.1), if installed."""
    try:
        import noto_cjk_sans_otc
    except ImportError:
        return []
    path = Path(str(noto_cjk_sans_otc.FONT_PATH))
    return [str(path)] if path.is_file() else []


def _register(paths: Iterable[str]) -> None:
    known = {e.fname for e in font_manager.fontManager.ttflist}
    for path in paths:
        if path not in known:
            font_manager.fontManager.addfont(path)


def _weight(entry) -> int:
    w = entry.weight
    return w if isinstance(w, int) else font_manager.weight_dict.get(str(w), 400)


def _pick(missing: set[str], only: set[str] | None = None):
    """The font entry covering most of `missing` (installed fonts, or only the files in `only`), preferring
    PREFERRED_FAMILIES, then upright regular faces; None when no font has any of them."""
    codes = {ord(c) for c in missing}
    best, best_key = None, None
    for entry in font_manager.fontManager.ttflist:
        if _is_last_resort(entry.fname) or (only is not None and entry.fname not in only):
            continue
        covered = len(codes & _charmap(entry.fname, getattr(entry, "index", 0)))
        if not covered:
            continue
        rank = PREFERRED_FAMILIES.index(entry.name) if entry.name in PREFERRED_FAMILIES else len(PREFERRED_FAMILIES)
        key = (-covered, rank, entry.style != "normal", abs(_weight(entry) - 400), entry.name)
        if best_key is None or key < best_key:
            best, best_key = entry, key
    return best


def _cover(missing: set[str], families: list[str], only: set[str] | None = None) -> None:
    """Append to `families` the fonts that draw `missing` (greedily, most characters first); remove from
    `missing` what they draw."""
    while missing and (entry := _pick(missing, only)) is not None:
        if entry.name not in families:
            families.append(entry.name)
        missing -= {c for c in missing if ord(c) in _charmap(entry.fname, getattr(entry, "index", 0))}


def font_families(texts: Iterable[str]) -> list[str]:
    """Font families (a fallback chain) that draw every character of `texts`: the default families, then,
    for characters they lack, the installed fonts that have them (PREFERRED_FAMILIES first), and, when no
    installed font has them, the Noto Sans CJK font of the `noto-cjk-sans-otc` package."""
    chars = {c for text in texts for c in text if c.isprintable() and not c.isspace()}
    families = list(plt.rcParams["font.family"])
    default = _default_faces()
    missing = {c for c in chars if not any(ord(c) in _charmap(*face) for face in default)}
    _cover(missing, families)  # installed fonts first
    if missing and packaged_font_files():
        _register(packaged_font_files())
        _cover(missing, families, only=set(packaged_font_files()))
    if missing:
        warnings.warn(
            f"no font here has the characters {''.join(sorted(missing))!r}: they will draw as boxes "
            "(pip install noto-cjk-sans-otc, or install a font that has them)",
            stacklevel=2,
        )
    return families


def display_pieces(pieces: Sequence[str], raw_pieces: bool = False) -> list[str]:
    """Axis labels for tokens. Subword pieces read as words: the "▁" word-start marker of SentencePiece /
    Metaspace pieces is dropped (`▁stud`, `ent` → `stud`, `ent`; a piece that is only the marker stays
    `▁`). `raw_pieces=True` keeps the pieces as the tokenizer has them."""
    if raw_pieces:
        return list(pieces)
    return [piece.replace(SUBWORD_MARK, " ").strip() or piece for piece in pieces]


# ---------------------------------------------------------------------------------------------- figures

UPRIGHT_LABEL_CHARS = 2  # a source label this short fits its column upright (one or two characters, CJK included)


def label_rotation(label: str) -> int:
    """The angle of a source (x-axis) label: 0, upright, for a short one, so that a Chinese character or a
    short word reads as written, not lying on its side; 90 for a longer one, which would not fit its column."""
    return 0 if len(label) <= UPRIGHT_LABEL_CHARS else 90


def attention_figure(weights, src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str = "", raw_pieces: bool = False):
    """Heat map of (T, S) cross-attention `weights`: target tokens down, source tokens across. Subword
    pieces are shown as words (see `display_pieces`) unless `raw_pieces`; labels and title are drawn in
    a font chain that has all their characters (`font_families`). Source labels of one or two characters
    (a Chinese character, a short word) stand upright; longer ones are turned 90° (`label_rotation`)."""
    import numpy as np

    src_labels, tgt_labels = display_pieces(src_tokens, raw_pieces), display_pieces(tgt_tokens, raw_pieces)
    family = font_families([*src_labels, *tgt_labels, title])
    w = np.asarray(weights, dtype=float)
    fig, ax = plt.subplots(figsize=(max(3.0, 0.35 * len(src_tokens) + 1.5), max(2.5, 0.3 * len(tgt_tokens) + 1.2)))
    image = ax.imshow(w, aspect="auto", cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-6))
    ax.set_xticks(range(len(src_labels)), labels=src_labels, fontsize=7, family=family)
    for label, text in zip(ax.get_xticklabels(), src_labels):  # short labels upright, long ones turned
        label.set_rotation(label_rotation(text))
    ax.set_yticks(range(len(tgt_labels)), labels=tgt_labels, fontsize=7, family=family)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=8, family=family)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return fig
