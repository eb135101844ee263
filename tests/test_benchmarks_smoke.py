"""Every benchmark script runs end to end at a tiny size, so none of them can rot (< 60 s).

Each script's `main(argv)` runs in this process with `--tiny --json PATH` (what
`python benchmarks/<name>.py --tiny` does, without paying for a fresh `import torch` each);
the tests check the printed table and the JSON fields, not the timings."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their `_common` helper as a sibling


def run_benchmark(name: str, tmp_path: Path, capsys, *extra: str) -> tuple[str, dict]:
    out = tmp_path / f"{name}.json"
    importlib.import_module(name).main(["--tiny", "--json", str(out), *extra])
    stdout = capsys.readouterr().out
    return stdout, json.loads(out.read_text())


def test_train_step(tmp_path, capsys, monkeypatch):
    # Each contender's step is still run, but "takes" a set time per repeat: the table's figures are then known.
    seconds = {"ours (SDPA)": [0.1, 0.2, 0.4], "torch.nn.Transformer": [0.2, 0.2, 0.2], "ours (matmul-softmax)": [0.4, 0.8, 0.8]}
    repeat = {name: 0 for name in seconds}
    train_step = importlib.import_module("train_step")

    def timed(step, device):
        step()
        name = step.__self__.name
        repeat[name] += 1
        return seconds[name][repeat[name] - 1]

    monkeypatch.setattr(train_step, "timed", timed)
    stdout, data = run_benchmark("train_step", tmp_path, capsys)
    assert "| model" in stdout and "torch.nn.Transformer" in stdout and "speed vs torch" in stdout
    names = [r["name"] for r in data["results"]]
    assert names == ["ours (SDPA)", "torch.nn.Transformer", "ours (matmul-softmax)"]
    # the toy batch: 4 rows of 8 source and 8 target positions, 25 % of them padding
    assert data["tokens_per_step"] == 48
    # speed vs torch: torch's time / this contender's time in the same repeat (ours: 2, 1, 0.5); median, min, max
    speed = {"ours (SDPA)": (1.0, 0.5, 2.0), "torch.nn.Transformer": (1.0, 1.0, 1.0), "ours (matmul-softmax)": (0.25, 0.25, 0.5)}
    for r in data["results"]:
        median = sorted(seconds[r["name"]])[1]
        assert r["step"]["median_s"] == pytest.approx(median) and r["tokens_per_s"] == pytest.approx(48 / median)
        got = r["speed_vs_torch"]
        assert (got["median"], got["min"], got["max"]) == pytest.approx(speed[r["name"]]), r
        assert r["peak_step_memory_bytes"] > 0  # a training step allocates activations and gradients
    assert data["environment"]["torch"]


def test_decode_cache_of_multi_query_attention_holds_one_key_value_head(tmp_path, capsys):
    _, full = run_benchmark("decode", tmp_path, capsys)
    _, mqa = run_benchmark("decode", tmp_path, capsys, "--num-kv-heads", "1")
    sizes = [{r["output_tokens"]: r["cache_mib"] for r in d["results"] if r["mode"] == "greedy_cached"} for d in (full, mqa)]
    nhead = full["config"]["nhead"]
    assert sizes[0].keys() == sizes[1].keys() and all(sizes[1][n] * nhead == pytest.approx(sizes[0][n]) for n in sizes[0])


def test_decode(tmp_path, capsys):
    stdout, data = run_benchmark("decode", tmp_path, capsys)
    assert "greedy, cached" in stdout and "greedy, uncached" in stdout and "beam" in stdout
    modes = {(r["output_tokens"], r["mode"]) for r in data["results"]}
    lengths = data["config"]["lengths"]
    for n in lengths:
        assert (n, "greedy_cached") in modes and (n, "greedy_uncached") in modes
    for r in data["results"]:
        if r["mode"] == "greedy_cached":
            assert r["sentences_per_s"] > 0 and r["speedup_vs_uncached"]["median"] > 0
            assert r["rows_identical_to_uncached"] == 1.0  # the cache changes nothing but the speed
        else:
            assert r["sentences_per_s"] > 0
    beam = [r for r in data["results"] if r["mode"].startswith("beam")]
    assert [(r["output_tokens"], r["mode"]) for r in beam] == [(n, "beam4_cached") for n in data["config"]["beam_lengths"]]
    assert all(r["sentences_per_s"] == pytest.approx(data["config"]["batch"] / r["time"]["median_s"]) for r in beam)


def test_profile_step(tmp_path, capsys):
    stdout, data = run_benchmark("profile_step", tmp_path, capsys)
    assert "self CPU ms / step" in stdout
    (result,) = data["results"]
    assert result["top_ops"] and result["profiled_wall_ms_per_step"] > 0
    assert all(op["self_cpu_ms_per_step"] >= 0 for op in result["top_ops"])
    # Masks are built once per forward, not per layer or head: a handful of ops per step.
    assert sum(result["mask_ops_per_step"].values()) < 20


def test_compile_check(tmp_path, capsys):
    # The "eager" backend exercises Dynamo's graph capture, guards and recompilation logic in
    # seconds and without a C++ toolchain; inductor is what `python benchmarks/compile_check.py` measures.
    stdout, data = run_benchmark("compile_check", tmp_path, capsys, "--backend", "eager")
    assert "graphs so far" in stdout
    assert len(data["train"]) == 3 and all(r["compiled_step_s"] > 0 for r in data["train"])
    assert data["train_graphs_after_second_length"] == 0, data["train"]  # no recompile per padded length
    assert data["decode"] and all(r["same_as_eager"] for r in data["decode"])


def test_peers(tmp_path, capsys):
    pytest.importorskip("transformers", reason="pip install -e '.[bench]'")
    pytest.importorskip("x_transformers", reason="pip install -e '.[bench]'")
    pytest.importorskip("ctranslate2", reason="pip install -e '.[bench]'")
    stdout, data = run_benchmark("peers", tmp_path, capsys)
    assert "What differs from ours" in stdout and "peer time / ours" in stdout
    names = [r["name"] for r in data["train"]["results"]]
    assert names == ["ours", "torch.nn.Transformer", "HF Marian", "x-transformers"]
    assert all(r["tokens_per_s"] > 0 and r["peer_over_ours"]["median"] > 0 for r in data["train"]["results"])
    for beam in ("beam1", "beam4"):
        rows = data["decode"]["results"][beam]
        assert [r["name"].split()[0] for r in rows] == ["ours", "HF", "CTranslate2", "CTranslate2"]
        assert all(r["sentences_per_s"] > 0 for r in rows)


def test_peers_without_the_optional_peers_leave_their_rows_out(tmp_path, capsys, monkeypatch):
    peers = importlib.import_module("peers")
    monkeypatch.setattr(peers, "missing_peers", lambda: ["transformers", "x_transformers", "ctranslate2"])
    out = tmp_path / "peers.json"
    peers.main(["--tiny", "--json", str(out)])
    captured = capsys.readouterr()
    data = json.loads(out.read_text())
    assert [r["name"] for r in data["train"]["results"]] == ["ours", "torch.nn.Transformer"]
    assert all([r["name"] for r in rows] == ["ours"] for rows in data["decode"]["results"].values())
    assert list(data["differences"]) == ["torch.nn.Transformer"] and "HF Marian" not in captured.out
    named = [line for line in captured.err.splitlines() if line.startswith("peers: ")]
    assert named == [
        "peers: transformers is not installed: HF Marian left out (pip install transformers)",
        "peers: x-transformers is not installed: x-transformers left out (pip install x-transformers)",
        "peers: ctranslate2 is not installed: CTranslate2 left out (pip install ctranslate2)",
    ]


def test_peers_leave_out_a_ctranslate2_that_cannot_run_on_the_device(tmp_path, capsys, monkeypatch):
    """A CTranslate2 wheel built for another CUDA imports, then fails at its first translation (libcublas.so.12 on a
    CUDA 13 node): one line, its rows left out, the other decoders' tables kept."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="pip install -e '.[bench]'")
    peers = importlib.import_module("peers")
    monkeypatch.setattr(peers, "missing_peers", lambda: ["transformers", "x_transformers"])

    class TranslatorWithoutItsLibraries(ctranslate2.Translator):
        def translate_batch(self, *args, **kwargs):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    export = importlib.import_module("deploy.ctranslate2").export_ctranslate2

    def export_then_lose_the_libraries(*args, **kwargs):  # the export verifies itself on the CPU, as on a GPU node
        exported = export(*args, **kwargs)
        monkeypatch.setattr(ctranslate2, "Translator", TranslatorWithoutItsLibraries)
        return exported

    monkeypatch.setattr("deploy.ctranslate2.export_ctranslate2", export_then_lose_the_libraries)
    out = tmp_path / "peers.json"
    peers.main(["--tiny", "--task", "decode", "--json", str(out)])
    data = json.loads(out.read_text())
    assert all([r["name"] for r in rows] == ["ours"] for rows in data["decode"]["results"].values())
    named = [line for line in capsys.readouterr().err.splitlines() if "CTranslate2" in line]
    assert named == [
        "peers: CTranslate2 cannot run on cpu here (Library libcublas.so.12 is not found or cannot be loaded): its rows left out"
    ]


def test_peers_real_batches_are_the_samplers_median_batch():
    from types import SimpleNamespace

    from tests.helpers import SHARED_DATA

    if not (SHARED_DATA / "multi30k").is_dir():
        pytest.skip("../shared/data/multi30k is not here")
    peers = importlib.import_module("peers")
    args = SimpleNamespace(corpus=str(SHARED_DATA / "multi30k"), max_tokens=512)
    src, tgt, by_length = peers.corpus_batches(args)
    assert src.numel() <= 512 and tgt[:, :-1].numel() <= 512 and (tgt[:, 0] == 1).all()  # a budget batch, <bos> first
    assert (args.batch, args.src_len, args.tgt_len) == (src.size(0), src.size(1), tgt.size(1) - 1)
    padding = (src.eq(0).sum() + tgt.eq(0).sum()) / (src.numel() + tgt.numel())
    assert 0 < padding < 0.5 and args.pad_frac == pytest.approx(float(padding))  # real, uneven lengths
    assert len(by_length) == 29_000 and [len(r) for r in by_length] == sorted(len(r) for r in by_length)
    assert all(r.ne(0).all() and r[-1] == 2 for r in by_length[::1000])  # unpadded sources ending in <eos>


def test_peers_ratio_is_the_peers_time_over_ours_in_the_same_repeat():
    from types import SimpleNamespace

    peers = importlib.import_module("peers")
    ours = SimpleNamespace(name="ours", times=[1.0, 2.0, 4.0], peak_bytes=None)
    peer = SimpleNamespace(name="peer", times=[3.0, 2.0, 2.0], peak_bytes=2**20)  # 3x, 1x and 0.5x our time
    rows, results = peers.rows_against_ours([ours, peer], 12, "sentences_per_s")
    ratio = results[1]["peer_over_ours"]
    assert (ratio["median"], ratio["min"], ratio["max"]) == (1.0, 0.5, 3.0)
    assert results[1]["sentences_per_s"] == 6.0 and results[0]["sentences_per_s"] == 6.0  # 12 / the median time
    assert rows[0][4] == "1 (reference)" and rows[1][4] == "1.00 (0.50–3.00)" and rows[1][5] == "1.0"


def test_decoding_tools(tmp_path, capsys, monkeypatch):
    # A decode "takes" 10 ms per decoder call it makes: every search runs the 4 output steps (<eos> is never
    # chosen), and an ensemble of 2 runs both networks' decoders at each, so its time is twice beam search's.
    from models import Seq2SeqNet

    decoding_tools, calls, decode = importlib.import_module("decoding_tools"), [0], Seq2SeqNet.decode

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return decode(self, *args, **kwargs)

    def timed(fn, device):
        before = calls[0]
        fn()
        return 0.01 * (calls[0] - before)

    monkeypatch.setattr(Seq2SeqNet, "decode", counted)
    monkeypatch.setattr(decoding_tools, "timed", timed)
    stdout, data = run_benchmark("decoding_tools", tmp_path, capsys)
    assert "4-best of beam 4" in stdout and "ensemble of 2" in stdout
    assert [r["mode"] for r in data["results"]] == ["beam 4", "4-best of beam 4", "ensemble of 2, beam 4"]
    for r, steps, ratio in zip(data["results"], (4, 4, 8), (1.0, 1.0, 2.0)):
        assert r["time"]["median_s"] == pytest.approx(0.01 * steps) and r["time_vs_beam"]["median"] == pytest.approx(ratio)
        assert r["sentences_per_s"] == pytest.approx(data["config"]["batch"] / (0.01 * steps))


def test_static_decode(tmp_path, capsys):
    stdout, data = run_benchmark("static_decode", tmp_path, capsys)
    assert "growing cache (today)" in stdout and "static cache, eager" in stdout and "torch.compile" in stdout
    searches = {(r["search"], r["name"]) for r in data["results"]}
    assert len(searches) == 6  # greedy and beam × growing, static eager, static compiled
    assert all(r["same_output"] and r["sentences_per_s"] > 0 for r in data["results"])


def test_corpus_decoding(tmp_path, capsys):
    pytest.importorskip("transformers", reason="pip install -e '.[bench]'")
    pytest.importorskip("ctranslate2", reason="pip install -e '.[bench]'")
    from inference import Translator
    from tasks.metrics import corpus_scores

    sources = [" ".join(f"w{(5 * i + j) % 17}" for j in range(1 + i % 6)) for i in range(10)]
    refs = [" ".join(reversed(s.split())) for s in sources]
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(sources[:4] + [""] + sources[4:]) + "\n")  # an empty line is left out, with its reference
    ref.write_text("\n".join(refs[:4] + ["left out"] + refs[4:]) + "\n")
    ckpt = importlib.import_module("corpus_decoding").tiny_model(tmp_path, sources)
    exported = tmp_path / "exports"
    argv = ["--ckpt", str(ckpt), "--src", str(src), "--ref", str(ref), "--export-dir", str(exported), "--batch-limit"]
    stdout, data = run_benchmark("corpus_decoding", tmp_path, capsys, *argv)
    assert "| engine" in stdout and "ours / generate at beam 4, 1 thread(s), sentences/s" in stdout
    assert data["sentences"] == 10 and (exported / "hf" / "config.json").is_file() and (exported / "ct2" / "model.bin").is_file()
    ct2 = [f"CTranslate2 {c}, {s}" for c in ("float32", "int8") for s in ("exact", "fast (patience 1.5)")]
    engines = ["ours", "ours, batch's limit", "HF generate", *ct2]
    rows = {(r["engine"], r["search"]): r for r in data["results"]}
    assert list(rows) == [(e, s) for s in ("beam 4", "greedy") for e in engines]
    # Greedy generate and our CTranslate2 engine give our outputs (tests/test_export_hf.py and
    # tests/test_ctranslate2_translator.py hold them to it): the counts of equal outputs must say so.
    for engine in ("HF generate", "CTranslate2 float32, exact"):
        assert rows[engine, "greedy"]["same_as_ours"] == 10, rows[engine, "greedy"]
    exact = rows["CTranslate2 float32, exact", "beam 4"]
    assert exact["same_as_ours"] == 10 and exact["largest_score_difference"] < 1e-3
    assert rows["ours", "beam 4"]["largest_score_difference"] == 0 and rows["ours", "beam 4"]["ours_over_this_s"] == 1
    # Our rows' tokens and BLEU are those of our translator's outputs, decoded here in the same batches.
    translator = Translator.from_checkpoint(ckpt)
    for search, beam in (("beam 4", 4), ("greedy", 1)):
        outputs = translator.translate_many(sources, batch_size=4, beam_size=beam)  # --tiny's batches
        assert len(set(outputs)) >= 3 and sum(map(len, outputs)) > 0, outputs  # outputs that tell engines apart
        assert rows["ours", search]["output_tokens"] == sum(len(translator.tgt_tokenizer.encode(o)) + 1 for o in outputs)
        assert rows["ours", search]["bleu"] == pytest.approx(corpus_scores(outputs, refs)["bleu"])
    for r in data["results"]:
        assert r["sentences_per_s"] == pytest.approx(10 / r["wall_s"])
        assert r["tokens_per_s"] == pytest.approx(r["output_tokens"] / r["wall_s"])
        assert r["threads"] == 1 and 0 <= r["bleu"] <= 100
    (ratio,) = data["ours_over_generate"]  # generate's time / ours, of the one pass
    beam = rows["HF generate", "beam 4"]["wall_s"], rows["ours", "beam 4"]["wall_s"]
    assert ratio["threads"] == 1 and ratio["median"] == pytest.approx(beam[0] / beam[1])


def test_corpus_decoding_threads_and_missing_engines(tmp_path, capsys, monkeypatch):
    corpus_decoding = importlib.import_module("corpus_decoding")
    monkeypatch.setattr(corpus_decoding.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert corpus_decoding.thread_counts("1,all") == [1, 3] and corpus_decoding.thread_counts("3, all,2") == [3, 2]
    find_spec = corpus_decoding.importlib.util.find_spec
    missing = lambda name: None if name == "ctranslate2" else find_spec(name)  # noqa: E731
    monkeypatch.setattr(corpus_decoding.importlib.util, "find_spec", missing)
    with pytest.raises(SystemExit) as exit:
        corpus_decoding.main(["--tiny", "--engines", "torch,ct2"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --engines ct2 needs ctranslate2, which is not installed: pip install ctranslate2 (or leave ct2 out of --engines)"
    ]
