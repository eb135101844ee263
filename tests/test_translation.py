"""BLEU/chrF wiring, validation BLEU and attention maps, and the translate/evaluate scripts end to end."""

import gzip

import lightning as L
import pytest
import sacrebleu
import torch

from datamodules import ToyTranslationDataModule
from datamodules.toy import TOY_PAIRS
from tasks import Seq2SeqTransformer
from tasks.metrics import corpus_scores, default_bleu_tokenize
from tests.helpers import HANG_TIMEOUT, TOY_MODEL, load_script, quiet_trainer, script

REFS = ["A man sleeping in a green room on a couch.", "Two dogs run across the snowy field.", "The cat sat on the mat."]


# ---------------------------------------------------------------------------------------------- metrics


def test_perfect_hypotheses_score_100():
    scores = corpus_scores(REFS, REFS)
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)


def test_scores_match_sacrebleu_and_catch_flat_references():
    hyps = ["A man sleeps in a green room on a sofa.", "Two dogs run over the field.", "The cat sat on a mat."]
    scores = corpus_scores(hyps, REFS)
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [REFS]).score, abs=0.01)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [REFS]).score, abs=0.1)
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        corpus_scores(hyps, REFS[:2])
    with pytest.raises(TypeError, match="one reference per hypothesis"):
        corpus_scores(hyps, [[r] for r in REFS])  # a list of references each: not what corpus_scores takes


def test_bleu_is_cased_and_says_so_in_its_signature():
    lower = [r.lower() for r in REFS]
    cased, lowercased = corpus_scores(lower, REFS), corpus_scores(lower, REFS, lowercase=True)
    assert cased["bleu"] < 100 and lowercased["bleu"] == pytest.approx(100.0)
    version = sacrebleu.__version__
    assert cased["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    assert "case:lc" in lowercased["bleu_signature"] and cased["chrf_signature"].startswith("nrefs:1|case:mixed")


def test_chinese_references_are_scored_with_the_zh_tokenizer():
    refs, hyps = ["我是一个学生。", "他喜欢学习中文。"], ["我是学生。", "他喜欢学习中文。"]
    assert default_bleu_tokenize(refs) == "zh" and default_bleu_tokenize(REFS) == "13a"
    scores = corpus_scores(hyps, refs)
    assert "tok:zh" in scores["bleu_signature"]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score)
    # 13a leaves each unsegmented sentence one "word": a near-miss would score like a total miss.
    assert corpus_scores(hyps, refs, tokenize="13a")["bleu"] < scores["bleu"]


# ---------------------------------------------------------------------------------------------- the module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The toy translator trained in-process for a few epochs, with BLEU and attention maps every epoch."""
    root = tmp_path_factory.mktemp("toy_bleu")
    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=16)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, bleu_every_n_epochs=1, attention_maps=2, **TOY_MODEL)
    trainer = quiet_trainer(root, max_epochs=14, gradient_clip_val=1.0)
    trainer.fit(model, datamodule=dm)
    ckpt = root / "toy.ckpt"
    trainer.save_checkpoint(ckpt)
    return trainer, model, ckpt, root


def test_validation_logs_bleu_and_attention_maps(trained):
    trainer, model, _, root = trained
    assert "val/bleu" in trainer.callback_metrics and "val/chrf" in trainer.callback_metrics
    assert trainer.callback_metrics["val/bleu"] > 50  # the three toy pairs are (nearly) learnt
    last = trainer.current_epoch - 1
    assert (root / "attention" / f"epoch{last}_0.png").stat().st_size > 1000
    assert (root / "attention" / f"epoch{last}_1.png").exists()
    weights, src_tokens, out_tokens = model.translator.attention_weights(TOY_PAIRS[0][0])
    assert weights.shape == (len(out_tokens), len(src_tokens))
    assert torch.allclose(weights.sum(-1), torch.ones(len(out_tokens)), atol=1e-4)  # rows are distributions


def test_translate_uses_the_length_limit(trained):
    _, model, _, _ = trained
    src = model.translator.encode_sources([TOY_PAIRS[0][0]])
    assert model.translator.max_output_len(src) == [int(1.5 * src.size(1) + 10)]
    assert all(len(h.split()) <= 1 for h in model.translate([TOY_PAIRS[0][0]], max_len=1))
    assert model.translate_many([s for s, _ in TOY_PAIRS], batch_size=2) == model.translate([s for s, _ in TOY_PAIRS])


# ---------------------------------------------------------------------------------------------- scripts


def _run(name, *args, stdin=None):
    return script(name.removesuffix(".py"), *args, input=stdin, timeout=HANG_TIMEOUT)


def test_translate_script_arguments_and_stdin(trained):
    ckpt = str(trained[2])
    sources = [s for s, _ in TOY_PAIRS]
    expected = trained[1].translate(sources, beam_size=2)
    result = _run("translate.py", "--ckpt", ckpt, "--beam-size", "2", *sources)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == expected
    # Standard input, in chunks of 2 lines; a blank line stays a blank line.
    result = _run(
        "translate.py",
        "--ckpt",
        ckpt,
        "--beam-size",
        "1",
        "--batch-size",
        "2",
        stdin=f"{sources[0]}\n\n{sources[1]}\n{sources[2]}\n",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [*trained[1].translate(sources[:1]), "", *trained[1].translate(sources[1:])]
    # A lone carriage return (pasted text) stays inside its line: four lines in, four out, each with its source.
    pasted = sources[0].replace(" ", "\r", 1)
    stdin = f"{sources[1]}\n{pasted}\r\n{sources[2]}\n{sources[0]}\n"
    result = _run("translate.py", "--ckpt", ckpt, "--beam-size", "1", stdin=stdin)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:-1] == trained[1].translate([sources[1], sources[0], sources[2], sources[0]])


def test_translate_script_user_errors(tmp_path, trained, capsys):
    translate = load_script("translate")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    for argv in (
        ["--ckpt", str(tmp_path / "missing.ckpt"), "我"],
        ["--ckpt", str(bad), "我"],
        ["--ckpt", str(trained[2]), "我 是", "  "],
    ):
        with pytest.raises(SystemExit) as exit_info:
            translate.main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


def test_evaluate_script(tmp_path, trained):
    src, ref = tmp_path / "test.cmn", tmp_path / "test.en.gz"
    src.write_text("".join(s + "\n" for s, _ in TOY_PAIRS), encoding="utf-8")
    with gzip.open(ref, "wt", encoding="utf-8") as f:
        f.write("".join(t + "\n" for _, t in TOY_PAIRS))
    hyp_file = tmp_path / "hyp.txt"
    result = _run(
        "evaluate.py",
        "--ckpt",
        str(trained[2]),
        "--src",
        str(src),
        "--ref",
        str(ref),
        "--beam-size",
        "2",
        "--batch-size",
        "2",
        "--hyp-out",
        str(hyp_file),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    assert hyps == trained[1].translate([s for s, _ in TOY_PAIRS], beam_size=2)  # the checkpoint's own translations
    expected = corpus_scores(hyps, [t for _, t in TOY_PAIRS])
    assert f"SacreBLEU: {expected['bleu']:.2f}  ({expected['bleu_signature']})" in result.stdout
    assert f"chrF: {expected['chrf']:.2f}  ({expected['chrf_signature']})" in result.stdout
    lowercased = corpus_scores(hyps, [t for _, t in TOY_PAIRS], lowercase=True)
    assert f"lowercased BLEU (not comparable with the cased score): {lowercased['bleu']:.2f}" in result.stdout
    # A checkpoint of a run without EMA holds one set of weights: not called "averaged".
    assert "engine: torch, its only weights (no EMA)" in result.stdout
    # Standard error is a pipe here, as under nohup or SLURM: progress lines, no bar (batches of 2 of the 3 sentences).
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("translating: ")]
    assert line.startswith("translating: 2/3 sentences | ") and " sentences/s | elapsed " in line and "| eta " in line
    assert "\r" not in result.stderr


def test_evaluate_script_user_errors(tmp_path, trained, capsys):
    evaluate = load_script("evaluate")
    src, ref = tmp_path / "a.txt", tmp_path / "b.txt"
    src.write_text("我 是 学 生\n我 是 男 生\n", encoding="utf-8")
    ref.write_text("I am a student\n", encoding="utf-8")
    cases = [
        (["--ckpt", str(trained[2]), "--src", str(src), "--ref", str(ref)], "differ in length"),
        (["--ckpt", str(trained[2]), "--src", str(src), "--ref", str(tmp_path / "none.txt")], "not found"),
        (["--ckpt", str(tmp_path / "none.ckpt"), "--src", str(src), "--ref", str(src)], "checkpoint not found"),
        (["--ckpt", str(trained[2]), "--src", str(src), "--ref", str(src), "--weights", "training"], "no weight averaging"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            evaluate.main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
