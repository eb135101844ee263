"""The toy translator's attention map draws 我 是 学 生 with real glyphs (no boxes, no silenced warning),
and subword pieces on its axes read as words unless the raw pieces are asked for."""

import io
import warnings
from pathlib import Path

import pytest
from matplotlib import font_manager, ft2font

from datamodules import ToyTranslationDataModule
from datamodules.tokenizers import SubwordTokenizer
from models.config import Seq2SeqSettings
from tasks import Seq2SeqTransformer
from tasks.figures import LAST_RESORT, attention_figure, display_pieces, font_families, packaged_font_files

TOY_CHARS = "我是学生"
SMALL = dict(net=Seq2SeqSettings(d_model=32, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, max_len=32))


def _faces(text):
    """The font faces (path, face index) matplotlib draws `text` with, in fallback order."""
    faces = []
    for family in text.get_fontfamily():
        props = text.get_fontproperties().copy()
        props.set_family([family])
        try:
            path = font_manager.findfont(props, fallback_to_default=False)
        except ValueError:
            continue
        faces.append((str(path), getattr(path, "face_index", 0)))
    return faces


def _font_drawing(char, faces):
    """The first face of the chain with a glyph for `char`, as matplotlib picks it; None if none has one."""
    for path, index in faces:
        font = ft2font.FT2Font(path, face_index=index) if index else ft2font.FT2Font(path)
        if font.get_char_index(ord(char)):
            return path, font
    return None


def _labels(fig):
    ax = fig.axes[0]
    return [t for t in [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.title] if t.get_text()]


def _draw(fig) -> list[str]:
    """Render `fig` as a PNG; the messages of the warnings that drawing raised (missing glyphs among them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")
    return [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def toy_model():
    return Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, **SMALL)


def test_toy_attention_map_draws_the_chinese_characters(toy_model):
    import matplotlib.pyplot as plt

    fig = toy_model.attention_map("我 是 学 生")
    try:
        texts = _labels(fig)
        shown = "".join(t.get_text() for t in texts)
        assert set(TOY_CHARS) <= set(shown)
        for text in texts:
            faces = _faces(text)
            for char in text.get_text():
                if char.isspace():
                    continue
                found = _font_drawing(char, faces)
                assert found is not None, f"no font of {text.get_fontfamily()} has {char!r}"
                path, font = found
                assert Path(path).name != LAST_RESORT, f"{char!r} would draw as Last Resort's placeholder box"
                if char in TOY_CHARS:  # the font that draws it has the glyph itself, in its character map
                    assert ord(char) in font.get_charmap(), (char, path)
        missing = [m for m in _draw(fig) if "missing from font" in m or "Glyph" in m]
        assert not missing, missing
        # Each character stands upright (a rotated label would lay it on its side); "<eos>" may turn.
        rotations = {t.get_text(): t.get_rotation() for t in fig.axes[0].get_xticklabels()}
        assert all(rotations[c] == 0 for c in TOY_CHARS), rotations
        assert all(angle == 90 for text, angle in rotations.items() if len(text) > 2), rotations
    finally:
        plt.close(fig)


def test_the_packaged_font_has_the_toy_glyphs():
    """What a fresh machine without a Chinese font falls back on (the noto-cjk-sans-otc dependency)."""
    files = packaged_font_files()
    assert files, "noto-cjk-sans-otc is not installed: pip install -e ."
    charmap = ft2font.FT2Font(files[0]).get_charmap()
    assert all(ord(c) in charmap for c in TOY_CHARS + "喜欢习男")  # the whole toy set, simplified forms included


def test_a_character_no_font_has_is_reported_not_boxed_silently():
    with pytest.warns(UserWarning, match="no font here has the characters"):
        families = font_families(["\U00013000"])  # an Egyptian hieroglyph: neither DejaVu nor Noto CJK has it
    assert not any("Last Resort" in f for f in families)


def test_subword_pieces_read_as_words_unless_raw():
    pieces = ["\u2581I", "\u2581am", "\u2581stud", "ent", "\u2581", "<eos>"]
    assert display_pieces(pieces) == ["I", "am", "stud", "ent", "\u2581", "<eos>"]
    assert display_pieces(pieces, raw_pieces=True) == pieces
    fig = attention_figure([[0.5] * 6], pieces, ["我"])
    raw = attention_figure([[0.5] * 6], pieces, ["我"], raw_pieces=True)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == display_pieces(pieces)
    assert [t.get_text() for t in raw.axes[0].get_xticklabels()] == pieces


def test_the_module_shows_words_and_raw_pieces_on_request():
    import matplotlib.pyplot as plt

    english = ["I am a student", "I like learning", "I am a boy", "a student likes learning"]
    src = SubwordTokenizer.train(english, "bpe", vocab_size=80).to_dict()
    tokenizers = {"src": src, "tgt": ToyTranslationDataModule().tokenizers["src"]}
    words = Seq2SeqTransformer(tokenizers=tokenizers, **SMALL)
    raw = Seq2SeqTransformer(tokenizers=tokenizers, attention_raw_pieces=True, **SMALL)
    for model, marked in ((words, False), (raw, True)):
        fig = model.attention_map("I am a student")
        labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert any(label.startswith("\u2581") for label in labels) == marked, labels
        if not marked:
            assert "student" in labels or "stud" in labels, labels
        plt.close(fig)
    fig = words.attention_map("I am a student", raw_pieces=True)  # the call's option overrides the module's
    assert any(t.get_text().startswith("\u2581") for t in fig.axes[0].get_xticklabels())
    plt.close(fig)
