"""scripts/generate.py: a corpus decoded into a new parallel corpus, on the toy set and on a Multi30k slice.

The oracle of every output is `Translator.translate_many` (or `translate` with n-best), called on the input's
lines; of every multi-process, stopped or resumed run, one uninterrupted process. The DDP runs are real: Lightning
starts the second process, and a SIGKILL or SIGTERM reaches a run that has written some of its shards."""

from __future__ import annotations

import errno
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from datamodules import ToyTranslationDataModule
from datamodules.vocab import Vocab
from inference import Translator
from tasks import Seq2SeqTransformer
from tests.helpers import (
    ENV,
    HANG_TIMEOUT,
    ROOT,
    SHARED_DATA,
    TINY,
    TOY_MODEL,
    assert_one_line_error,
    can_mount,
    run,
    run_script,
    save_checkpoint,
    snapshot,
    write_tatoeba,
)

TOY_CHARS = "我是学生喜欢习男"


def toy_lines(n: int = 60, seed: int = 0) -> list[str]:
    """Sentences of the toy's characters, an empty line and one longer than the toy model's 32 positions."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(TOY_CHARS) for _ in range(rng.randint(1, 8))) for _ in range(n)]
    lines[7], lines[20] = "", " ".join("我" * 40)
    return lines


@pytest.fixture(scope="module")
def cases(tmp_path_factory, trained_toy):
    """Per case: a checkpoint, its input file (and references), the files' languages. "toy": the trained toy model;
    "weak": an untrained toy model (varied samples); "multi30k": the first 200 lines of Multi30k's validation
    German, an untrained tiny model with word vocabularies of the slice."""
    root = tmp_path_factory.mktemp("generate")
    (root / "toy.zh").write_text("".join(f"{line}\n" for line in toy_lines()), encoding="utf-8")
    torch.manual_seed(1)
    weak = Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, **TOY_MODEL)
    slices = {}
    for lang in ("de", "en"):
        with gzip.open(SHARED_DATA / "multi30k" / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            slices[lang] = [next(f).strip() for _ in range(200)]
        (root / f"m30k.{lang}").write_text("".join(f"{line}\n" for line in slices[lang]), encoding="utf-8")
    torch.manual_seed(2)
    vocabs = {side: Vocab.build(slices[lang], level="word").to_dict() for side, lang in (("src", "de"), ("tgt", "en"))}
    m30k = Seq2SeqTransformer(tokenizers=vocabs, **TINY)
    toy_args = ["--src", str(root / "toy.zh"), "--tgt-lang", "en"]
    return {
        "toy": (str(save_checkpoint(trained_toy, root / "toy.ckpt")), toy_args, ("zh", "en")),
        "weak": (str(save_checkpoint(weak, root / "weak.ckpt")), toy_args, ("zh", "en")),
        "multi30k": (
            str(save_checkpoint(m30k, root / "m30k.ckpt")),
            ["--src", str(root / "m30k.de"), "--ref", str(root / "m30k.en"), "--tgt-lang", "en"],
            ("de", "en"),
        ),
    }


def lines_of(path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def generate(capsys, case, out: Path, *flags: str) -> tuple[int, str]:
    """scripts/generate.py in this process, on one of `cases`: (exit status, stderr)."""
    ckpt, args, _ = case
    code, _, err = run_script(capsys, "generate", "--ckpt", ckpt, *args, "--output", str(out), "--shard-size", "16", *flags)
    return code, err


def corpus(out: Path, langs) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix.lstrip(".") in langs}


# ------------------------------------------------------------------------------------------ the plan


@pytest.mark.parametrize("max_tokens, batch_size, shard_size", [(20, None, 10), (64, 3, 1), (7, None, 1000)])
def test_the_plan_holds_every_line_once_within_the_budget(max_tokens, batch_size, shard_size):
    from inference.generation.plan import make_plan

    rng = random.Random(0)
    lengths = [rng.choice([0, 1, 2, 3, 5, 8, 13]) for _ in range(300)]
    plan = make_plan(lengths, max_tokens, batch_size, shard_size)
    flat = [i for batch in plan.batches for i in batch]
    assert flat == sorted((i for i, n in enumerate(lengths) if n), key=lambda i: (lengths[i], i))  # each once, shortest first
    for batch in plan.batches:
        assert len(batch) * max(lengths[i] for i in batch) <= max_tokens or len(batch) == 1
        assert batch_size is None or len(batch) <= batch_size
    assert [b for r in plan.shards for b in r] == list(range(len(plan.batches)))
    assert all(len(plan.lines_of(k)) >= shard_size for k in range(len(plan.shards) - 1))
    assert all(plan.shard_of(b) == k for k, r in enumerate(plan.shards) for b in r)
    assert make_plan(lengths, max_tokens, batch_size, shard_size) == plan  # from the input and the settings alone


# ------------------------------------------------------------------------------------------ the oracle


@pytest.mark.parametrize("name", ["toy", "multi30k"])
def test_the_corpus_is_translate_many_line_by_line(cases, capsys, tmp_path, name):
    ckpt, args, (src, tgt) = cases[name]
    out = tmp_path / "out"
    # The untrained model's outputs run to their length limits, a x each one's source + b: the same whatever the
    # batches (length-sorted by tokens here, batches of 32 in translate_many, each sentence alone).
    code, err = generate(capsys, cases[name], out, "--beam-size", "4", "--max-tokens", "64")
    assert code == 0, err
    sources = lines_of(args[1])
    translator = Translator.from_checkpoint(ckpt)
    todo = [s for s in sources if s]
    options = translator.options.replace(beam_size=4)
    expected = translator.translate_many(todo, options=options)
    assert expected[:12] == [translator.translate([s], options=options)[0] for s in todo[:12]]
    expected = iter(expected)
    assert lines_of(out / f"train.{src}") == sources
    assert lines_of(out / f"train.{tgt}") == [next(expected) if s else "" for s in sources]
    assert len(set(lines_of(out / f"train.{tgt}"))) > 2  # the model says different things to different lines
    record = json.loads((out / "generation.json").read_text())
    assert record["options"]["beam_size"] == 4 and record["model"][0]["size"] == Path(ckpt).stat().st_size
    assert record["counts"]["lines"] == len(sources) and not (out / "shards").exists()
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    progress = [line for line in err.splitlines() if line.startswith("generating: ")]
    assert progress and re.fullmatch(rf"generating: {len(todo)}/{len(todo)} sentences \| [\d.,]+ sentences/s \| [\d.,]+ tok/s"
                                     r" \| elapsed [\d:]+ \| eta [\d:]+", progress[-1]), err  # fmt: skip
    if name == "toy":  # said once, with the counts; the lines kept in place
        assert len(warnings) == 1 and "1 empty line (" in warnings[0] and "1 line longer" in warnings[0], err
        assert record["counts"]["empty"] == record["counts"]["over_long"] == 1
    else:
        assert not warnings and lines_of(out / "train.ref.en") == lines_of(args[3])


def test_nbest_repeats_the_source_beside_its_outputs_with_the_tag(cases, capsys, tmp_path):
    ckpt, args, _ = cases["toy"]
    code, err = generate(capsys, cases["toy"], tmp_path / "out", "--beam-size", "4", "--nbest", "2", "--tag", "<BT>")
    assert code == 0, err
    sources = lines_of(args[1])
    todo = [s for s in sources if s]
    rows = iter(Translator.from_checkpoint(ckpt).translate(todo, beam_size=4, nbest=2))
    expected = [[f"<BT> {h.text}" for h in next(rows)] if s else ["", ""] for s in sources]
    assert lines_of(tmp_path / "out" / "train.zh") == [s for s in sources for _ in range(2)]
    assert lines_of(tmp_path / "out" / "train.en") == [h for row in expected for h in row]


def test_keep_closest_writes_each_lines_nbest_output_nearest_its_reference(cases, capsys, tmp_path):
    """Sequence-level interpolation (Kim & Rush 2016): of each line's 4 best, the one with the highest sentence BLEU
    against its reference, by sacrebleu's own scorer over the same run's n-best, the likelier of equals; one line a
    source, the references beside. An untrained model, so that the 4 outputs differ and the choice matters."""
    import sacrebleu

    ckpt, args, _ = cases["multi30k"]
    flags = ["--beam-size", "4", "--nbest", "4", "--max-len", "12"]
    assert generate(capsys, cases["multi30k"], tmp_path / "all", *flags)[0] == 0
    assert generate(capsys, cases["multi30k"], tmp_path / "kept", *flags, "--keep-closest")[0] == 0
    refs, rows = lines_of(args[3]), lines_of(tmp_path / "all" / "train.en")
    expected = []
    for i, ref in enumerate(refs):
        row = rows[4 * i : 4 * i + 4]
        scores = [sacrebleu.sentence_bleu(h, [ref]).score for h in row]
        expected.append(row[scores.index(max(scores))])
    assert lines_of(tmp_path / "kept" / "train.en") == expected
    assert lines_of(tmp_path / "kept" / "train.de") == lines_of(args[1])
    assert lines_of(tmp_path / "kept" / "train.ref.en") == refs
    assert sum(e != rows[4 * i] for i, e in enumerate(expected)) >= 10  # not simply the best of each beam


@pytest.mark.parametrize(
    "case, flags, said",
    [
        ("multi30k", ["--keep-closest"], "--keep-closest picks one of several outputs a line: give --nbest N"),
        ("toy", ["--keep-closest", "--nbest", "2"], "--keep-closest needs references"),
    ],
)
def test_keep_closest_without_nbest_or_references_is_one_line(cases, tmp_path, case, flags, said):
    ckpt, args, _ = cases[case]
    result = run([sys.executable, "scripts/generate.py", "--ckpt", ckpt, *args, "--output", str(tmp_path / "out"), *flags])
    assert_one_line_error(result, said)
    assert not (tmp_path / "out").exists()


def test_the_ctranslate2_export_goes_the_same_way(cases, capsys, tmp_path, trained_toy):
    pytest.importorskip("ctranslate2", reason="pip install -e '.[deploy]'")
    from deploy.ctranslate2 import export_ctranslate2
    from deploy.ctranslate2_translator import CTranslate2Translator

    model = export_ctranslate2(trained_toy, tmp_path / "ct2")
    _, args, _ = cases["toy"]
    code, _, err = run_script(
        capsys,
        "generate",
        "--engine",
        "ctranslate2",
        "--model",
        str(model),
        "--ct2-search",
        "exact",
        *args,
        "--output",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    sources = lines_of(args[1])
    translator = CTranslate2Translator(model, search="exact")
    expected = iter(translator.translate_many([s for s in sources if s], options=translator.options.replace(beam_size=4)))
    assert lines_of(tmp_path / "out" / "train.en") == [next(expected) if s else "" for s in sources]


def test_a_corpus_split_is_read_as_the_data_module_reads_it(cases, capsys, tmp_path):
    from datamodules.sources import TatoebaFile

    pairs = [(f"line {i}", line) for i, line in enumerate(toy_lines(40, seed=5)) if line]  # (English, Chinese)
    write_tatoeba(tmp_path / "data" / "cmn.txt", pairs)
    argv = ["--data-dir", str(tmp_path / "data"), "--format", "tatoeba", "--src-lang", "cmn", "--tgt-lang", "en"]
    code, _, err = run_script(capsys, "generate", "--ckpt", cases["toy"][0], *argv, "--output", str(tmp_path / "out"))
    assert code == 0, err
    split = list(TatoebaFile(tmp_path / "data", "cmn", "en", val_fraction=0.05, test_fraction=0.05, split_seed=42).pairs("train"))
    assert lines_of(tmp_path / "out" / "train.cmn") == [s for s, _ in split]
    assert lines_of(tmp_path / "out" / "train.ref.en") == [t for _, t in split]
    translator = Translator.from_checkpoint(cases["toy"][0])
    assert lines_of(tmp_path / "out" / "train.en") == translator.translate_many([s for s, _ in split], beam_size=4)


def test_fit_s_data_module_reads_the_output_folder(cases, capsys, tmp_path):
    from datamodules.corpus import ParallelCorpusDataModule

    out = tmp_path / "out"
    assert generate(capsys, cases["multi30k"], out, "--beam-size", "2")[0] == 0
    prefix = str(out / "train")  # an absolute prefix: the data module reads it wherever its data_dir is
    dm = ParallelCorpusDataModule(data_dir=str(tmp_path), format="aligned", src_lang="de", tgt_lang="en", train_prefix=prefix,
                                  val_prefix=prefix, test_prefix=prefix, src_tokenizer="word", tgt_tokenizer="word",
                                  max_len=64, overlong="truncate", download=False)  # fmt: skip
    dm.setup("fit")
    src_vocab, tgt_vocab = (Vocab.from_dict(t) for t in (dm.tokenizers["src"], dm.tokenizers["tgt"]))
    read = sorted(
        (src_vocab.decode(s.tolist()), tgt_vocab.decode(t.tolist())) for batch in dm.train_dataloader() for s, t in zip(*batch)
    )
    words = lambda line: " ".join(line.split())  # noqa: E731  (word vocabularies split at any white space)
    written = sorted((words(s), words(t)) for s, t in zip(lines_of(out / "train.de"), lines_of(out / "train.en")) if s and t)
    assert len(written) == sum(1 for s in lines_of(out / "train.de") if s) and len({t for _, t in written}) > 1
    assert read == written


# ------------------------------------------------------------------------------------------ processes, stops, resumes


def start(case, out: Path, *flags: str, log: Path) -> subprocess.Popen:
    ckpt, args, _ = case
    cmd = [sys.executable, str(ROOT / "scripts" / "generate.py"), "--ckpt", ckpt, *args, "--output", str(out), *flags]
    return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)


def wait_for_shards(proc: subprocess.Popen, out: Path, count: int = 1) -> None:
    deadline = time.monotonic() + HANG_TIMEOUT
    while len(list((out / "shards").glob("*.jsonl"))) < count:
        assert proc.poll() is None, "the run ended before it wrote a shard"
        assert time.monotonic() < deadline
        time.sleep(0.01)


def resume_line(log: Path) -> str:
    return next(line for line in log.read_text().splitlines() if "resume with: " in line).split("resume with: ", 1)[1]


@pytest.mark.slow
def test_more_processes_than_shards_left(cases, capsys, tmp_path):
    """One shard for two processes (a small input, or a resume near the end): the idle process waits for the other
    rather than failing on an empty loader, and the corpus is one process's."""
    ckpt, args, langs = cases["multi30k"]
    assert generate(capsys, cases["multi30k"], tmp_path / "one", "--beam-size", "2")[0] == 0
    two = run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--ckpt", ckpt, *args, "--output", str(tmp_path / "two"),
               "--beam-size", "2", "--devices", "2", "--accelerator", "cpu"])  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    record = json.loads((tmp_path / "two" / "generation.json").read_text())
    assert record["processes"] == 2 and record["shards"] == 1
    assert corpus(tmp_path / "two", langs) == corpus(tmp_path / "one", langs)


@pytest.mark.parametrize(
    "name, flags, stop",
    [
        ("toy", ["--beam-size", "4", "--max-tokens", "24"], signal.SIGKILL),
        ("multi30k", ["--beam-size", "4", "--max-tokens", "100"], signal.SIGKILL),
        ("weak", ["--sampling", "--sampling-topk", "5", "--nbest", "2", "--seed", "3", "--max-tokens", "24"], signal.SIGTERM),
        ("toy", ["--beam-size", "4", "--max-tokens", "24"], "twice"),
    ],
    ids=["toy-sigkill", "multi30k-sigkill", "sampling-sigterm", "toy-two-signals"],
)
@pytest.mark.slow
def test_two_processes_stopped_then_resumed_give_one_process_s_corpus(cases, capsys, tmp_path, name, flags, stop):
    """SIGKILL to both processes (the process group), or SIGTERM to rank 0 alone (which passes it on: both stop
    once their shard is written, with one line and the command that resumes), or two signals (SIGINT, then SIGTERM:
    the second stops both processes at once, the shards under way lost), then that command, printed when the run
    started: the corpus of one uninterrupted process, byte for byte."""
    langs, flags = cases[name][2], [*flags, "--shard-size", "8"]
    assert generate(capsys, cases[name], tmp_path / "one", *flags)[0] == 0
    one = corpus(tmp_path / "one", langs)
    outputs = next(v for k, v in one.items() if k.endswith(f".{langs[1]}")).decode().splitlines()
    assert len(set(outputs)) > 1, outputs  # outputs that differ: a line misplaced by a resume would show
    if name == "multi30k":
        two = run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--ckpt", cases[name][0], *cases[name][1],
                   "--output", str(tmp_path / "two"), *flags, "--devices", "2", "--accelerator", "cpu"])  # fmt: skip
        assert two.returncode == 0, two.stderr[-3000:]
        assert json.loads((tmp_path / "two" / "generation.json").read_text())["processes"] == 2
        assert corpus(tmp_path / "two", langs) == one
    log, out = tmp_path / "stopped.log", tmp_path / "stopped"
    proc = start(cases[name], out, *flags, "--devices", "2", "--accelerator", "cpu", log=log)
    wait_for_shards(proc, out)
    if stop == signal.SIGKILL:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    elif stop == "twice":
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(HANG_TIMEOUT) == 128 + signal.SIGTERM, log.read_text()[-3000:]
        stopped = [line for line in log.read_text().splitlines() if line.startswith("stopped")]
        assert stopped == [line for line in stopped if line.startswith("stopped at once by a second signal (SIGTERM)")]
        assert len(stopped) == 1 and "Traceback" not in log.read_text(), log.read_text()[-3000:]
    else:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(HANG_TIMEOUT) == 128 + signal.SIGTERM, log.read_text()[-3000:]
        stopped = [line for line in log.read_text().splitlines() if line.startswith("stopped by SIGTERM")]
        assert len(stopped) == 1 and "Traceback" not in log.read_text(), log.read_text()[-3000:]
    done = len(list((out / "shards").glob("*.jsonl")))
    assert 0 < done < json.loads((out / "shards" / "plan.json").read_text())["shards"]
    assert not (out / "generation.json").exists()
    resumed = run(["bash", "-c", resume_line(log)])
    assert resumed.returncode == 0 and f"({done} done)" in resumed.stderr, resumed.stderr[-3000:]
    assert corpus(out, langs) == one
    if name == "weak":  # samples: another seed's differ, so the seed is what made these alike
        assert generate(capsys, cases[name], tmp_path / "seed4", *flags, "--seed", "4")[0] == 0
        assert corpus(tmp_path / "seed4", langs) != one


# ------------------------------------------------------------------------------------------ bad input, faults


@pytest.mark.parametrize("when", ["fetched", "decoding"])
@pytest.mark.parametrize("stop_at", [1, 2, 3])
def test_a_stop_finishes_the_shard_begun_and_begins_no_other(cases, capsys, tmp_path, monkeypatch, when, stop_at):
    """A stop (the first SIGTERM's handler) that comes once the loop has fetched planned batch `stop_at` (the window
    between the sampler's choice of a batch and its decoding) or while it is decoded: the shard under way is
    finished or, not begun, left whole to the resume; no batch is decoded for a shard that is not written, every
    shard written holds all its lines, and the resumed corpus is one uninterrupted run's. Shards of several
    batches, so that the stop falls on a shard's first, middle and last batches."""
    import inference.generation.run as generation_run

    flags = ["--sampling", "--sampling-topk", "5", "--seed", "3", "--max-tokens", "16", "--shard-size", "8"]
    assert generate(capsys, cases["weak"], tmp_path / "one", *flags)[0] == 0
    record = json.loads((tmp_path / "one" / "generation.json").read_text())
    assert record["batches"] >= 2 * record["shards"] > 2, record
    samples = lines_of(tmp_path / "one" / "train.en")
    assert record["counts"]["empty_outputs"] == 0 and len(set(samples)) > len(samples) // 2, samples  # varied, none empty
    fetched, decoded = [], []
    fetch, decode = generation_run.PlannedBatches.__getitem__, generation_run.decode

    def stop(calls: list, at: str) -> None:
        if when == at and len(calls) == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # noted, as the first signal is

    def fetch_then_stop(self, b):
        fetched.append(b)
        stop(fetched, "fetched")
        return fetch(self, b)

    def decode_then_stop(engine, sentences, options, ensemble=()):
        decoded.append(len(sentences))
        stop(decoded, "decoding")
        return decode(engine, sentences, options, ensemble)

    monkeypatch.setattr(generation_run.PlannedBatches, "__getitem__", fetch_then_stop)
    monkeypatch.setattr(generation_run, "decode", decode_then_stop)
    out = tmp_path / "stopped"
    code, err = generate(capsys, cases["weak"], out, *flags)
    assert code == 128 + signal.SIGTERM and "stopped by SIGTERM" in err, err
    shards = sorted((out / "shards").glob("*.jsonl"))
    assert len(shards) < record["shards"]
    assert sum(len(p.read_text().splitlines()) for p in shards) == sum(decoded), decoded
    monkeypatch.undo()
    assert generate(capsys, cases["weak"], out, *flags, "--resume")[0] == 0
    assert corpus(out, ("zh", "en")) == corpus(tmp_path / "one", ("zh", "en"))


@pytest.mark.parametrize("damage", ["a line dropped", "an output dropped", "not JSON"])
def test_a_resume_refuses_a_shard_that_is_not_its_planned_lines(cases, capsys, tmp_path, monkeypatch, damage):
    """A written shard that lacks a line or an output, or is not JSON (edited, or written by a faulty run): a
    resume refuses it in one line that names it, before it decodes anything, rather than put together a corpus
    whose missing lines are empty; removed, the resume decodes it again and the corpus is one run's."""
    import inference.generation.run as generation_run

    flags = ["--nbest", "2", "--beam-size", "2", "--max-tokens", "24", "--shard-size", "8"]
    assert generate(capsys, cases["toy"], tmp_path / "one", *flags)[0] == 0
    assert json.loads((tmp_path / "one" / "generation.json").read_text())["counts"]["empty_outputs"] == 0
    decode = generation_run.decode

    def decode_then_stop(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # noted, as the first signal is
        return decode(*args, **kwargs)

    monkeypatch.setattr(generation_run, "decode", decode_then_stop)
    out = tmp_path / "out"
    assert generate(capsys, cases["toy"], out, *flags)[0] == 128 + signal.SIGTERM
    monkeypatch.undo()
    (shard,) = (out / "shards").glob("*.jsonl")
    rows = shard.read_text().splitlines()
    line, outputs = json.loads(rows[-1])
    rows = {
        "a line dropped": rows[:-1],
        "an output dropped": [*rows[:-1], json.dumps([line, outputs[:1]])],
        "not JSON": [*rows[:-1], rows[-1][:-3]],
    }[damage]
    shard.write_text("".join(f"{row}\n" for row in rows))
    before = snapshot(out)
    code, err = generate(capsys, cases["toy"], out, *flags, "--resume")
    assert code == 2 and err.strip().splitlines()[-1].startswith(f"error: {shard} does not hold the 2-best outputs"), err
    assert "Traceback" not in err and snapshot(out) == before
    shard.unlink()
    assert generate(capsys, cases["toy"], out, *flags, "--resume")[0] == 0
    assert corpus(out, ("zh", "en")) == corpus(tmp_path / "one", ("zh", "en"))


def test_a_time_limit_stops_and_a_resume_with_other_options_is_refused(cases, capsys, tmp_path):
    out = tmp_path / "out"
    code, err = generate(capsys, cases["toy"], out, "--max-time", "0")
    assert code == 124 and "stopped by the time limit (--max-time): 0 of" in err, err  # unfinished: not a success
    resume = err.splitlines()[-1].split("resume with: ", 1)[1]
    assert "--max-time" not in resume and resume.endswith("--resume")  # the resume line runs to the end
    code, err = generate(capsys, cases["toy"], out, "--resume", "--beam-size", "2")
    assert code == 2 and "another options" in err.splitlines()[-1], err
    assert generate(capsys, cases["toy"], out, "--resume")[0] == 0
    assert generate(capsys, cases["toy"], tmp_path / "straight")[0] == 0
    assert corpus(out, ("zh", "en")) == corpus(tmp_path / "straight", ("zh", "en"))
    code, err = generate(capsys, cases["toy"], out, "--resume")
    assert code == 3 and "nothing to generate" in err


def test_a_full_disk_keeps_the_shards_written_and_resumes(cases, capsys, tmp_path, monkeypatch):
    from common.files import atomic_output
    from inference.generation import plan as generation

    real, written = generation.atomic_write_text, []

    def filling(path, text, encoding="utf-8"):
        if Path(path).suffix == ".jsonl":  # the third shard finds the disk full
            if len(written) == 2:
                with atomic_output(path):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written.append(path)
        return real(path, text, encoding)

    out = tmp_path / "out"
    monkeypatch.setattr(generation, "atomic_write_text", filling)
    code, err = generate(capsys, cases["toy"], out, "--max-tokens", "24")
    assert code == 1 and err.splitlines()[-1].startswith("error: cannot write") and "ENOSPC" in err, err
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["00000.jsonl", "00001.jsonl", "plan.json"]
    monkeypatch.setattr(generation, "atomic_write_text", real)
    assert generate(capsys, cases["toy"], out, "--max-tokens", "24", "--resume")[0] == 0
    assert generate(capsys, cases["toy"], tmp_path / "straight", "--max-tokens", "24")[0] == 0
    assert corpus(out, ("zh", "en")) == corpus(tmp_path / "straight", ("zh", "en"))


# A disk of 12 pages: the plan and some shards fit (a file takes a page at least), the rest do not.
SMALL_DISK = """set -e
mount -t tmpfs -o size=48k small "$PLACE"
set +e
"$@"
status=$?
cp -a "$PLACE"/. "$AFTER"/
exit $status
"""


def test_a_disk_that_fills_up_mid_run_keeps_the_shards_written_and_resumes(cases, capsys, tmp_path):
    if not can_mount():
        pytest.skip("no private mount namespace here (unshare -m and mount need root with CAP_SYS_ADMIN)")
    place, after, flags = tmp_path / "place", tmp_path / "after", ["--shard-size", "1", "--max-tokens", "8"]
    place.mkdir(), after.mkdir()
    ckpt, args, _ = cases["toy"]
    command = [
        sys.executable,
        str(ROOT / "scripts" / "generate.py"),
        "--ckpt",
        ckpt,
        *args,
        "--output",
        str(place / "out"),
        *flags,
    ]
    result = run(["unshare", "-m", "sh", "-c", SMALL_DISK, "sh", *command], env={**ENV, "PLACE": str(place), "AFTER": str(after)})
    assert result.returncode == 1, result.stderr[-3000:]
    assert_one_line_error(result, "cannot write", "/shards/", "no space left on device (ENOSPC)")
    kept = sorted(p.name for p in (after / "out" / "shards").iterdir())
    assert "plan.json" in kept and len(kept) > 2 and not any(name.startswith(".") for name in kept)
    assert generate(capsys, cases["toy"], after / "out", *flags, "--resume")[0] == 0
    assert generate(capsys, cases["toy"], tmp_path / "straight", *flags)[0] == 0
    assert corpus(after / "out", ("zh", "en")) == corpus(tmp_path / "straight", ("zh", "en"))


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--resume", "--force"], ["--resume", "--force"]),
        (["--beam-size", "2", "--nbest", "3"], ["--nbest"]),
        (["--max-tokens", "0"], ["--max-tokens"]),
        (["--max-time", "soon"], ["--max-time"]),
    ],
)
def test_conflicting_options_are_one_line(cases, capsys, tmp_path, flags, words):
    code, err = generate(capsys, cases["toy"], tmp_path / "out", *flags)
    last = err.strip().splitlines()[-1]
    assert code == 2 and "error:" in last and "Traceback" not in err, err
    assert any(word in last for word in words), last
    assert not (tmp_path / "out").exists()


def test_a_language_the_model_was_not_trained_on_is_refused_before_anything_is_written(cases, capsys, tmp_path):
    """A bilingual model whose checkpoint names its languages (zh→en) writes no `train.fr`, and reads no `de`; a
    refusal of the engine's at decoding time (the static cache with n-best lists) comes before the folder is made,
    so the corrected command then runs there."""
    state = torch.load(cases["toy"][0], weights_only=True)  # as a Trainer saves it, with the data module's settings
    state["datamodule_hyper_parameters"] = {"src_lang": "zh", "tgt_lang": "en"}
    torch.save(state, tmp_path / "toy.ckpt")
    case = (str(tmp_path / "toy.ckpt"), ["--src", cases["toy"][1][1]], ("zh", "en"))
    out = tmp_path / "out"
    for flags, words in [
        (["--tgt-lang", "fr"], "--tgt-lang fr: this model was trained zh→en"),
        (["--src-lang", "de"], "--src-lang de: this model was trained zh→en"),
    ]:
        code, err = generate(capsys, case, out, *flags)
        assert code == 2 and words in err.strip().splitlines()[-1] and "Traceback" not in err, err
        assert not out.exists()
    torch.manual_seed(0)
    words = [f"w{i}" for i in range(30)]
    tokenizers = {"src": Vocab([*words, ">>en<<", ">>fr<<"], "word").to_dict(), "tgt": Vocab(words, "word").to_dict()}
    multilingual = save_checkpoint(Seq2SeqTransformer(tokenizers=tokenizers, **TINY), tmp_path / "multi.ckpt")
    (tmp_path / "in.de").write_text("".join(f"w{i} w{i + 1}\n" for i in range(20)), encoding="utf-8")
    case = (str(multilingual), ["--src", str(tmp_path / "in.de")], ("de", "fr"))
    for flags, words in [
        (["--tgt-lang", "it"], "no target language 'it' in this model: it knows en, fr"),  # refused as it decodes
        (["--tgt-lang", "fr", "--src-lang", "deu"], "unknown language 'deu'"),
    ]:
        code, err = generate(capsys, case, out, *flags)
        assert code == 2 and words in err.strip().splitlines()[-1] and "Traceback" not in err, err
        assert not out.exists()
    code, err = generate(capsys, case, out, "--tgt-lang", "fr")  # the corrected command, in the same place
    assert code == 0 and sorted(p.name for p in out.iterdir()) == ["generation.json", "train.de", "train.fr"], err


def test_lines_with_spaces_at_an_end_are_said_once_with_their_count(cases, capsys, tmp_path):
    (tmp_path / "in.zh").write_text("我 是 学 生\n 我 是 学 生 \n我 是\t\n", encoding="utf-8")
    code, err = generate(capsys, (cases["toy"][0], ["--src", str(tmp_path / "in.zh"), "--tgt-lang", "en"], None), tmp_path / "o")
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warnings) == 1 and "2 lines with spaces at an end (stripped" in warnings[0], err
    assert lines_of(tmp_path / "o" / "train.zh") == ["我 是 学 生", "我 是 学 生", "我 是"]
    assert json.loads((tmp_path / "o" / "generation.json").read_text())["counts"]["stripped"] == 2


def test_bad_input_is_one_line_and_touches_nothing(cases, capsys, tmp_path, ckpts):
    out = tmp_path / "out"
    assert generate(capsys, cases["toy"], out)[0] == 0
    before = snapshot(out)
    for argv, status, words in [
        ([], 2, ["holds an output already", "--resume", "--force"]),
        (["--ckpt", str(ckpts["mnist"])], 2, ["MnistSequenceClassifier", "not a Seq2SeqTransformer"]),
    ]:
        ckpt, args, _ = cases["toy"]
        argv = ["--ckpt", ckpt, *args, "--output", str(out), *argv]
        code, stdout, err = run_script(capsys, "generate", *argv)
        assert code == status, err
        assert_one_line_error(subprocess.CompletedProcess(argv, code, stdout, err), *words)
        assert snapshot(out) == before
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = generate(capsys, cases["toy"], blocker / "out")
    assert code == 1 and "not a folder" in err.strip().splitlines()[-1], err
    code, _, err = run_script(capsys, "generate", "--ckpt", cases["toy"][0], "--src", cases["toy"][1][1], "--output", str(out))
    assert code == 2 and "--tgt-lang" in err.strip().splitlines()[-1], err


def test_a_generation_run_imports_inference_datamodules_models_and_common_only(cases, tmp_path):
    """Corpus generation is inference: a whole run (one process) loads no training, task or deploy code. The
    imported modules are the interpreter's own record of them (`-X importtime`). Every other line it prints is its
    own: no library's warning (Lightning's LeafSpec FutureWarning, common/noise.py)."""
    ckpt, args, _ = cases["toy"]
    result = run(
        [sys.executable, "-X", "importtime", "scripts/generate.py", "--ckpt", ckpt, *args, "--output", str(tmp_path / "o")],
        env=ENV,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = {line.split("|")[-1].strip().partition(".")[0] for line in result.stderr.splitlines() if "import time:" in line}
    project = {"common", "models", "datamodules", "training", "inference", "tasks", "deploy"}
    assert imported & project == {"common", "models", "datamodules", "inference"}, sorted(imported & project)
    said = [line for line in result.stderr.splitlines() if "import time:" not in line]
    assert said and not [line for line in said if "site-packages" in line or "Warning" in line], said
