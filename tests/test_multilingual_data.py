"""The multilingual data module: language tags as single symbols, every batch from one direction with that
direction's tags, temperature sampling in the stated proportions, equal disjoint shards under DDP, each direction
scored by itself (and their mean), and bad input in one line each (all on CPU, on small generated files)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF

import tasks.seq2seq as task
from common.errors import CorpusFormatError, DataNotFoundError, HyperparameterError
from datamodules.languages import source_tag, target_tag
from datamodules.multilingual import MultilingualCorpusDataModule
from datamodules.pair_sampling import TemperatureBatchSampler
from models.config import Seq2SeqSettings
from tasks import Seq2SeqTransformer
from tasks.metrics import scores_by_set
from tests import multilingual_ddp, token_loss_ddp
from tests.helpers import FIT, ROOT, assert_close, assert_one_line_error, quiet_trainer, run, run_script, save_checkpoint

LANGS = ("de", "en", "fr", "cs")
SPLIT_SIZES = {"train": 120, "val": 9, "test": 7}
PREFIXES = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def sentence(lang: str, i: int) -> str:
    """Line i of a language: words of its own (`de3`), so a decoded sentence tells which language it is."""
    return " ".join(f"{lang}{(i * k + k) % 17}" for k in range(1, 3 + i % 5))


def write_corpus(folder: Path, langs=LANGS, short: str | None = None) -> Path:
    """Line-aligned gzip files, Multi30k's layout; `short`'s training file one line short."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in SPLIT_SIZES.items():
        for lang in langs:
            lines = [sentence(lang, i) for i in range(n - (split == "train" and lang == short))]
            with gzip.open(folder / f"{PREFIXES[split]}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
    return folder


def module(tmp_path: Path, **kw) -> MultilingualCorpusDataModule:
    kw = {"pairs": ["de-en", "fr-en", "en-cs"], "vocab_size": 300, "max_tokens": 64, "max_len": 24, **kw}
    return MultilingualCorpusDataModule(data_dir=str(write_corpus(tmp_path / "m30k")), download=False, **kw)


def test_a_tag_is_one_symbol_of_the_joint_tokenizer_never_split(tmp_path):
    dm = module(tmp_path, source_tags=True)
    tok = dm.joint_tokenizer()
    assert len(tok) <= 300 and dm.tokenizers["src"] == dm.tokenizers["tgt"]  # the tags among its 300 entries
    for tag in (target_tag("en"), target_tag("cs"), source_tag("de"), source_tag("fr"), source_tag("en")):
        (tag_id,) = tok.encode(tag)
        assert tok.encode(f"{tag} de1 de2") == [tag_id, *tok.encode("de1 de2")] == tok.encode(f"{tag}de1 de2")
    assert len(tok.encode(target_tag("fr"))) > 1  # no direction writes French: no symbol of its own


@pytest.mark.parametrize("source_tags", [False, True])
def test_every_batch_holds_one_direction_and_its_tags(tmp_path, source_tags):
    """Each batch's rows decode to that direction's tagged source lines and its target lines (the files: the oracle),
    and each row's first token (and second, with source tags) is the direction's tag."""
    dm = module(tmp_path, source_tags=source_tags, temperature=3.0)
    dm.setup()
    tok = dm.joint_tokenizer()
    directions = [("de", "en"), ("fr", "en"), ("en", "cs")]
    for split, n in SPLIT_SIZES.items():
        lines = {lang: {sentence(lang, i) for i in range(n)} for lang in LANGS}
        seen = set()
        for batch in getattr(dm, f"{split}_dataloader")():
            firsts = {tok.decode([i]) for i in batch.src[:, 0].tolist()}
            assert len(firsts) == 1, firsts  # one target tag a batch
            texts = [tok.decode(row) for row in batch.src.tolist()]
            untagged = [text.split(" ", 1)[-1] for text in texts]  # the tags decode as one word: >>en<<__de__
            found = {(s, t) for s, t in directions if all(x in lines[s] for x in untagged)}
            assert len(found) == 1, texts[:2]
            (src, tgt) = found.pop()
            assert firsts == {target_tag(tgt)}
            if source_tags:
                assert {tok.decode([i]) for i in batch.src[:, 1].tolist()} == {source_tag(src)}
            assert all(tok.decode(row) in lines[tgt] for row in batch.tgt.tolist())
            seen.add((src, tgt))
        assert seen == set(directions), split
    sets = dm.eval_sets("val")
    assert [s.name for s in sets] == ["de-en", "fr-en", "en-cs"] and all(s.in_mean for s in sets)
    assert sets[2].pairs[4] == (f">>cs<< {'__en__ ' if source_tags else ''}{sentence('en', 4)}", sentence("cs", 4))


def sampler_sizes() -> list[np.ndarray]:
    """Three corpora of 4,000, 1,000 and 250 examples, lengths 1-8; 16 tokens a batch."""
    rng = np.random.default_rng(0)
    return [rng.integers(1, 9, n) for n in (4000, 1000, 250)]


@pytest.mark.parametrize("temperature", [1.0, 5.0])
def test_temperature_sampling_draws_directions_in_the_stated_proportions(temperature):
    lengths = sampler_sizes()
    sampler = TemperatureBatchSampler(lengths, 16, shuffle=True, temperature=temperature, seed=3)
    sizes = np.array([len(x) for x in lengths], dtype=float)
    expected = sizes ** (1 / temperature) / (sizes ** (1 / temperature)).sum()  # p_i ∝ n_i^(1/T)
    bounds = np.cumsum([0, *sizes])
    counts, epochs = np.zeros(3), 20
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in sampler:
            (corpus,) = {int(np.searchsorted(bounds, i, side="right")) - 1 for i in batch}  # one corpus a batch
            assert len(batch) * lengths[corpus][batch - int(bounds[corpus])].max() <= 16  # the token budget
            counts[corpus] += 1
    total = counts.sum()
    sigma = np.sqrt(expected * (1 - expected) / total)
    assert np.all(np.abs(counts / total - expected) < 5 * sigma), (counts / total, expected)
    if temperature > 1:  # flatter: the smallest corpus (5% of the examples) gets about a quarter of the batches
        assert counts[2] / total > 4 * sizes[2] / sizes.sum()


def test_the_draw_is_a_function_of_seed_and_epoch():
    make = lambda seed: TemperatureBatchSampler(sampler_sizes(), 16, shuffle=True, temperature=2.0, seed=seed)  # noqa: E731
    a, b, c = make(1), make(1), make(2)
    assert [x.tolist() for x in a] == [x.tolist() for x in b] != [x.tolist() for x in c]
    first = [x.tolist() for x in a]
    a.set_epoch(1)
    assert [x.tolist() for x in a] != first


def test_shards_are_disjoint_and_equal_across_ranks():
    """As the bilingual sampler's: rank r takes every 3rd batch of the one process's sequence; training drops the
    remainder, evaluation repeats the first batches and sees every example."""
    lengths = [np.array([1 + (i * 7) % 9 for i in range(n)]) for n in (301, 97, 60)]
    for shuffle in (True, False):
        whole = [b.tolist() for b in TemperatureBatchSampler(lengths, 24, shuffle, 2.0, seed=1)]
        shards = [list(TemperatureBatchSampler(lengths, 24, shuffle, 2.0, seed=1, num_replicas=3, rank=r)) for r in range(3)]
        n = len(shards[0])
        assert len({len(s) for s in shards}) == 1 and len(whole) % 3 != 0
        dealt = [shards[i % 3][i // 3].tolist() for i in range(3 * n)]
        if shuffle:
            assert dealt == whole[: 3 * n] and len(whole) - 3 < 3 * n
        else:
            assert dealt == [whole[i % len(whole)] for i in range(3 * n)]
            seen = [i for b in whole for i in b]
            assert sorted(seen) == list(range(sum(map(len, lengths))))  # every example once, before the repeats


def test_two_ddp_processes_train_as_one_process_accumulating_their_batches(tmp_path):
    """Token-exact under DDP, as the bilingual path: on two gloo processes rank r trains on batch r of the one
    process's sequence, and the step's gradient is the one process's over those two batches accumulated."""
    data = write_corpus(tmp_path / "m30k")
    dm = multilingual_ddp.data_module(str(data))
    dm.prepare_data()  # once, before the processes start, as fit's rank 0 does
    out = tmp_path / "ddp.pt"
    result = run([sys.executable, str(ROOT / "tests" / "multilingual_ddp.py"), str(data), str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(out)
    net = multilingual_ddp.model(dm)
    token_loss_ddp.trainer(accumulate_grad_batches=2).fit(net, datamodule=dm)
    assert len(net.seen) == 2 and net.seen[0] != net.seen[1]
    assert saved["batches"] == [[net.seen[0]], [net.seen[1]]]
    assert sum(g.abs().sum() for g in net.captured.values()) > 0  # a step that learns something, not zeros on both sides
    assert_close(saved["grads"], net.captured)


def test_each_direction_is_scored_and_the_mean_is_their_mean():
    sets = [("de-en", [("a", "the cat sat on the mat")] * 2, True), ("fr-en", [("b", "a dog")] * 3, True)]
    sets.append(("de-fr", [("c", "un chat")], False))
    hyps = ["the cat sat on a mat", "the cat sat", "a dog", "dog", "a dog", "un chien"]
    values, lines, _ = scores_by_set("test", sets, hyps)
    bleu = lambda h, r: BLEU().corpus_score(h, [r]).score  # noqa: E731
    chrf = lambda h, r: CHRF().corpus_score(h, [r]).score  # noqa: E731
    assert values["test/bleu/de-en"] == pytest.approx(bleu(hyps[:2], ["the cat sat on the mat"] * 2))
    assert values["test/chrf/fr-en"] == pytest.approx(chrf(hyps[2:5], ["a dog"] * 3))
    assert values["test/bleu/de-fr"] == pytest.approx(bleu(hyps[5:], ["un chat"]))
    for metric in ("bleu", "chrf"):  # zero-shot de-fr is reported, outside the mean
        assert values[f"test/{metric}"] == pytest.approx((values[f"test/{metric}/de-en"] + values[f"test/{metric}/fr-en"]) / 2)
    assert len(lines) == 4 and "not in the mean" in lines[3]
    one, _, _ = scores_by_set("val", [("", [("a", "a dog")], True)], ["a dog"])
    assert set(one) == {"val/bleu", "val/chrf"}  # a bilingual corpus: the keys as before


@pytest.mark.parametrize("limit", [1, 1.0])
def test_limit_test_batches_shortens_the_decoding_test_of_every_direction(tmp_path, limit, monkeypatch):
    """`--trainer.limit_test_batches` keeps a share of the test's batches (1 of 3 here; 1.0: all): the beam-decoded
    test keeps the same share of each direction's sentences, its first (a whole many-to-many test is minutes)."""
    dm = module(tmp_path)
    net = Seq2SeqSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, max_len=24)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, net=net, attention_maps=0, eval_beam_size=1)
    decoded = []
    monkeypatch.setattr(task, "translate_shared", lambda module, sources, beam: decoded.extend(sources) or ["a"] * len(sources))
    quiet_trainer(tmp_path, limit_test_batches=limit).test(model, datamodule=dm, verbose=False)
    batches = len(dm.test_dataloader())
    assert batches == 3
    kept = [d.pairs[: -(-len(d.pairs) // batches) if isinstance(limit, int) else None] for d in dm.eval_sets("test")]
    assert decoded == [src for pairs in kept for src, _ in pairs]
    assert len(decoded) < sum(len(d.pairs) for d in dm.eval_sets("test")) / 2 if isinstance(limit, int) else True


def test_validation_and_test_log_every_direction_and_their_mean(tmp_path, monkeypatch):
    dm = module(tmp_path, test_pairs=["fr-cs"])
    net = Seq2SeqSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, max_len=24)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, net=net, attention_maps=0, bleu_val_sentences=3, eval_beam_size=1)
    trainer = quiet_trainer(tmp_path, limit_val_batches=1)  # the whole test: its line counts every sentence
    for stage, run_stage in (("val", trainer.validate), ("test", trainer.test)):
        # An untrained model scores 0 everywhere: the outputs here are each source's own reference, but for fr-en
        # nothing, so each direction's score says whose hypotheses it was given.
        answers = {src: "" if s.name == "fr-en" else ref for s in dm.eval_sets(stage) for src, ref in s.pairs}
        monkeypatch.setattr(
            task, "translate_shared", lambda module, sources, beam, answers=answers: [answers[s] for s in sources]
        )
        metrics = run_stage(model, datamodule=dm, verbose=False)[0]
        names = ["de-en", "fr-en", "en-cs"] + (["fr-cs"] if stage == "test" else [])
        assert metrics[f"{stage}/bleu/de-en"] == pytest.approx(100) and metrics[f"{stage}/bleu/fr-en"] == 0
        # into English and Czech: each direction's share of outputs in its target language (empty ones are in none)
        assert metrics[f"{stage}/on_target/de-en"] == 100 and metrics[f"{stage}/on_target/fr-en"] == 0
        for metric in ("bleu", "chrf"):
            assert {f"{stage}/{metric}/{n}" for n in names} <= set(metrics), sorted(metrics)
            mean = sum(metrics[f"{stage}/{metric}/{n}"] for n in names[:3]) / 3
            assert metrics[f"{stage}/{metric}"] == pytest.approx(mean, abs=1e-4)
    report = model.score_reports["test"]["line"]
    assert "test/bleu/fr-cs=" in report and "test/bleu/de-en=" in report and "on 7 sentences" in report


@pytest.mark.parametrize(
    "pairs, message",
    [
        (["ge-en"], "pair 'ge-en': unknown language 'ge'; name each language by its ISO 639-1 code"),
        (["deu-en"], "unknown language 'deu'"),
        (["de_en"], "pair 'de_en' is not SRC-TGT, two language codes joined by '-' (e.g. de-en)"),
        (["de-en", "fr-en", "de-en"], "pairs: de-en given twice"),
        (["de-de"], "pair 'de-de' translates a language into itself"),
    ],
)
def test_a_bad_direction_is_one_line(tmp_path, pairs, message):
    with pytest.raises(HyperparameterError) as err:
        MultilingualCorpusDataModule(data_dir=str(tmp_path), pairs=pairs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_direction_with_training_files_of_its_own_trains_on_them(tmp_path):
    """Pivot-generated de-fr pairs in pivot/ (`train_prefixes`): that direction's training batches are theirs, while
    fr-en's French and de-fr's validation stay the corpus's own files."""
    data = write_corpus(tmp_path / "m30k")
    (data / "pivot").mkdir()
    made = {lang: [f"{sentence(lang, i)} {lang}99" for i in range(SPLIT_SIZES["train"])] for lang in ("de", "fr")}
    for lang, lines in made.items():
        (data / "pivot" / f"train.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    dm = MultilingualCorpusDataModule(
        data_dir=str(data), pairs=["de-en", "fr-en", "de-fr"], train_prefixes={"de-fr": "pivot/train"},
        vocab_size=300, max_tokens=64, max_len=24, download=False,
    )  # fmt: skip
    dm.setup()
    tok = dm.joint_tokenizer()
    targets = {"en": set(), "fr": set()}
    for batch in dm.train_dataloader():
        (tag,) = {tok.decode([i]) for i in batch.src[:, 0].tolist()}
        targets[tag.strip("><")] |= {tok.decode(row) for row in batch.tgt.tolist()}
    assert targets["fr"] == set(made["fr"]) and all(" en99" not in t and " fr99" not in t for t in targets["en"])
    val = {s.name: s.pairs for s in dm.eval_sets("val")}
    assert val["de-fr"][3] == (f">>fr<< {sentence('de', 3)}", sentence("fr", 3))
    with pytest.raises(HyperparameterError, match=r"^train_prefixes: fr-de is not in pairs; only a trained direction"):
        module(tmp_path, train_prefixes={"fr-de": "pivot/train"})


def test_a_test_pair_into_a_language_never_written_is_refused(tmp_path):
    with pytest.raises(HyperparameterError, match=r"^test_pairs: de-fr needs a model that translates into fr; no pair does$"):
        MultilingualCorpusDataModule(data_dir=str(tmp_path), pairs=["de-en", "fr-en"], test_pairs=["de-fr"])


def test_a_test_pair_that_is_also_trained_is_refused(tmp_path):
    with pytest.raises(
        HyperparameterError, match=r"^test_pairs: fr-en is also in pairs \(trained\); test_pairs are never trained$"
    ):
        module(tmp_path, test_pairs=["fr-cs", "fr-en"])


def test_a_language_with_no_files_names_them(tmp_path):
    dm = MultilingualCorpusDataModule(data_dir=str(write_corpus(tmp_path / "m30k")), pairs=["de-en", "it-en"], download=False)
    with pytest.raises(DataNotFoundError) as err:
        dm.tokenizers
    line = str(err.value)
    assert "train.it.gz" in line and "val.it.gz" in line and "train.en" not in line and "\n" not in line


def test_a_pair_whose_files_differ_in_length_names_both(tmp_path):
    dm = MultilingualCorpusDataModule(
        data_dir=str(write_corpus(tmp_path / "m30k", short="fr")), pairs=["de-en", "fr-en"], vocab_size=300, download=False
    )
    with pytest.raises(CorpusFormatError, match=r"train\.fr\.gz has 119 lines, .*train\.en\.gz has 120"):
        dm.setup()


def test_the_recipes_bad_pair_is_one_line_from_the_command_line(tmp_path):
    recipe = str(ROOT / "configs" / "multi30k_many_to_one.yaml")
    result = run([*FIT, "--config", recipe, "--data.init_args.pairs", "[de_en]", "--trainer.default_root_dir", str(tmp_path)])
    assert result.returncode == 2
    assert_one_line_error(result, "pair 'de_en' is not SRC-TGT")


def test_evaluate_pair_tags_each_source_line_as_the_data_module_does(tmp_path, capsys):
    """`--pair de-en` on the untagged file translates what the file tagged by the data module translates, and what
    `--tgt-lang en` (datamodules.languages: the tag as an id) does; no language, or two, is one line."""
    dm = module(tmp_path)
    net = Seq2SeqSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, max_len=24)
    ckpt = str(save_checkpoint(Seq2SeqTransformer(tokenizers=dm.tokenizers, net=net, max_len_b=4), tmp_path / "m.ckpt"))
    data = Path(dm.hparams.data_dir)
    tagged_by_module = tmp_path / "tagged.de"
    tagged_by_module.write_text("".join(s + "\n" for s, _ in dm.eval_sets("test")[0].pairs), encoding="utf-8")
    common = ["--ckpt", ckpt, "--ref", str(data / "test_2016_flickr.en.gz"), "--beam-size", "1"]
    src = str(data / "test_2016_flickr.de.gz")
    code, out, _ = run_script(capsys, "evaluate", *common, "--src", src, "--pair", "de-en", "--hyp-out", str(tmp_path / "a"))
    assert code == 0 and "SacreBLEU" in out
    assert len(set((tmp_path / "a").read_text().splitlines())) > 1  # outputs that depend on the source's ids
    code, _, _ = run_script(capsys, "evaluate", *common, "--src", str(tagged_by_module), "--hyp-out", str(tmp_path / "b"))
    assert code == 0 and (tmp_path / "a").read_text() == (tmp_path / "b").read_text()
    code, _, _ = run_script(capsys, "evaluate", *common, "--src", src, "--tgt-lang", "en", "--hyp-out", str(tmp_path / "c"))
    assert code == 0 and (tmp_path / "c").read_text() == (tmp_path / "a").read_text()  # the tag as an id, not text
    code, _, err = run_script(capsys, "evaluate", *common, "--src", src)  # a multilingual model, no language
    assert code == 2 and "this model is multilingual: give the target language" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_script(capsys, "evaluate", *common, "--src", str(tagged_by_module), "--tgt-lang", "cs")
    assert code == 2 and "starts with >>en<< but tgt_lang='cs': give the language once" in err
    code, _, err = run_script(capsys, "evaluate", *common, "--src", src, "--pair", "de_en")
    assert code == 2 and err.strip() == "error: --pair 'de_en' is not SRC-TGT, two language codes joined by '-' (e.g. de-en)"


def test_evaluate_pair_on_a_bilingual_model_is_one_line(tmp_path, capsys):
    """A bilingual model has no >>en<< token: `--pair de-en` would put the tag before every source as text and score
    that, silently lower. It is refused as `--tgt-lang en` is."""
    from datamodules import ToyTranslationDataModule

    net = Seq2SeqSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, max_len=24)
    model = Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, net=net)
    ckpt = str(save_checkpoint(model, tmp_path / "m.ckpt"))
    (tmp_path / "src.zh").write_text("我 是 学 生\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("I am a student\n", encoding="utf-8")
    files = ["--ckpt", ckpt, "--src", str(tmp_path / "src.zh"), "--ref", str(tmp_path / "ref.en")]
    code, _, err = run_script(capsys, "evaluate", *files, "--pair", "zh-en", "--hyp-out", str(tmp_path / "hyps"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--pair zh-en: this model translates into one language" in err
    assert not (tmp_path / "hyps").exists()
    assert run_script(capsys, "evaluate", *files)[0] == 0


def test_evaluate_prints_the_share_of_outputs_in_the_target_language(tmp_path, capsys):
    """`--language-text LANG=FILE` per language: the line gives the share of --hyp-out's lines that
    tasks.metrics.LanguageIdentifier, trained on those files, names the target language; misuse is one line each."""
    from tasks.metrics import LanguageIdentifier

    dm = module(tmp_path)
    net = Seq2SeqSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, max_len=24)
    ckpt = str(save_checkpoint(Seq2SeqTransformer(tokenizers=dm.tokenizers, net=net, max_len_b=4), tmp_path / "m.ckpt"))
    data = Path(dm.hparams.data_dir)
    texts = {lang: str(data / f"val.{lang}.gz") for lang in ("de", "en")}
    common = ["--ckpt", ckpt, "--ref", str(data / "test_2016_flickr.en.gz"), "--src", str(data / "test_2016_flickr.de.gz")]
    common += ["--beam-size", "1", "--pair", "de-en"]
    languages = [f"--language-text={lang}={file}" for lang, file in texts.items()]
    code, out, err = run_script(capsys, "evaluate", *common, *languages, "--hyp-out", str(tmp_path / "hyps"))
    assert code == 0, err
    hyps = (tmp_path / "hyps").read_text(encoding="utf-8").splitlines()
    assert sum(bool(h.strip()) for h in hyps) > len(hyps) // 2  # outputs to identify, not empty lines
    identifier = LanguageIdentifier({lang: read_lines(file) for lang, file in texts.items()})
    found = identifier.languages_of(hyps)
    (line,) = [line for line in out.splitlines() if line.startswith("on target: ")]
    assert line.startswith(f"on target: {100 * found['en'] / len(hyps):.1f}% of outputs in en (among de, en; off target: ")
    missing = str(tmp_path / "none.fr")
    for flags, message in (
        ([f"--language-text=de={texts['de']}", f"--language-text=fr={texts['de']}"], "the target (en) among them"),
        ([f"--language-text=en={texts['en']}"], "give at least two languages"),
        (["--language-text", "en"], "give LANG=FILE"),
        ([*languages, f"--language-text=fr={missing}"], f"--language-text fr: file not found: {missing}"),
    ):
        code, _, err = run_script(capsys, "evaluate", *common, *flags)
        assert code == 2 and message in err.strip().splitlines()[-1], (flags, err)  # argparse's usage, then the line
    no_target = [a for a in common if a not in ("--pair", "de-en")]
    code, _, err = run_script(capsys, "evaluate", *no_target, *languages)
    assert code == 2 and "--language-text needs the target language" in err


def read_lines(path: str) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def test_a_resumed_epoch_goes_on_where_it_stopped(tmp_path):
    """The training loader's state after 3 batches: a new loader given it hands out the epoch's other batches, none
    again (resumable.py), the temperature draw being a function of (seed, epoch) alone."""
    dm = module(tmp_path, temperature=2.0)
    whole = [batch.src.tolist() for batch in dm.train_dataloader()]
    loader = dm.train_dataloader()
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = loader.state_dict()
    again = dm.train_dataloader()
    again.load_state_dict(state)
    assert [batch.src.tolist() for batch in again] == whole[3:] and len(whole) > 3
