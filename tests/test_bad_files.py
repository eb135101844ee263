"""Every file a data module reads is checked (encoding, gzip, IDX header and size, at least one example),
and every hyperparameter that can be wrong is checked in `__init__`: one line naming the file (or the
class and argument), never a traceback from deep inside torch or torchvision, never a silent success.

The bad inputs are generated from good ones: random bytes, truncations at several points, empty,
BOM-only, Latin-1 and UTF-16 text, headers that lie. CRLF must keep working. All in-process and fast;
the scripts' side (one line, exit status 2) is in test_bad_input.py.
"""

from __future__ import annotations

import codecs
import gzip
import random
import struct
from pathlib import Path

import pytest
import torch

from common.errors import CorpusFormatError, DataFormatError, HyperparameterError
from datamodules import MNISTDataModule, ParallelCorpusDataModule, ToyTranslationDataModule
from datamodules.corpus_readers import read_aligned, read_tatoeba
from models.config import MnistNetSettings, Seq2SeqSettings
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import fake_mnist

BOM = codecs.BOM_UTF8
PAIRS = [(f"Sentence number {i}, café déjà vu.", f"第{i}句话，咖啡。") for i in range(30)]
GOOD = BOM + "".join(f"{e}\t{z}\tCC-BY 2.0 (France) #{i}\n" for i, (e, z) in enumerate(PAIRS)).encode("utf-8")
CUTS = (1, 2, 10, 0.25, 0.5, 0.75, -1)  # truncation points: bytes kept, or a fraction of the file


def cut(data: bytes, at: float) -> bytes:
    return data[: int(at * len(data)) if isinstance(at, float) else at]


def assert_one_line(err: pytest.ExceptionInfo, *words: str) -> str:
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------------------------------------- corpus text


def bad_texts() -> dict[str, tuple[bytes, str]]:
    """name → (file bytes, a word the error must contain)."""
    latin1 = GOOD[len(BOM) :].decode("utf-8").replace("第", "").replace("句话，咖啡。", "").encode("latin-1")
    return {
        "empty": (b"", "no text"),
        "bom-only": (BOM, "no text"),
        "blank-lines": (b"\n  \r\n\t\n", "only blank lines"),
        "random-bytes": (b"\xff" + random.Random(0).randbytes(500), "not UTF-8"),
        "latin-1": (latin1, "not UTF-8"),
        "utf-16": ("Hi.\t嗨。\tattr\n".encode("utf-16"), "UTF-16"),
        "cut-inside-a-character": (GOOD[: GOOD.index("第".encode()) + 1], "not UTF-8"),
    }


@pytest.mark.parametrize("name", list(bad_texts()))
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_bad_corpus_text_is_one_line_naming_the_file(tmp_path, name, gz):
    data, word = bad_texts()[name]
    path = tmp_path / ("cmn.txt.gz" if gz else "cmn.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    for read in (read_tatoeba, lambda p: read_aligned(p, p)):
        with pytest.raises(CorpusFormatError) as err:
            read(path)
        message = assert_one_line(err, str(path), word)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:  # where: the line and the byte offset of the first bad byte
            line = data.count(b"\n", 0, bad.start) + 1
            assert f"line {line} (byte offset {bad.start}" in message and "not UTF-8" in message


def test_latin1_error_points_at_the_first_accent(tmp_path):
    path = tmp_path / "fra.txt"
    before = b"Hello.\tBonjour.\tx\nCoffee.\tCaf"
    path.write_bytes(before + b"\xe9.\tx\n")  # "é" in Latin-1, on line 2
    with pytest.raises(CorpusFormatError) as err:
        read_tatoeba(path)
    assert_one_line(err, f"{path}, line 2 (byte offset {len(before)})", "0xe9")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_crlf_files_read_like_lf(tmp_path, gz):
    data = GOOD.replace(b"\n", b"\r\n")
    path = tmp_path / ("c.txt.gz" if gz else "c.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    assert read_tatoeba(path) == PAIRS
    lines = tmp_path / ("l.txt.gz" if gz else "l.txt")
    text = "\r\n".join(e for e, _ in PAIRS) + "\r\n"
    lines.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    assert read_aligned(lines, lines) == [(e, e) for e, _ in PAIRS]  # no stray \r in any sentence


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_lone_carriage_return_does_not_end_a_line(tmp_path, gz):
    # "a\rb" pasted from the web: splitting there would add a line and shift every later pair out of line
    src = "eins\nzwei\rdrei\nvier\n"
    tgt = "one\ntwo three\nfour\n"
    paths = []
    for name, text in (("s.txt", src), ("t.txt", tgt)):
        path = tmp_path / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
        paths.append(path)
    assert read_aligned(*paths) == [("eins", "one"), ("zwei\rdrei", "two three"), ("vier", "four")]
    tatoeba = tmp_path / "t.tsv"
    tatoeba.write_bytes(b"Hi.\tHal\rlo.\tx\r\nBye.\tTsch\xc3\xbcss.\tx\n")
    assert read_tatoeba(tatoeba) == [("Hi.", "Hal\rlo."), ("Bye.", "Tschüss.")]


@pytest.mark.parametrize("at", CUTS)
def test_truncated_gzip_corpus_is_one_line(tmp_path, at):
    path = tmp_path / "train.de.gz"
    path.write_bytes(cut(gzip.compress(GOOD), at))
    with pytest.raises(CorpusFormatError) as err:
        read_aligned(path, path)
    assert_one_line(err, str(path), "gzip")


@pytest.mark.parametrize("content", [b"", b"plain text, not gzip\n", random.Random(1).randbytes(300)])
def test_a_gz_name_on_something_else_is_one_line(tmp_path, content):
    path = tmp_path / "val.en.gz"
    path.write_bytes(content)
    with pytest.raises(CorpusFormatError) as err:
        read_aligned(path, path)
    assert_one_line(err, str(path))


@pytest.mark.parametrize("at", CUTS)
def test_truncated_plain_corpus_reads_a_prefix_or_says_where(tmp_path, at):
    """A plain file cut anywhere: the pairs before the cut, or one line naming the file (a cut
    inside a character, a last line without its tab) — never a traceback."""
    path = tmp_path / "cmn.txt"
    path.write_bytes(cut(GOOD, at))
    try:
        pairs = read_tatoeba(path)
    except CorpusFormatError as e:
        assert "\n" not in str(e) and str(path) in str(e)
    else:
        last = PAIRS[len(pairs) - 1]
        assert pairs[:-1] == PAIRS[: len(pairs) - 1] and pairs[-1][0] == last[0] and last[1].startswith(pairs[-1][1])


def test_a_missing_or_empty_aligned_side_names_that_file(tmp_path):
    good, empty = tmp_path / "train.de", tmp_path / "train.en"
    good.write_text("Ein Hund.\n", encoding="utf-8")
    empty.write_bytes(BOM)
    with pytest.raises(CorpusFormatError) as err:
        read_aligned(good, empty)
    assert_one_line(err, str(empty))
    assert str(good) not in str(err.value)


def _module(tmp_path: Path, data: bytes, **kwargs) -> ParallelCorpusDataModule:
    (tmp_path / "cmn.txt").write_bytes(data)
    kwargs = {"src_tokenizer": "char", "tgt_tokenizer": "word", "max_tokens": 256, "max_len": 32, **kwargs}
    return ParallelCorpusDataModule(str(tmp_path), download=False, **kwargs)


@pytest.mark.parametrize("name", ["empty", "bom-only", "random-bytes"])
def test_data_module_refuses_a_bad_file_before_training_tokenizers(tmp_path, name):
    dm = _module(tmp_path, bad_texts()[name][0])
    with pytest.raises(CorpusFormatError) as err:
        dm.tokenizers  # what the CLI reads first
    assert_one_line(err, str(tmp_path / "cmn.txt"))


def test_no_usable_training_pair_is_an_error_not_zero_batches(tmp_path):
    dm = _module(tmp_path, GOOD, max_len=4, max_tokens=64)  # every sentence is longer than 4 tokens
    with pytest.raises(CorpusFormatError) as err:
        dm.setup("fit")
    assert_one_line(err, str(tmp_path / "cmn.txt"), "max_len=4", "none of the")
    with pytest.raises(CorpusFormatError):  # and again: no half-built state that passes the second time
        dm.train_dataloader()


def test_splits_that_leave_no_training_pair_are_an_error(tmp_path):
    two = BOM + b"Hi.\t\xe5\x97\xa8\xe3\x80\x82\tx\nRun.\t\xe8\xb7\x91\xe3\x80\x82\tx\n"
    dm = _module(tmp_path, two, val_fraction=0.45, test_fraction=0.45)
    with pytest.raises(CorpusFormatError) as err:
        dm.train_pairs()
    assert_one_line(err, str(tmp_path / "cmn.txt"), "none for training")


# ---------------------------------------------------------------------------------------------- MNIST IDX


def _idx(magic: tuple[int, int, int, int], dims: tuple[int, ...], body: bytes) -> bytes:
    return bytes(magic) + struct.pack(f">{len(dims)}I", *dims) + body


def bad_idx(good: bytes, ndim: int) -> dict[str, bytes]:
    """Variants of a good IDX file of `ndim` dimensions: truncations, random bytes, headers that lie."""
    header = 4 + 4 * ndim
    n, *item = struct.unpack(f">{ndim}I", good[4:header])
    body = good[header:]
    variants = {f"cut-{at}": cut(good, at) for at in (0, 3, header - 1, header, header + 1, 0.5, -1)}
    variants.update(
        {
            "random-bytes": random.Random(2).randbytes(len(good)),
            "trailing-byte": good + b"\0",
            "count-too-high": _idx((0, 0, 8, ndim), (n + 1, *item), body),
            "count-too-low": _idx((0, 0, 8, ndim), (n - 1, *item), body),
            "count-zero": _idx((0, 0, 8, ndim), (0, *item), b""),
            "int32-type": _idx((0, 0, 0x0C, ndim), (n, *item), body),
            "wrong-ndim": _idx((0, 0, 8, ndim + 1), (n, *item, 1), body),
        }
    )
    if ndim == 3:
        variants["27x28-images"] = _idx((0, 0, 8, 3), (n, 27, 28), body[: n * 27 * 28])
    return variants


FILES = {  # (file, compressed): fake_mnist writes the training files gzipped, the test files plain
    "test-images": ("t10k-images-idx3-ubyte", False, 3),
    "test-labels": ("t10k-labels-idx1-ubyte", False, 1),
    "train-images.gz": ("train-images-idx3-ubyte", True, 3),
}
VARIANTS = {
    key: list(bad_idx(_idx((0, 0, 8, ndim), (2, 28, 28)[:ndim], bytes(2 * 784)), ndim)) for key, (_, _, ndim) in FILES.items()
}


@pytest.mark.parametrize("key, variant", [(k, v) for k, vs in VARIANTS.items() for v in vs])
def test_bad_idx_file_is_one_line_naming_the_file(tmp_path, key, variant):
    name, compressed, ndim = FILES[key]
    fake_mnist(tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    path = raw / (name + ".gz" if compressed else name)
    good = gzip.decompress(path.read_bytes()) if compressed else path.read_bytes()
    data = bad_idx(good, ndim)[variant]
    path.write_bytes(gzip.compress(data) if compressed else data)
    dm = MNISTDataModule(str(tmp_path), val_size=10, download=False)
    with pytest.raises(DataFormatError) as err:
        dm.prepare_data()  # all four files, test files included: before any training
    message = assert_one_line(err, str(path))
    header, item_size = 4 + 4 * ndim, 28 * 28 if ndim == 3 else 1
    if len(data) >= header and data[:4] == good[:4] and variant.startswith(("cut", "trailing", "count-too")):
        # the size the header promises and the size the file has, in bytes
        promised = int.from_bytes(data[4:8], "big")
        assert f"promises {promised} " in message and f"{header + promised * item_size} bytes" in message
        assert f"has {len(data)} bytes" in message
    if compressed:
        assert not (raw / name).exists() and not list(raw.glob("*.part"))  # nothing bad left for the next run


@pytest.mark.parametrize("at", CUTS)
def test_truncated_gzip_idx_file_is_one_line(tmp_path, at):
    fake_mnist(tmp_path)
    path = tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    path.write_bytes(cut(path.read_bytes(), at))
    with pytest.raises(DataFormatError) as err:
        MNISTDataModule(str(tmp_path), download=False).prepare_data()
    assert_one_line(err, str(path))


def test_labels_out_of_range_or_count_mismatch(tmp_path):
    fake_mnist(tmp_path)
    path = tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    good = path.read_bytes()
    path.write_bytes(good[:-1] + b"\x0c")
    with pytest.raises(DataFormatError) as err:
        MNISTDataModule(str(tmp_path), download=False).setup("test")
    assert_one_line(err, str(path), "label 12", "0 to 9")
    n = len(good) - 8
    path.write_bytes(_idx((0, 0, 8, 1), (n - 1,), good[8:-1]))  # a consistent file, one label short
    with pytest.raises(DataFormatError) as err:
        MNISTDataModule(str(tmp_path), download=False).setup("test")
    assert_one_line(err, str(path), f"{n - 1} labels for the {n} images")


# ---------------------------------------------------------------------------------------------- hyperparameters


BAD_HPARAMS = [
    (Seq2SeqSettings, {"d_model": 30, "nhead": 4}, ["d_model=30 must be divisible by nhead=4"]),
    (Seq2SeqSettings, {"nhead": 0}, ["nhead=0"]),
    (Seq2SeqSettings, {"num_encoder_layers": 0, "dim_feedforward": -1}, ["num_encoder_layers=0", "dim_feedforward=-1"]),
    (Seq2SeqSettings, {"dropout": 1.0}, ["dropout=1.0", "[0, 1)"]),
    (Seq2SeqTransformer, {"lr": 0.0}, ["lr=0.0"]),
    (Seq2SeqTransformer, {"label_smoothing": 1.5}, ["label_smoothing=1.5"]),
    (Seq2SeqTransformer, {"betas": (0.9, 1.2)}, ["betas=(0.9, 1.2)"]),
    (Seq2SeqSettings, {"max_len": 2}, ["max_len=2"]),
    (Seq2SeqTransformer, {"eval_beam_size": 0, "lr": -1}, ["eval_beam_size=0", "lr=-1"]),
    (Seq2SeqSettings, {"activation": "tanh", "positional": "rope"}, ["activation='tanh'", "positional='rope'"]),
    (MnistNetSettings, {"d_model": 30}, ["d_model=30 must be divisible by nhead=4"]),
    (MnistNetSettings, {"patch_size": 5}, ["patch_size=5", "28"]),
    (MnistNetSettings, {"patch_size": 0}, ["patch_size=0"]),
    (MnistNetSettings, {"head": "decoder", "num_decoder_layers": 0}, ["num_decoder_layers"]),
    (MnistNetSettings, {"num_queries": 0, "num_kv_heads": 0}, ["num_queries=0", "num_kv_heads=0"]),
    (MnistSequenceClassifier, {"mixup": -1, "warmup_fraction": -0.1}, ["mixup=-1", "warmup_fraction=-0.1"]),
    (MnistSequenceClassifier, {"weight_decay": -1.0}, ["weight_decay=-1.0"]),
    (MnistNetSettings, {"stem_channels": -8, "stem_layers": 0}, ["stem_channels=-8", "stem_layers=0"]),
    (MnistNetSettings, {"strided_stem": True, "tokens": "rows", "stem_channels": 8}, ["strided_stem needs"]),
    (MnistNetSettings, {"stem_norm": True}, ["stem_norm needs a stem"]),
    (ParallelCorpusDataModule, {"max_tokens": 64, "max_len": 128}, ["max_tokens=64 must be at least max_len=128"]),
    (ParallelCorpusDataModule, {"src_vocab_size": -5}, ["src_vocab_size=-5"]),
    (ParallelCorpusDataModule, {"tgt_vocab_size": 0, "num_workers": -1}, ["tgt_vocab_size=0", "num_workers=-1"]),
    (ParallelCorpusDataModule, {"val_fraction": 0.6, "test_fraction": 0.4}, ["val_fraction + test_fraction = 1"]),
    (ParallelCorpusDataModule, {"val_fraction": -0.1}, ["val_fraction=-0.1"]),
    (ParallelCorpusDataModule, {"src_tokenizer": "sentencepiece"}, ["src_tokenizer='sentencepiece'"]),
    (ParallelCorpusDataModule, {"src_lang": "en", "tgt_lang": "eng"}, ["English"]),
    (MNISTDataModule, {"batch_size": 0}, ["batch_size=0"]),
    (MNISTDataModule, {"val_size": 1.0}, ["val_size=1.0"]),
    (MNISTDataModule, {"val_size": -3}, ["val_size=-3"]),
    (ToyTranslationDataModule, {"batch_size": 0, "repeats": 0}, ["batch_size=0", "repeats=0"]),
]


@pytest.mark.parametrize("cls, kwargs, words", BAD_HPARAMS, ids=lambda x: getattr(x, "__name__", None))
def test_bad_hyperparameters_are_one_short_line(cls, kwargs, words):
    if cls is Seq2SeqTransformer:
        kwargs = {"tokenizers": ToyTranslationDataModule().tokenizers, **kwargs}
    with pytest.raises(HyperparameterError) as err:
        cls(**kwargs)
    message = assert_one_line(err, *words)
    assert len(message) < 200  # the argument and its value: no config or vocabulary dump
    assert err.value.__cause__ is None and isinstance(err.value, ValueError)


def test_hyperparameters_that_are_not_numbers_are_named():
    with pytest.raises(HyperparameterError) as err:
        MnistSequenceClassifier(net={"d_model": "128"})  # as a checkpoint's or a YAML file's settings
    assert_one_line(err, "d_model='128' must be a number")


def test_good_settings_still_build(tmp_path):
    """Settings at the edge of what the checks allow are accepted, and mean what they say."""
    rows = MnistSequenceClassifier(net=MnistNetSettings(tokens="rows", patch_size=5, head="mean", num_decoder_layers=0))
    assert rows(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    toy = Seq2SeqTransformer(
        tokenizers=ToyTranslationDataModule().tokenizers, net=Seq2SeqSettings(d_model=32, nhead=4), bleu_val_sentences=None
    )
    assert toy.net.d_model == 32 and toy.hparams.bleu_val_sentences is None  # None: BLEU on the whole validation split
    ParallelCorpusDataModule(str(tmp_path), val_fraction=0, test_fraction=0, max_tokens=128, max_len=128)
    train, val = MNISTDataModule(val_size=0.5)._split(60)  # a float is a fraction of the training images
    assert (len(train), len(val)) == (30, 30)
    train, val = MNISTDataModule(val_size=1)._split(60)  # an int is a number of images: 1 is one image, not all
    assert (len(train), len(val)) == (59, 1) and not set(train) & set(val)
