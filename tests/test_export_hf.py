"""Export to a Hugging Face Marian folder: `transformers` itself is the oracle.

Each exported folder is loaded with `transformers` alone (`AutoModelForSeq2SeqLM`, `AutoTokenizer`, `pipeline`)
and compared with our model: teacher-forced logits for every exportable option on random networks, greedy and
beam-4 outputs of `generate` token for token (alpha 0, where the two searches rank alike), a trained toy model
through `pipeline("translation")`, our tokenizers' ids and text through `AutoTokenizer`, and the folder read back
by scripts/import_pretrained.py (logits equal to the original's). Refused options, bad input, a full disk and an
offline `--push-to-hub` are one line each.
"""

from __future__ import annotations

import gzip
import json
import resource
import shutil
import signal
import subprocess
import sys

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from common.checkpoints import load_checkpoint
from datamodules.batching import collate_pairs, encode_source, encode_target, frame_source
from datamodules.tokenizers import train_tokenizer
from datamodules.toy import TOY_PAIRS
from datamodules.vocab import Vocab
from deploy.huggingface import HubExportError, export_huggingface, marian_shaped, push_to_hub
from models.beam import beam_search
from models.config import Seq2SeqSettings
from models.seq2seq import Seq2SeqNet
from tasks import Seq2SeqTransformer
from tests.helpers import (
    ENV,
    HANG_TIMEOUT,
    IN_TMPFS,
    MARIAN_CONFIGS,
    MARIAN_SOURCES,
    ROOT,
    SHARED_DATA,
    TOY_MODEL,
    can_mount,
    forced_eos,
    load_script,
    make_marian,
    multi30k_lines,
    quiet_trainer,
    run_script,
    save_checkpoint,
    script,
    snapshot,
    train_spm,
)

transformers = pytest.importorskip("transformers", reason="pip install -e '.[bench]'")

WORDS = Vocab([f"w{i}" for i in range(60)], "word").to_dict()
SRC = ["w1 w2 w3 w4 w5", "w7 w8", "w9 w10 w11 w12 w13 w14 w15 w16", "w30", "w5 w5 w6 w50 w51 w52"]
EOS = 2


def random_model(eos_bias: float = 0.0, **options) -> Seq2SeqTransformer:
    """A small random model, weights scaled up so that a wrongly mapped weight shows (as tests/test_export.py's);
    `eos_bias` (with `generator_bias=True`) makes `<eos>` likely, so that searches end before the limit."""
    torch.manual_seed(0)
    sizes = dict(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64, max_len=64)
    model = Seq2SeqTransformer(tokenizers={"src": WORDS, "tgt": WORDS}, net=Seq2SeqSettings(**{**sizes, **options})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3) if p.dim() >= 2 else p.add_(0.3 * torch.randn_like(p))
        if eos_bias:
            model.net.generator.bias[EOS] += eos_bias
    return model


def load_hf(folder):
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), transformers.AutoTokenizer.from_pretrained(folder)


def same_rows(ours: torch.Tensor, theirs: torch.Tensor, eos: int) -> None:
    """The same ids in every row up to its first `<eos>` (what follows is padding, which `generate`'s beam
    search writes as `<eos>` and ours as `<pad>`)."""

    def cut(row: list[int]) -> list[int]:
        return row[: row.index(eos) + 1] if eos in row else row

    assert [cut(r) for r in ours.tolist()] == [cut(r) for r in theirs.tolist()], (ours, theirs)


def assert_same_logits(model, hf, tokenizer, sources, atol) -> None:
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    src = model.translator.encode_sources(sources)
    assert torch.equal(batch["input_ids"], src)  # AutoTokenizer gives our ids, <eos> appended
    torch.manual_seed(1)
    tgt = torch.randint(4, len(model.tgt_tokenizer), (len(sources), 9))
    tgt[:, 0] = model.bos_id
    with torch.no_grad():
        ours, theirs = model.net(src, tgt), hf(**batch, decoder_input_ids=tgt).logits
    assert ours.abs().max() > 3  # far from uniform: a wrong weight would show
    torch.testing.assert_close(theirs, ours, atol=atol, rtol=0)


def assert_same_search(model, hf, tokenizer, sources, limit: int = 30, ends: bool = True) -> None:
    """Greedy and beam 4 (alpha 0): `generate`'s ids are ours, token for token, `generate` told to force `<eos>`
    at the limit as ours does. Either every output ends before the limit or none does (`ends`): where some
    hypotheses end and others run to the limit, ours keeps, at the step before the limit, only the unfinished
    ones among the K best (CTranslate2's rule; models/beam.py), `generate` the K best unfinished, by design."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    src = model.translator.encode_sources(sources)
    for beams in (1, 4):
        ours = beam_search(
            model.net, src, bos_id=model.bos_id, eos_id=model.eos_id, max_len=limit, beam_size=beams, length_penalty=0.0
        )
        ended = torch.tensor([row.index(model.eos_id, 1) < limit for row in ours.tolist()])  # before the limit
        assert ended.all() if ends else not ended.any(), f"not the regime asked for: {ended.tolist()}"
        theirs = hf.generate(
            **batch, num_beams=beams, length_penalty=0.0, max_new_tokens=limit, do_sample=False,
            forced_eos_token_id=None, logits_processor=forced_eos(model.eos_id, limit),
        )  # fmt: skip
        # (the config's forced_eos_token_id would count <eos> as log-prob 0; forced_eos counts the model's own)
        same_rows(ours, theirs, model.eos_id)


# ---------------------------------------------------------------------------------------------- random networks

OPTIONS = [
    {},  # our default: interleaved sinusoids (permuted), a final norm after each stack (one more layer)
    {"activation": "gelu"},
    {"activation": "silu"},
    {"tie_embeddings": True, "share_embeddings": True},
    {"tie_embeddings": True},
    {"share_embeddings": True},
    {"final_norm": False},
    {"scale_embeddings": False},
    {"positional": "sinusoidal_halves"},
    {"d_model": 36, "nhead": 3, "num_encoder_layers": 1, "num_decoder_layers": 3, "dim_feedforward": 40},
    {"d_model": 30, "nhead": 2},  # an odd number of sin/cos pairs: 15
    {"dropout": 0.3, "max_len": 48},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "baseline")
def test_random_networks_compute_and_decode_as_ours(tmp_path, options):
    # Our rewrite into Marian's shape is a network of ours computing the same function ...
    model = random_model(**options)
    shaped, state = marian_shaped(model)
    net = Seq2SeqNet(shaped).eval()
    net.load_state_dict(state)
    src = model.translator.encode_sources(SRC)
    tgt = torch.randint(4, 60, (len(SRC), 9))
    tgt[:, 0] = model.bos_id
    with torch.no_grad():
        torch.testing.assert_close(net(src, tgt), model.net(src, tgt), atol=1e-4, rtol=0)
    # ... and transformers computes it from the folder: logits, then the searches. A random network's outputs
    # end at once or never; with <eos> out of reach (an output bias) every beam runs the 30 steps to the limit.
    hf, tokenizer = load_hf(export_huggingface(model, tmp_path / "plain"))
    assert_same_logits(model, hf, tokenizer, SRC, atol=1e-4)
    assert hf.config.num_hidden_layers == model.net.config.num_encoder_layers + model.net.config.final_norm
    endless = random_model(eos_bias=-100.0, generator_bias=True, **options)
    hf, tokenizer = load_hf(export_huggingface(endless, tmp_path / "endless"))
    assert_same_search(endless, hf, tokenizer, SRC, ends=False)


REFUSED = [
    ({"norm_first": True}, "norm_first=True"),
    ({"norm": "rmsnorm"}, "norm=rmsnorm"),
    ({"bias": False}, "bias=False"),
    ({"qk_norm": True}, "qk_norm=True"),
    ({"num_kv_heads": 2}, "num_kv_heads=2"),
    ({"activation": "swiglu"}, "activation=swiglu"),
    ({"activation": "geglu"}, "activation=geglu"),
    ({"positional": "rotary"}, "positional=rotary"),
    ({"positional": "learned"}, "positional=learned"),
    ({"positional": "none"}, "positional=none"),
    ({"relative_bias": "t5"}, "relative_bias=t5"),
    ({"relative_bias": "alibi"}, "relative_bias=alibi"),
    ({"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
]


@pytest.mark.parametrize(("options", "name"), REFUSED, ids=[name for _, name in REFUSED])
def test_options_marian_cannot_express_are_refused_by_name(tmp_path, options, name):
    with pytest.raises(HubExportError, match=name.replace("(", r"\(")) as err:
        export_huggingface(random_model(**options), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_separate_vocabularies_are_refused(tmp_path):
    other = Vocab([f"v{i}" for i in range(60)], "word").to_dict()
    model = Seq2SeqTransformer(tokenizers={"src": WORDS, "tgt": other}, net=Seq2SeqSettings(d_model=32, max_len=32))
    with pytest.raises(HubExportError, match="shared_vocab"):
        export_huggingface(model, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- tokenizers


def _multi30k(name: str, n: int) -> list[str]:
    with gzip.open(SHARED_DATA / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


@pytest.mark.parametrize("kind", ["bpe", "unigram", "word", "char"])
def test_auto_tokenizer_gives_our_ids_and_text(tmp_path, kind):
    """Sources encode to our ids, <eos> appended; our target ids decode to our text, unknown pieces as <unk>."""
    train = _multi30k("train.de.gz", 300) + _multi30k("train.en.gz", 300)
    tokenizer = train_tokenizer(train, kind, vocab_size=400 if kind in ("bpe", "unigram") else 1500)
    tokenizers = {"src": tokenizer.to_dict(), "tgt": tokenizer.to_dict()}
    model = Seq2SeqTransformer(tokenizers=tokenizers, net=Seq2SeqSettings(d_model=32, num_encoder_layers=1, num_decoder_layers=1))
    hf_tok = transformers.AutoTokenizer.from_pretrained(export_huggingface(model, tmp_path / "hf"))
    unseen = ["Ein Zebra ﬁndet Ｆｕßball   gut!", "Çà et là: «quoi?» — 日本語 😀", "two  spaces\tand a tab"]
    if kind != "char":  # a character vocabulary reads "<unk>" as five characters; Hugging Face's, as the token
        unseen.append("<unk> x")
    texts = _multi30k("val.de.gz", 40) + _multi30k("val.en.gz", 40) + unseen
    ours = [frame_source(model.src_tokenizer.encode(t), None, model.src_tokenizer.eos_id) for t in texts]
    assert hf_tok(texts)["input_ids"] == ours
    assert any(model.src_tokenizer.unk_id in ids for ids in ours)  # unknown pieces were tried
    for ids in ours:
        target = ids[:-1]  # a target's ids as our search writes them (<eos> then padding after it)
        want = model.tgt_tokenizer.decode([*target, EOS, 0, 0])
        assert hf_tok.decode([*target, EOS, 0, 0], skip_special_tokens=True) == want


# ---------------------------------------------------------------------------------------------- the toy model

SHARED_TOY = Vocab.build([s for s, _ in TOY_PAIRS] + [t for _, t in TOY_PAIRS], level="word")


@pytest.fixture(scope="module")
def trained_toy(tmp_path_factory):
    """The toy pairs with one vocabulary for both sides (the sources' characters are space-separated words)."""
    L.seed_everything(0)
    pairs = [(encode_source(SHARED_TOY, s), encode_target(SHARED_TOY, t)) for s, t in TOY_PAIRS] * 16
    loader = DataLoader(pairs, batch_size=3, shuffle=True, collate_fn=collate_pairs)
    tokenizers = {"src": SHARED_TOY.to_dict(), "tgt": SHARED_TOY.to_dict()}
    model = Seq2SeqTransformer(tokenizers=tokenizers, bleu_every_n_epochs=0, **TOY_MODEL)
    quiet_trainer(max_epochs=14, gradient_clip_val=1.0).fit(model, train_dataloaders=loader)
    model.eval()
    folder = tmp_path_factory.mktemp("toy")
    ckpt = save_checkpoint(model, folder / "toy.ckpt")
    load_script("export").main(["--ckpt", str(ckpt), "--to", "hf", str(folder / "hf")])
    return model, ckpt, folder / "hf"


def pipeline_translations(folder, sentences: list[str], **generate) -> list[str]:
    """`pipeline("translation", model=folder)`'s texts. transformers 5 removed the task; there, its own three
    steps: the tokenizer, `generate` with the folder's generation config, `batch_decode` without special tokens."""
    try:
        translator = transformers.pipeline("translation", model=str(folder), device="cpu")
    except KeyError:  # "The task translation has been removed from transformers"
        hf, tokenizer = load_hf(folder)
        outputs = hf.generate(**tokenizer(sentences, return_tensors="pt", padding=True), **generate)
        return tokenizer.batch_decode(outputs, skip_special_tokens=True)
    return [r["translation_text"] for r in translator(sentences, **generate)]


def test_pipeline_translates_the_toy_set_as_ours(trained_toy):
    model, _, folder = trained_toy
    sources = [s for s, _ in TOY_PAIRS]
    assert model.translate(sources) == [t for _, t in TOY_PAIRS]
    assert pipeline_translations(folder, sources) == model.translate(sources, beam_size=4)  # the folder's beam 4
    assert pipeline_translations(folder, sources, num_beams=1) == model.translate(sources)
    hf, tokenizer = load_hf(folder)
    more = sources + ["我 是", "学 生 我", "是 是 是", "我 喜 欢 男 生"]
    assert_same_search(model, hf, tokenizer, more)
    assert_same_logits(model, hf, tokenizer, more, atol=1e-4)


def test_hf_translate_benchmark_translates_as_translate_py(trained_toy, capsys):
    """benchmarks/hf_translate.py (transformers alone, the Multi30k comparison of docs/results/benchmarks-exports.md):
    our outputs, an empty line kept as one, greedy and beam 4 at alpha 0."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import hf_translate

    model, _, folder = trained_toy
    lines = [s for s, _ in TOY_PAIRS] + ["", "学 生 我", "是 是 是"]
    want = [model.translate([line])[0] if line else "" for line in lines]
    assert hf_translate.main([str(folder), "--batch-size", "2"], lines=lines) == want
    beam = hf_translate.main([str(folder), "--beam-size", "4"], lines=lines[:3])
    assert beam == model.translate(lines[:3], beam_size=4, length_penalty=0.0)
    assert capsys.readouterr().out.splitlines()[: len(lines)] == want


def test_folder_holds_what_transformers_and_the_hub_expect(trained_toy):
    _, ckpt, folder = trained_toy
    names = {p.name for p in folder.iterdir()}
    expected = {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
    }
    assert expected <= names, names
    assert (folder / "model.safetensors").stat().st_mode == (folder / "config.json").stat().st_mode  # readable as it
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "marian" and config["architectures"] == ["MarianMTModel"]
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (1, 2, 0)
    assert generation["num_beams"] == 4 and generation["max_length"] == TOY_MODEL["net"].max_len
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: translation") and str(ckpt) in card


def test_import_pretrained_reads_the_folder_back(tmp_path, trained_toy, capsys):
    """scripts/import_pretrained.py OUT_DIR: a checkpoint of ours again, whose logits are the original's."""
    model, _, folder = trained_toy
    out = tmp_path / "back.ckpt"
    code, _, err = run_script(capsys, "import_pretrained", str(folder), "--out", str(out), "--length-penalty", "0")
    assert code == 0, err
    back = load_checkpoint(Seq2SeqTransformer, out).eval()
    assert back.src_tokenizer.encode("我 是 学 生") == model.src_tokenizer.encode("我 是 学 生")
    sources = [s for s, _ in TOY_PAIRS] + ["学 生 我"]
    src = model.translator.encode_sources(sources)
    assert torch.equal(back.translator.encode_sources(sources), src)
    tgt = torch.randint(4, len(SHARED_TOY), (len(sources), 7))
    tgt[:, 0] = model.bos_id
    with torch.no_grad():
        torch.testing.assert_close(back.net(src, tgt), model.net(src, tgt), atol=1e-4, rtol=0)
    assert back.translate(sources) == model.translate(sources)


# ---------------------------------------------------------------------------------------------- a Marian model


def test_an_imported_marian_model_exports_back_to_marian(tmp_path):
    """A random OPUS-MT-shaped model (tests/test_pretrained.py's), imported and exported: the folder computes what
    the original computes, and its MarianTokenizer gives the original's ids."""
    import sentencepiece  # noqa: F401 (the import's tokenizers)

    spm_models = train_spm(multi30k_lines("train.de.gz", 400), 60), train_spm(multi30k_lines("train.en.gz", 400), 60)
    original, tok = make_marian(
        tmp_path / "marian", spm_models, "separate-untied-gelu", eos_bias=MARIAN_CONFIGS["separate-untied-gelu"][2]
    )
    model = Seq2SeqTransformer.from_pretrained(str(tmp_path / "marian"))
    hf, tokenizer = load_hf(export_huggingface(model, tmp_path / "hf"))
    assert type(tokenizer).__name__ == "MarianTokenizer"
    batch = tok(MARIAN_SOURCES, return_tensors="pt", padding=True)
    assert torch.equal(tokenizer(MARIAN_SOURCES, return_tensors="pt", padding=True)["input_ids"], batch["input_ids"])
    tgt = torch.randint(0, original.config.pad_token_id, (len(MARIAN_SOURCES), 9))
    tgt[:, 0] = original.config.pad_token_id
    with torch.no_grad():
        torch.testing.assert_close(
            hf(**batch, decoder_input_ids=tgt).logits, original(**batch, decoder_input_ids=tgt).logits, atol=1e-5, rtol=0
        )
    banned = json.loads((tmp_path / "hf" / "generation_config.json").read_text())["bad_words_ids"]
    assert banned == [[t] for t in dict.fromkeys((model.tgt_tokenizer.pad_id, model.tgt_tokenizer.bos_id))]
    assert_same_search(model, hf, tokenizer, MARIAN_SOURCES)


# ---------------------------------------------------------------------------------------------- the script's faults


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, trained_toy, capsys):
    _, ckpt, _ = trained_toy
    out = tmp_path / "hf"
    rotary = save_checkpoint(random_model(positional="rotary"), tmp_path / "rotary.ckpt")
    mnist = ROOT / "tests" / "fixtures" / "mnist-7ae343f.ckpt"

    def export(*args):
        code, _, err = run_script(capsys, "export", "--to", "hf", *map(str, args))
        return code, err

    for args, message in (([rotary], "positional=rotary"), ([mnist], "not a Seq2SeqTransformer")):
        code, err = export("--ckpt", *args, out)
        assert code == 2 and err.count("\n") == 1 and err.startswith("error:") and message in err, (args, err)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["rotary.ckpt"]
    code, err = export("--ckpt", ckpt, "--quantization", "int8", out)
    assert code == 2 and "--quantization is CTranslate2's" in err  # argparse's usage line, then this one
    # An existing folder is kept unless --force, and --force replaces an earlier export only.
    assert export("--ckpt", ckpt, out)[0] == 0
    code, err = export("--ckpt", ckpt, out)
    assert code == 2 and err.count("\n") == 1 and "--force" in err
    assert export("--ckpt", ckpt, out, "--force")[0] == 0
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    code, err = export("--ckpt", ckpt, precious, "--force")
    assert code == 2 and "refusing" in err and (precious / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "precious", "rotary.ckpt"]  # no temporary folder left


def _file_size_limit():
    """preexec_fn: no file may grow past 64 KiB (the weights are larger): EFBIG, as a full disk gives ENOSPC."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, trained_toy):
    _, ckpt, _ = trained_toy
    out = tmp_path / "place" / "hf"
    cmd = [sys.executable, str(ROOT / "scripts" / "export.py"), "--ckpt", str(ckpt), "--to", "hf", str(out)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT, preexec_fn=_file_size_limit
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert f"cannot write {out}: no space left" in done.stderr
    assert list((tmp_path / "place").iterdir()) == []  # no half-written folder, no temporary one


def test_a_full_disk_keeps_the_earlier_export_whole(tmp_path, trained_toy):
    """ENOSPC for real (a full tmpfs in a private mount namespace, tests/test_faults_scripts.py's), over an earlier
    export that --force would replace: one line, exit status 1, and the earlier folder as it was."""
    if not can_mount():
        pytest.skip("no private mount namespace here (unshare -m and mount need root with CAP_SYS_ADMIN)")
    _, ckpt, folder = trained_toy
    earlier, before, after, place = (tmp_path / name for name in ("earlier", "before", "after", "place"))
    for path in (earlier, before, after, place):
        path.mkdir()
    (earlier / "hf").mkdir()  # an earlier export, small enough for the 1 MB tmpfs
    for name in ("config.json", "generation_config.json"):
        shutil.copy(folder / name, earlier / "hf" / name)
    (earlier / "hf" / "model.safetensors").write_bytes(b"earlier weights\n" * 1000)
    env = {**ENV, "PLACE": str(place), "EARLIER": str(earlier), "BEFORE": str(before), "AFTER": str(after), "FAULT": "full"}
    export = [
        sys.executable,
        str(ROOT / "scripts" / "export.py"),
        "--ckpt",
        str(ckpt),
        "--to",
        "hf",
        str(place / "hf"),
        "--force",
    ]
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", IN_TMPFS, "sh", *export], capture_output=True, text=True, env=env, timeout=HANG_TIMEOUT
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert f"cannot write {place / 'hf'}: no space left on device (ENOSPC)" in done.stderr
    assert snapshot(after) == snapshot(before) and "hf/model.safetensors" in snapshot(before)


def test_push_to_hub_sends_the_folder_and_offline_is_one_line(tmp_path, trained_toy, monkeypatch):
    """`upload_folder` runs for real up to the commit, which is caught here: it would send every file of the
    folder. Offline, the script's upload fails in one line, after writing the folder."""
    from huggingface_hub import HfApi, ModelCard, hf_api

    _, ckpt, folder = trained_toy
    sent = {}
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: sent.setdefault("repo", (repo_id, kw["repo_type"])))

    def create_commit(self, repo_id, operations, **kwargs):
        sent["files"] = sorted(op.path_in_repo for op in operations)
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/0"})()

    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    monkeypatch.setattr(hf_api, "is_xet_available", lambda: False)  # the one-commit path, whose commit is caught
    # The hub checks a card's metadata on upload; here huggingface_hub's own parser reads it.
    monkeypatch.setattr(HfApi, "_validate_yaml", lambda self, content, **kw: sent.setdefault("card", ModelCard(content).data))
    url = push_to_hub(folder, "someone/toy-zh-en")
    assert url.startswith("https://huggingface.co/someone/toy-zh-en") and sent["repo"] == ("someone/toy-zh-en", "model")
    assert sent["files"] == sorted(p.name for p in folder.iterdir())
    assert sent["card"].library_name == "transformers" and sent["card"].pipeline_tag == "translation"

    out = tmp_path / "hf"
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    done = script("export", "--ckpt", str(ckpt), "--to", "hf", str(out), "--push-to-hub", "someone/toy-zh-en", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "someone/toy-zh-en" in done.stderr, done.stderr
    assert (out / "model.safetensors").is_file() and "wrote" in done.stdout
