"""Multilingual OPUS-MT models: the `>>xx<<` target tags imported, translated with and exported, against `transformers`.

A random multilingual Marian model (tests/helpers.make_marian with `languages`: `>>fr<<`, `>>de<<` and `>>cs<<` in
its vocabulary, as OPUS-MT's en-ROMANCE holds its languages) is the oracle: `MarianTokenizer(">>fr<< text")` and
`generate` against ours with `tgt_lang="fr"`: the same ids, log-probs, greedy and beam outputs. Its exports (Hugging
Face, CTranslate2), each checked by its own probes as it is written, translate with the tags as the checkpoint does;
a missing, unknown or needless target language is one line.
"""

from __future__ import annotations

import pytest
import torch

from common.errors import InputError
from inference import DecodingOptions, Translator
from tasks import Seq2SeqTransformer
from tests.helpers import (
    assert_same_rows,
    forced_eos,
    make_marian,
    marian_generate,
    multi30k_lines,
    run_script,
    train_spm,
)

transformers = pytest.importorskip("transformers", reason="pip install -e '.[bench]'")

LANGUAGES = ("fr", "de", "cs")
CONFIG = "shared-tied-swish"


@pytest.fixture(scope="module")
def spm_models() -> tuple[bytes, bytes]:
    targets = multi30k_lines("train.fr.gz", 300) + multi30k_lines("train.de.gz", 300)
    return train_spm(multi30k_lines("train.en.gz", 400), 60), train_spm(targets, 80)


@pytest.fixture(scope="module")
def marian(tmp_path_factory, spm_models):
    """(folder, MarianMTModel, MarianTokenizer) of a random English → {fr, de, cs} model. No </s> bias: its
    outputs run to the length limit, where both searches force </s> with its log-prob (tests/test_pretrained.py's
    "to-the-limit" regime: a random model's outputs otherwise end at once or never)."""
    folder = tmp_path_factory.mktemp("multilingual") / "opus-mt-en-mul"
    hf, tok = make_marian(folder, spm_models, CONFIG, eos_bias=0.0, languages=LANGUAGES)
    return folder, hf, tok


@pytest.fixture(scope="module")
def sources() -> list[str]:
    return multi30k_lines("val.en.gz", 5)


def rows(hyps, bos: int, pad: int) -> torch.Tensor:
    """(B, L) ids of each sentence's best hypothesis, `bos` first, as `generate` returns them."""
    ids = [[bos, *row[0].tokens] for row in hyps]
    width = max(map(len, ids))
    return torch.tensor([row + [pad] * (width - len(row)) for row in ids])


def test_the_tag_goes_first_and_decodes_as_transformers_does(marian, sources):
    folder, hf, tok = marian
    translator = Translator.from_pretrained(folder)
    assert list(translator.languages) == [code[2:-2] for code in tok.supported_language_codes] == list(LANGUAGES)
    pad = hf.config.pad_token_id
    best = {}
    for lang in ("fr", "de"):
        # Ids: MarianTokenizer's with the tag in the text, one token first.
        batch = tok([f">>{lang}<< {s}" for s in sources], return_tensors="pt", padding=True)
        src = translator.encode_sources(sources, lang)
        assert torch.equal(src, batch["input_ids"])
        assert (src[:, 0] == tok.convert_tokens_to_ids(f">>{lang}<<")).all()

        # Log-probs of references under teacher forcing: MarianMTModel's log-softmax at each reference token.
        refs = multi30k_lines(f"val.{lang}.gz", len(sources))
        labels = tok(text_target=refs, return_tensors="pt", padding=True)["input_ids"]
        starts = torch.cat([torch.full((len(refs), 1), pad), labels[:, :-1]], dim=1)
        with torch.no_grad():
            theirs = hf(**batch, decoder_input_ids=starts).logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0]
        for h, want, label in zip(translator.score(sources, refs, tgt_lang=lang), theirs, labels):
            n = int((label != pad).sum())
            assert h.tokens == label[:n].tolist()
            torch.testing.assert_close(torch.tensor(h.token_log_probs), want[:n], atol=1e-4, rtol=0)

        # Greedy and beam search: generate's outputs (no length normalisation for beams), every one to the limit.
        greedy = translator.translate(sources, nbest=1, tgt_lang=lang, max_len=40)
        assert_same_rows(rows(greedy, pad, pad), marian_generate(hf, batch, pad, num_beams=1), pad)
        beam = translator.translate(sources, nbest=1, tgt_lang=lang, beam_size=3, length_penalty=0.0, max_len=40)
        assert all(row[0].tokens.index(translator.eos_id) == 39 for row in greedy + beam)
        assert_same_rows(rows(beam, pad, pad), marian_generate(hf, batch, pad, num_beams=3, length_penalty=0.0), pad)
        best[lang] = [row[0].tokens for row in beam]
    assert best["fr"] != best["de"]  # the tag is read: another language, other outputs


def test_exports_translate_with_the_tags_as_the_checkpoint_does(marian, sources, tmp_path):
    """Each export is written only once its own probes pass (deploy/verify.py); then both translate and score
    into fr and de as the checkpoint does, and transformers reads the Hugging Face one with the tags in the text."""
    pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
    from deploy.ctranslate2 import export_ctranslate2
    from deploy.ctranslate2_translator import CTranslate2Translator
    from deploy.huggingface import export_huggingface

    folder, _, _ = marian
    model = Seq2SeqTransformer.from_pretrained(str(folder))
    ours = model.translator
    hf_dir = export_huggingface(model, tmp_path / "hf")
    from_hub = Translator.from_pretrained(hf_dir)
    ct2 = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    assert from_hub.languages == ct2.languages == ours.languages and list(ours.languages) == list(LANGUAGES)
    card = (hf_dir / "README.md").read_text(encoding="utf-8")  # its languages, and its example with a tag
    assert "- target languages: fr, de, cs" in card and 'tokenizer([">>fr<< a sentence to translate"]' in card
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    tok = transformers.MarianTokenizer.from_pretrained(hf_dir)
    for lang in ("fr", "de"):
        want = ours.translate(sources, nbest=2, tgt_lang=lang, beam_size=3)
        for engine in (from_hub, ct2):
            got = engine.translate(sources, nbest=2, tgt_lang=lang, beam_size=3)
            assert [[h.tokens for h in row] for row in got] == [[h.tokens for h in row] for row in want]
            for a, b in zip(sum(got, []), sum(want, [])):
                assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-4)
        refs = multi30k_lines(f"val.{lang}.gz", len(sources))
        for a, b in zip(ct2.score(sources, refs, tgt_lang=lang), ours.score(sources, refs, tgt_lang=lang)):
            assert a.tokens == b.tokens and a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-4)
        batch = tok([f">>{lang}<< {s}" for s in sources], return_tensors="pt", padding=True)
        greedy = ours.translate(sources, nbest=1, tgt_lang=lang, max_len=40)
        assert_same_rows(
            rows(greedy, ours.bos_id, ours.pad_id), marian_generate(hf, batch, ours.pad_id, num_beams=1), ours.pad_id
        )
    with pytest.raises(InputError, match="it knows fr, de, cs"):
        ct2.translate(sources, tgt_lang="es")
    with pytest.raises(InputError, match="one of fr, de, cs"):
        ct2.score(sources, sources)


def test_a_missing_unknown_or_needless_target_language_is_one_line(marian, spm_models, sources, tmp_path):
    folder, _, _ = marian
    translator = Translator.from_pretrained(folder)
    for call in (lambda **kw: translator.translate(sources, **kw), lambda **kw: translator.score(sources, sources, **kw)):
        with pytest.raises(InputError, match=r"^this model is multilingual: give the target language .* one of fr, de, cs$"):
            call()
        with pytest.raises(InputError, match=r"^no target language 'es' in this model: it knows fr, de, cs$"):
            call(tgt_lang="es")
    with pytest.raises(InputError, match="must be a language's name"):
        translator.translate(sources, tgt_lang=">>fr<<")
    # A tag typed into the text that the model lacks is named, not taken for a missing target language.
    with pytest.raises(
        InputError, match=r"^sentence 1 starts with >>es<<: no target language 'es' in this model, which knows fr, de, cs$"
    ):
        translator.translate([sources[0], f">>es<< {sources[1]}"], tgt_lang="fr")
    bilingual_dir = tmp_path / "opus-mt-en-fr"
    make_marian(bilingual_dir, spm_models, CONFIG)
    bilingual = Translator.from_pretrained(bilingual_dir)
    assert bilingual.languages == {}
    with pytest.raises(InputError, match=r"^tgt_lang='fr': this model translates into one language"):
        bilingual.translate(sources, tgt_lang="fr")
    assert len(bilingual.translate(sources)) == len(sources)
    # A translator's own default target language serves every call, and it is that language, not another.
    french = Translator.from_pretrained(folder, DecodingOptions(tgt_lang="fr"))
    in_french = translator.translate(sources, tgt_lang="fr", nbest=1)
    assert [h[0].tokens for h in french.translate(sources, nbest=1)] == [h[0].tokens for h in in_french]
    assert [h[0].score for h in in_french] != [h[0].score for h in translator.translate(sources, tgt_lang="de", nbest=1)]


def test_the_scripts_take_tgt_lang(marian, sources, tmp_path, capsys):
    folder, _, _ = marian
    ckpt = tmp_path / "en-mul.ckpt"
    code, out, err = run_script(capsys, "import_pretrained", str(folder), "--out", str(ckpt))
    assert code == 0, err
    assert "target languages fr, de, cs" in out
    translator = Translator.from_checkpoint(ckpt)
    for lang in ("fr", "de"):
        code, out, err = run_script(capsys, "translate", "--ckpt", str(ckpt), "--tgt-lang", lang, *sources[:2])
        assert code == 0, err
        assert out.splitlines() == translator.translate(sources[:2], tgt_lang=lang, beam_size=4)
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("".join(s + "\n" for s in sources[:3]), encoding="utf-8")
    ref.write_text("".join(s + "\n" for s in multi30k_lines("val.de.gz", 3)), encoding="utf-8")
    hyps = tmp_path / "hyps.de"
    code, _, err = run_script(
        capsys, "evaluate", "--ckpt", str(ckpt), "--src", str(src), "--ref", str(ref), "--tgt-lang", "de",
        "--hyp-out", str(hyps),
    )  # fmt: skip
    assert code == 0, err
    assert hyps.read_text(encoding="utf-8").splitlines() == translator.translate(sources[:3], tgt_lang="de", beam_size=4)
    for flags, message in (([], "one of fr, de, cs"), (["--tgt-lang", "es"], "it knows fr, de, cs")):
        code, out, err = run_script(capsys, "translate", "--ckpt", str(ckpt), *flags, sources[0])
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_model_of_ours_with_tags_exports_with_them(tmp_path):
    """A model of this project whose tokenizer holds the tags as tokens of their own (as a multilingual data module
    adds them): `AutoTokenizer` on its Hugging Face export reads `>>fr<< text` as our ids with tgt_lang="fr", the
    exported `MarianMTModel` and CTranslate2 search as the checkpoint does, and CTranslate2 scores as it does."""
    pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
    from datamodules.tokenizers import SubwordTokenizer
    from deploy.ctranslate2 import export_ctranslate2
    from deploy.ctranslate2_translator import CTranslate2Translator
    from deploy.huggingface import export_huggingface
    from models.config import Seq2SeqSettings

    tokenizer = SubwordTokenizer.train(multi30k_lines("train.en.gz", 300) + multi30k_lines("train.fr.gz", 300), vocab_size=300)
    tokenizer.tokenizer.add_special_tokens([f">>{lang}<<" for lang in LANGUAGES])
    torch.manual_seed(0)
    settings = Seq2SeqSettings(d_model=32, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64, max_len=64)
    model = Seq2SeqTransformer(tokenizers={"src": tokenizer.to_dict(), "tgt": tokenizer.to_dict()}, net=settings).eval()
    with torch.no_grad():  # far from uniform, so that a wrong or missing tag shows in the outputs
        for p in model.parameters():
            p.mul_(3) if p.dim() >= 2 else p.add_(0.3 * torch.randn_like(p))
    ours = model.translator
    sources = multi30k_lines("val.en.gz", 4)
    hf_dir = export_huggingface(model, tmp_path / "hf")
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    ct2 = CTranslate2Translator(export_ctranslate2(model, tmp_path / "ct2"), search="exact")
    assert list(ours.languages) == list(ct2.languages) == list(LANGUAGES)
    scored = {}
    for lang in ("fr", "de"):
        batch = tok([f">>{lang}<< {s}" for s in sources], return_tensors="pt", padding=True)
        assert torch.equal(batch["input_ids"], ours.encode_sources(sources, lang))
        greedy = ours.translate(sources, nbest=1, tgt_lang=lang, max_len=20)
        theirs = hf.generate(
            **batch,
            num_beams=1,
            max_new_tokens=20,
            do_sample=False,
            forced_eos_token_id=None,
            logits_processor=forced_eos(ours.eos_id, 20),
        )  # fmt: skip (the export's generation config, but <eos> forced at the limit with its own log-prob, as ours)
        assert_same_rows(rows(greedy, ours.bos_id, ours.pad_id), theirs, ours.pad_id)
        got = ct2.translate(sources, nbest=1, tgt_lang=lang, max_len=20)
        assert [row[0].tokens for row in got] == [row[0].tokens for row in greedy]
        refs = multi30k_lines(f"val.{lang}.gz", len(sources))
        for a, b in zip(ct2.score(sources, refs, tgt_lang=lang), ours.score(sources, refs, tgt_lang=lang)):
            assert a.tokens == b.tokens and a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-4)
        scored[lang] = [h.token_log_probs for h in ours.score(sources, sources, tgt_lang=lang)]
    assert scored["fr"] != scored["de"]  # the tag is read: another language, other log-probs
