"""Parallel-corpus readers, splits, subword tokenizers and token-budget batching (all on CPU, < 60 s)."""

from __future__ import annotations

import gzip
import json
import random
import unicodedata
from pathlib import Path

import pytest
import torch

from common.errors import CorpusFormatError, DataNotFoundError
from datamodules.batching import Seq2SeqBatch
from datamodules.corpus import ParallelCorpusDataModule
from datamodules.corpus_readers import read_aligned, read_tatoeba, split_pairs
from datamodules.samplers import TokenBudgetBatchSampler, padding_waste
from datamodules.tokenizers import SubwordTokenizer, tokenizer_from_dict, train_tokenizer
from datamodules.vocab import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, Vocab
from tests.helpers import SHARED_DATA, TOY_MODEL, chinese, english, quiet_trainer, write_tatoeba

CMN = SHARED_DATA / "cmn-eng" / "cmn.txt"
MULTI30K = SHARED_DATA / "multi30k"

# ---------------------------------------------------------------------------------------------- readers


def test_tatoeba_reader_strips_bom_and_skips_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "cmn.txt"
    p.write_bytes("\ufeffHi.\t嗨。\tCC-BY attr\r\n\n   \nRun.\t你用跑的。\tCC-BY attr\n\n".encode("utf-8"))
    assert read_tatoeba(p) == [("Hi.", "嗨。"), ("Run.", "你用跑的。")]


def test_tatoeba_reader_missing_tab_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "cmn.txt"
    p.write_text("\ufeffHi.\t嗨。\tattr\n\nRun. 你用跑的。\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"cmn\.txt, line 3: .*no tab"):
        read_tatoeba(p)


def test_aligned_reader_reads_gzip_and_plain(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "train.de.gz", "wt", encoding="utf-8") as f:
        f.write("Ein Hund.\nZwei Katzen.\n")
    (tmp_path / "train.en").write_text("A dog.\nTwo cats.\n", encoding="utf-8")
    assert read_aligned(tmp_path / "train.de.gz", tmp_path / "train.en") == [
        ("Ein Hund.", "A dog."),
        ("Zwei Katzen.", "Two cats."),
    ]


def test_aligned_reader_mismatched_line_counts_names_both_files(tmp_path: Path) -> None:
    (tmp_path / "val.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "val.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"val\.de has 3 lines.*val\.en has 2"):
        read_aligned(tmp_path / "val.de", tmp_path / "val.en")


# ---------------------------------------------------------------------------------------------- splits


def test_split_keeps_duplicate_pairs_in_one_split_and_is_deterministic() -> None:
    base = list(zip(english(300), chinese(300, seed=1)))
    pairs = base + base[:100] + base[:20]  # many exact repeats
    train, val, test = split_pairs(pairs, 0.1, 0.1, seed=42)
    assert sorted(train + val + test) == sorted(pairs)
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    assert val and test
    assert (train, val, test) == split_pairs(pairs, 0.1, 0.1, seed=42)
    assert (train, val, test) != split_pairs(pairs, 0.1, 0.1, seed=7)


# ---------------------------------------------------------------------------------------------- tokenizers


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_subword_round_trip_and_serialisation(kind: str) -> None:
    texts = english(400)
    tok = train_tokenizer(texts, kind, vocab_size=120)
    assert isinstance(tok, SubwordTokenizer)
    assert [tok.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [PAD, BOS, EOS, UNK]
    assert len(tok) <= 120
    for text in texts[:50] + ['Mary can\'t find "Hamlet", again!']:
        ids = tok.encode(text)
        assert ids and min(ids) > UNK, text  # every character was seen in training: no <unk>, no specials
        assert tok.decode(ids) == text
    # decode stops at <eos> and skips <pad>/<bos>, like Vocab.decode
    ids = tok.encode("Tom saw apples.")
    assert tok.decode([BOS, *ids, EOS, *tok.encode("Mary"), PAD]) == "Tom saw apples."
    # NFKC: full-width letters fold to ASCII ones
    assert tok.encode("Ｔｏｍ") == tok.encode("Tom")
    # JSON round trip through the registry gives identical ids
    data = json.loads(json.dumps(tok.to_dict()))
    again = tokenizer_from_dict(data)
    assert isinstance(again, SubwordTokenizer) and len(again) == len(tok)
    assert all(again.encode(t) == tok.encode(t) for t in texts[:50])
    # training is deterministic: a retrained tokenizer matches a checkpoint's
    assert train_tokenizer(texts, kind, vocab_size=120).to_dict() == tok.to_dict()


def test_char_vocab_for_chinese_round_trip() -> None:
    texts = chinese(200)
    tok = train_tokenizer(texts, "char", vocab_size=10_000)
    assert isinstance(tok, Vocab) and tok.tokens[:4] == SPECIAL_TOKENS
    for text in texts[:30]:
        assert tok.decode(tok.encode(text)) == text
    again = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again.encode(texts[0]) == tok.encode(texts[0])
    # vocab_size keeps the most frequent tokens; the rest become <unk>
    small = train_tokenizer(texts, "char", vocab_size=8)
    assert len(small) == 8 and UNK in small.encode("".join(texts[:20]))


def test_unknown_character_maps_to_unk() -> None:
    tok = train_tokenizer(english(200), "bpe", vocab_size=100)
    assert UNK in tok.encode("Tom saw 猫")


# ---------------------------------------------------------------------------------------------- batching


def test_token_budget_sampler_respects_budget_and_covers_every_example_once() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(1000)]
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=256, shuffle=True, seed=3)
    counts = set()
    orders = []
    for epoch in range(3):
        sampler.sampler.set_epoch(epoch)  # the hook Lightning calls
        batches = [b.tolist() for b in sampler]
        assert len(batches) == len(sampler)
        counts.add(len(batches))
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(len(b) * max(lengths[i] for i in b) <= 256 for b in batches)
        orders.append(batches)
    assert len(counts) == 1, "the batch count must not change between epochs (Lightning fixes it at setup)"
    assert orders[0] != orders[1] != orders[2]
    sampler.set_epoch(1)
    assert [b.tolist() for b in sampler] == orders[1]
    # evaluation: no shuffling, the same batches whatever the epoch
    ev = TokenBudgetBatchSampler(lengths, max_tokens=256)
    first = [b.tolist() for b in ev]
    ev.set_epoch(5)
    assert [b.tolist() for b in ev] == first
    assert padding_waste(first, lengths, lengths) < 0.05


def test_token_budget_sampler_shards_equally_across_ranks() -> None:
    lengths = [random.Random(i).randint(1, 30) for i in range(301)]
    for shuffle in (True, False):
        whole = [b.tolist() for b in TokenBudgetBatchSampler(lengths, 64, shuffle, seed=1)]  # one process
        shards = [list(TokenBudgetBatchSampler(lengths, 64, shuffle, seed=1, num_replicas=3, rank=r)) for r in range(3)]
        n = len(shards[0])
        assert len({len(s) for s in shards}) == 1 and len(whole) % 3 != 0  # a remainder to drop or repeat
        # Rank r takes every 3rd of the one process's batches, from the r-th on.
        dealt = [shards[i % 3][i // 3].tolist() for i in range(3 * n)]
        seen = [i for b in dealt for i in b]
        if shuffle:  # training: the remainder (fewer than 3 batches) waits for another epoch, nothing is repeated
            assert dealt == whole[: 3 * n] and len(whole) - 3 < 3 * n and len(set(seen)) == len(seen)
        else:  # evaluation must see everything: the first batches are repeated to fill the last round
            assert dealt == [whole[i % len(whole)] for i in range(3 * n)] and 3 * n - 3 < len(whole)
            assert set(seen) == set(range(len(lengths)))


def test_token_budget_sampler_rejects_an_example_over_budget() -> None:
    with pytest.raises(ValueError, match="cannot fit"):
        TokenBudgetBatchSampler([5, 300], max_tokens=256)


def test_lightning_set_epoch_reaches_the_batch_sampler(tmp_path: Path) -> None:
    from lightning.fabric.utilities.data import _set_sampler_epoch

    dm = _tiny_module(tmp_path)
    dl = dm.train_dataloader()
    _set_sampler_epoch(dl, 4)
    assert dl.batch_sampler.epoch == 4


# ---------------------------------------------------------------------------------------------- data module


def _tiny_module(tmp_path: Path, **kw) -> ParallelCorpusDataModule:
    pairs = list(zip(english(400), chinese(400, seed=2)))
    write_tatoeba(tmp_path / "cmn-eng" / "cmn.txt", pairs)
    kw = {"src_vocab_size": 150, "tgt_vocab_size": 150, "max_tokens": 256, "max_len": 32, **kw}
    kw.setdefault("data_dir", str(tmp_path / "cmn-eng"))
    return ParallelCorpusDataModule(download=False, **kw)


def test_training_pairs_with_an_empty_side_are_dropped_with_their_count_said(tmp_path: Path, caplog) -> None:
    """An aligned corpus with empty lines (a union of corpora, say) trains on the others, and the setup line says
    how many were dropped; validation keeps its pairs."""
    lines = {"de": [f"ein satz {i}" for i in range(40)], "en": [f"a sentence {i}" for i in range(40)]}
    for i in (3, 17, 30):
        lines["de" if i % 2 else "en"][i] = ""
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines[lang]), encoding="utf-8")
    dm = ParallelCorpusDataModule(str(tmp_path), format="aligned", src_lang="de", tgt_lang="en", download=False,
                                  src_tokenizer="word", tgt_tokenizer="word", max_tokens=64, max_len=32)  # fmt: skip
    with caplog.at_level("INFO"):
        dm.setup("fit")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train: ")]
    assert line.startswith("train: 37 pairs, 0 longer than max_len=32 dropped, 3 with an empty side dropped, "), line
    (val,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("val: ")]
    assert val.startswith("val: 40 pairs") and "empty" not in val


def test_missing_tatoeba_file_without_download_names_the_file(tmp_path: Path) -> None:
    dm = ParallelCorpusDataModule(data_dir=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(DataNotFoundError, match=r"nowhere/cmn\.txt.*manythings\.org/anki/cmn-eng\.zip"):
        dm.tokenizers


def test_missing_aligned_files_without_download_names_the_files(tmp_path: Path) -> None:
    (tmp_path / "train.de").write_text("a\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a\n", encoding="utf-8")
    dm = ParallelCorpusDataModule(str(tmp_path), format="aligned", src_lang="de", tgt_lang="en", download=False)
    with pytest.raises(DataNotFoundError) as err:
        dm.setup("fit")
    msg = str(err.value)
    assert "val.de.gz" in msg and "test_2016_flickr.en.gz" in msg and "train.de" not in msg and str(tmp_path) in msg


def test_a_prefix_with_a_folder_is_named_whole_and_never_downloaded(tmp_path, monkeypatch) -> None:
    """`--data.train_prefix distilled/train` is read inside the data folder: missing there, the message names
    `distilled/train.de.gz` (not Multi30k's `train.de.gz`), says how to point at ./distilled, and nothing is
    downloaded in its place."""
    import urllib.request

    data = tmp_path / "multi30k"
    for split in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (data / f"{split}.{lang}").parent.mkdir(exist_ok=True)
            (data / f"{split}.{lang}").write_text("a\n", encoding="utf-8")
    (tmp_path / "distilled").mkdir()
    for lang in ("de", "en"):
        (tmp_path / "distilled" / f"train.{lang}").write_text("a\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("downloaded a file of another corpus"))
    dm = ParallelCorpusDataModule("multi30k", format="aligned", src_lang="de", tgt_lang="en", train_prefix="distilled/train")
    with pytest.raises(DataNotFoundError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert msg.startswith("distilled/train.de.gz, distilled/train.en.gz not found in multi30k/"), msg
    assert msg.endswith("(a prefix is read inside the data folder: for the files in ./distilled/ give its absolute path)")


def test_download_fetches_and_unzips_tatoeba(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import urllib.request
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("cmn.txt", "\ufeffHi.\t嗨。\tattr\nRun.\t跑。\tattr\n")
        z.writestr("_about.txt", "about")
    seen = []

    def fake_urlopen(req, timeout=None):
        seen.append(req.full_url)
        return io.BytesIO(buf.getvalue())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    dm = ParallelCorpusDataModule(str(tmp_path / "d"), src_lang="en", tgt_lang="cmn", val_fraction=0, test_fraction=0)
    assert sorted(dm.train_pairs()) == [("Hi.", "嗨。"), ("Run.", "跑。")]
    assert seen == ["https://www.manythings.org/anki/cmn-eng.zip"]
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["cmn.txt"]  # no zip or .part left behind


def test_failed_download_raises_data_not_found_from_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error
    import urllib.request

    def offline(req, timeout=None):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    dm = ParallelCorpusDataModule(str(tmp_path), format="aligned", src_lang="de", tgt_lang="en")
    with pytest.raises(DataNotFoundError, match=r"train\.de\.gz.*not found in .*raw\.githubusercontent\.com") as err:
        dm.prepare_data()
    assert err.value.__suppress_context__ and err.value.__cause__ is None
    assert not list(tmp_path.iterdir())


def test_data_module_end_to_end(tmp_path: Path) -> None:
    dm = _tiny_module(tmp_path)
    # The CLI reads `tokenizers` right after __init__, before setup: it must work and be cached.
    toks = dm.tokenizers
    assert toks["src"]["kind"] == "vocab" and toks["tgt"]["kind"] == "subword"
    assert dm.tokenizers == toks and dm.src_vocab is dm.src_vocab
    dm.setup("fit")
    n_train = sum(len(b.src) for b in dm.train_dataloader())
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, Seq2SeqBatch)
    assert (batch.tgt[:, 0] == BOS).all() and batch.src.shape[0] * max(batch.src.shape[1], batch.tgt.shape[1]) <= 256
    assert (batch.src == EOS).sum(1).eq(1).all() and (batch.tgt == EOS).sum(1).eq(1).all()
    src, ref = dm.test_pairs()[0]
    assert any(ord(c) > 0x2E80 for c in src) and ref.isascii()  # cmn → en, raw text
    assert n_train == len(dm.train_pairs())
    assert len(dm.train_pairs()) + len(dm.val_pairs()) + len(dm.test_pairs()) == 400
    # The reverse direction evaluates on the same pairs, flipped.
    rev = _tiny_module(tmp_path, src_lang="en", tgt_lang="cmn", src_tokenizer="bpe", tgt_tokenizer="char")
    assert rev.test_pairs() == [(e, z) for z, e in dm.test_pairs()]


def test_batches_in_length_buckets_are_the_unpadded_ones_with_padding_after(tmp_path: Path) -> None:
    """`pad_to_multiple`: each batch of the memory-mapped splits has source and target-input lengths that are
    multiples, and is the unpadded module's batch followed by padding (the loss's oracle: test_fast_paths.py)."""
    plain, bucketed = _tiny_module(tmp_path), _tiny_module(tmp_path, pad_to_multiple=8)
    for dm in (plain, bucketed):
        dm.setup("fit")
    pad = tokenizer_from_dict(plain.tokenizers["tgt"]).pad_id
    for split in ("train", "val", "test"):
        batches = zip(getattr(plain, f"{split}_dataloader")(), getattr(bucketed, f"{split}_dataloader")(), strict=True)
        for (src0, tgt0), (src, tgt) in batches:
            assert src.size(1) % 8 == 0 and (tgt.size(1) - 1) % 8 == 0, (split, src.shape, tgt.shape)
            assert src.size(1) - src0.size(1) < 8 and tgt.size(1) - tgt0.size(1) < 8
            assert torch.equal(src[:, : src0.size(1)], src0) and src[:, src0.size(1) :].eq(pad).all()
            assert torch.equal(tgt[:, : tgt0.size(1)], tgt0) and tgt[:, tgt0.size(1) :].eq(pad).all()


def test_overlong_pairs_dropped_from_training_but_kept_in_evaluation(tmp_path: Path) -> None:
    small = {"max_len": 8, "max_tokens": 64, "src_tokenizer": "word", "tgt_tokenizer": "word"}
    dm = _tiny_module(tmp_path, **small)
    dm.setup("fit")
    kept = sum(len(b.src) for b in dm.train_dataloader())
    assert 0 < kept < len(dm.train_pairs())
    assert sum(len(b.src) for b in dm.test_dataloader()) == len(dm.test_pairs())
    assert max(b.tgt.shape[1] for b in dm.test_dataloader()) <= 8
    trunc = _tiny_module(tmp_path, **small, overlong="truncate")
    assert sum(len(b.src) for b in trunc.train_dataloader()) == len(trunc.train_pairs())


def test_training_on_short_pairs_with_a_model_of_longer_positions_is_logged(tmp_path: Path) -> None:
    # Train short, test long (ALiBi's experiment): the data's max_len below the model's. Lightning refuses to
    # merge two hyper-parameters of one name and different values into a logger; the run must not stop there.
    from lightning.pytorch.loggers import CSVLogger

    from tasks import Seq2SeqTransformer

    dm = _tiny_module(tmp_path, max_len=8, max_tokens=64, src_tokenizer="word", tgt_tokenizer="word")
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, **TOY_MODEL)
    trainer = quiet_trainer(tmp_path, logger=CSVLogger(tmp_path), max_steps=1, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 1
    assert "max_len: 32" in (Path(trainer.logger.log_dir) / "hparams.yaml").read_text()  # the model's


def test_tokenizers_setter_uses_given_tokenizers(tmp_path: Path) -> None:
    dm = _tiny_module(tmp_path)
    other = _tiny_module(tmp_path, tgt_tokenizer="word")
    other.tokenizers = dm.tokenizers
    assert other.tokenizers == dm.tokenizers
    assert next(iter(other.val_dataloader())).tgt.tolist() == next(iter(dm.val_dataloader())).tgt.tolist()


# ---------------------------------------------------------------------------------------------- real data


@pytest.mark.skipif(not CMN.exists(), reason=f"real Tatoeba data absent: put cmn.txt in {CMN.parent}")
def test_real_tatoeba_cmn_eng_loads() -> None:
    dm = ParallelCorpusDataModule(data_dir=str(CMN.parent), download=False)
    dm.setup("fit")
    n = len(dm.train_pairs()) + len(dm.val_pairs()) + len(dm.test_pairs())
    assert n == 29_155  # 29,156 lines, the last one blank
    assert not set(dm.train_pairs()) & set(dm.test_pairs())
    src, ref = dm.test_pairs()[0]
    assert ref == unicodedata.normalize("NFC", ref) and not ref.startswith("\ufeff")
    assert all(dm.tgt_vocab.decode(dm.tgt_vocab.encode(t)) == t for _, t in dm.val_pairs()[:200])
    assert len(dm.tgt_vocab) == 8000 and 2000 < len(dm.src_vocab) < 8000


@pytest.mark.skipif(not MULTI30K.exists(), reason=f"real Multi30k data absent: put its six .de.gz/.en.gz in {MULTI30K}")
def test_real_multi30k_loads() -> None:
    dm = ParallelCorpusDataModule(
        str(MULTI30K), format="aligned", src_lang="de", tgt_lang="en",
        src_tokenizer="word", tgt_tokenizer="word", download=False,
    )  # fmt: skip
    assert [len(dm.train_pairs()), len(dm.val_pairs()), len(dm.test_pairs())] == [29_000, 1_014, 1_000]
    assert dm.test_pairs()[0][1].endswith(".")
    dm.setup("fit")
    assert sum(len(b) for b in dm.train_dataloader().batch_sampler) == 29_000  # every pair in one epoch's batches
