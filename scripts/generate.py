"""Decode a whole corpus with a trained model into a new parallel corpus (distillation, back-translation).

    .venv/bin/python scripts/generate.py --ckpt CKPT --src train.de.gz --output distilled --beam-size 4
    .venv/bin/python scripts/generate.py --ckpt CKPT --data-dir data/multi30k --format aligned --split train \
        --src-lang de --tgt-lang en --output distilled --devices 4 --accelerator cpu    # 4 processes (DDP)
    .venv/bin/python scripts/generate.py --ckpt EN_DE --src mono.en --tgt-lang de --output bt \
        --sampling --sampling-topk 10 --seed 1 --tag '<BT>'                            # sampled back-translation
    .venv/bin/python scripts/generate.py --engine ctranslate2 --model EXPORT ...      # scripts/export.py's

docs/guide/corpus-generation.md: the input (a file, or a corpus's split), the output folder and generation.json, the
batches and shards, several processes, the stop and `--resume` that give a byte-identical corpus, and the errors.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common import signals  # noqa: E402
from common.checkpoints import add_weights_argument  # noqa: E402
from common.commands import invocation, program, require_at_least_one, resume_command, script_parser  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.exits import EXIT_NOTHING_TO_DO, EXIT_TIME_LIMIT, exit_on_user_error  # noqa: E402
from inference.flags import add_engine_arguments, decoding_options, parse_decoding_args, search_label  # noqa: E402
from inference.generation import plan as gen  # noqa: E402
from inference.generation.input import add_input_arguments, languages, read_input  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    add_engine_arguments(parser)
    add_weights_argument(parser, "decode with")
    add_input_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--output", required=True, metavar="DIR", help="the folder of the new corpus")
    out.add_argument("--prefix", default="train", help="the files' names: DIR/PREFIX.LANG (default: train)")
    out.add_argument("--tag", default="", help="a word put before every output (tagged back-translation)")
    out.add_argument("--keep-closest", action="store_true",
                     help="of each line's --nbest outputs, write only the one closest to its reference (sentence BLEU; "
                     "Kim & Rush 2016's sequence-level interpolation): needs references (--ref, or a corpus split)")  # fmt: skip
    out.add_argument("--resume", action="store_true", help="go on with DIR's shards (the same model, input, options)")
    out.add_argument("--force", action="store_true", help="replace DIR's output (this script's files only)")
    work = parser.add_argument_group("batches and processes")
    work.add_argument("--max-tokens", type=int, default=4096, help="padded source tokens a batch (default: 4096)")
    work.add_argument("--batch-size", type=int, default=None, help="sentences a batch, at most (default: no limit)")
    work.add_argument("--shard-size", type=int, default=2000, help="sentences a shard, about (default: 2000)")
    work.add_argument("--devices", "--trainer.devices", dest="devices", type=int, default=1, help="processes a node")
    work.add_argument("--num-nodes", "--trainer.num_nodes", dest="num_nodes", type=int, default=1, help="nodes")
    work.add_argument("--accelerator", "--trainer.accelerator", dest="accelerator", default=None,
                      help="Lightning's accelerator (default: gpu with --device cuda, else cpu)")  # fmt: skip
    work.add_argument("--strategy", "--trainer.strategy", dest="strategy", default=None,
                      help="Lightning's strategy (default: ddp with several processes)")  # fmt: skip
    work.add_argument("--max-time", default=None, help="stop after this long: seconds, or DD:HH:MM:SS")
    work.add_argument("--log-every", type=float, default=30.0, help="a progress line at least this often, in seconds")
    args = parse_decoding_args(parser, argv, "nbest", shown={"seed": "0, so that a resume draws the same samples"})
    options(args)  # bad values and combinations refused before anything loads
    require_at_least_one(parser, args, "max_tokens", "shard_size", "devices", "num_nodes")
    if args.keep_closest and (args.nbest or 1) < 2:
        raise InputError("--keep-closest picks one of several outputs a line: give --nbest N (N >= 2)")
    if args.resume and args.force:
        raise InputError("--resume goes on with an output, --force replaces it: give one of them")
    args.max_time = seconds(args.max_time) if args.max_time is not None else None
    return args


def options(args: argparse.Namespace, engine=None):
    """The run's options over the engine's defaults; sampling is seeded (0 unless --seed), so that it resumes.
    `--tgt-lang` names the output files; only a multilingual model is also asked for that language by its tag."""
    opts = decoding_options(args, engine.options if engine is not None else None, "nbest")
    if engine is not None and not engine.languages:
        opts = opts.replace(tgt_lang=None)
    return opts.replace(seed=0) if opts.sampling and opts.seed is None else opts


def seconds(text: str) -> float:
    """`--max-time`: seconds, or DD:HH:MM:SS (`--trainer.max_time`'s form; leading fields may be left out)."""
    try:
        parts = [float(p) for p in text.split(":")]
    except ValueError:
        parts = []
    if not 1 <= len(parts) <= 4 or any(p < 0 for p in parts):
        raise InputError(f"--max-time {text!r}: give seconds (3600) or DD:HH:MM:SS (00:01:00:00)")
    return sum(p * unit for p, unit in zip(reversed(parts), (1, 60, 3600, 86400)))


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    started, (script, argv) = time.time(), invocation(argv, "generate")
    args = parse_args(argv)

    resume = resume_command(argv, script, switch="--resume", dropped=("--force",), unset=("--max-time",))
    try:
        with signals.deferred():  # a signal from here on stops the run before its next shard, with its line
            job = prepare(args, resume)
            processes = decode(args, job)
    except signals.Stopped as stop:  # a second signal
        if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":  # one line, rank 0's
            name = signal.Signals(stop.signum).name
            print(
                f"stopped at once by a second signal ({name}): the shards written are kept; resume with: {resume}",
                file=sys.stderr,
            )
        raise SystemExit(128 + stop.signum) from None
    if processes is None:  # not rank 0: rank 0 puts the output together
        return
    counts = gen.assemble(job.folder, job.plan, job.sources, job.refs, job.names, job.opts.nbest, args.tag, args.keep_closest)
    record = {
        "model": job.models,
        "engine": job.engine_label,
        "options": job.opts.as_dict(),
        "command": shlex.join([program(sys.executable or "python"), script, *argv]),
        "input": job.described,
        "files": [str(p) for p in job.names],
        "counts": {**job.counts, **counts},
        "batches": len(job.plan.batches),
        "shards": len(job.plan.shards),
        "processes": processes,
    }
    gen.write_record(job.folder, record, started)
    print(
        f"wrote {counts['outputs']:,} lines to {job.names[1]} and {job.names[0]} ({json.dumps(record['counts'])})",
        file=sys.stderr,
    )


def prepare(args: argparse.Namespace, resume: str) -> argparse.Namespace:
    """The model, the input, the plan; on rank 0, the output folder made ready (or refused) and the input's
    empty and over-long lines said once."""
    from inference.flags import load_engines
    from inference.generation.run import check_decodes

    if args.engine == "torch":
        args.accelerator = args.accelerator or ("gpu" if args.device.startswith("cuda") else "cpu")
        args.device = "cpu"  # loaded here, put on each process's device by Lightning
    job = argparse.Namespace(folder=Path(args.output), resume=resume)
    job.engine, job.ensemble = load_engines(args)
    job.opts = opts = options(args, job.engine)
    job.engine_label = " ".join(filter(None, (args.engine, search_label(args))))
    src_lang, tgt_lang = languages(args, job.engine)
    job.sources, job.refs, job.described, stripped = read_input(args, src_lang, tgt_lang)
    if args.keep_closest and job.refs is None:
        raise InputError(f"--keep-closest needs references: {job.described} has none (give --ref FILE)")
    max_len = job.engine.net.max_len if args.engine == "torch" else job.engine.meta["max_len"]
    lengths, over = gen.measure(job.engine.src_tokenizer, job.sources, max_len)
    empty = sum(1 for s in job.sources if not s)
    if empty == len(job.sources):
        raise InputError(f"{job.described} has no sentence (only empty lines): nothing to generate")
    job.counts = {"lines": len(job.sources), "empty": empty, "over_long": over, "stripped": stripped}
    job.plan = plan = gen.make_plan(lengths, args.max_tokens, args.batch_size, args.shard_size)
    job.names = gen.outputs_of(job.folder, args.prefix, src_lang, tgt_lang, job.refs is not None)
    if not gen.launching_process():
        return job
    job.models = gen.model_record(args.ckpt if args.engine == "torch" else [args.model])  # reads each file whole
    if args.resume and (job.folder / gen.RECORD).is_file() and not (job.folder / gen.SHARDS).exists():
        print(f"nothing to generate: {job.folder} is complete ({gen.RECORD})", file=sys.stderr)
        raise SystemExit(EXIT_NOTHING_TO_DO)
    planned = {
        "input": gen.lines_digest(job.sources, job.refs),
        "plan": plan.digest(),
        "shards": len(plan.shards),
        "model": [m["sha256"] for m in job.models],
        "engine": job.engine_label,  # a resume with another search is refused
        "options": opts.as_dict(),
        "files": [args.prefix, src_lang, tgt_lang, args.tag, args.keep_closest],
    }
    # One sentence decoded as the run will decode them all: what the engine refuses (its options, a language) is
    # one line before the folder is touched.
    check_decodes(job.engine, next(s for s in job.sources if s), opts, job.ensemble)
    done = gen.prepare_folder(job.folder, planned, job.names, args.resume, args.force)
    for k in done:  # a resume checks the shards it keeps before it decodes the others
        gen.read_shard(job.folder, plan, k, opts.nbest)
    said = [f"{empty:,} empty line{'s' * (empty != 1)} (kept: their outputs are empty)"] * bool(empty)
    said += [f"{over:,} line{'s' * (over != 1)} longer than the model's {max_len} tokens (truncated)"] * bool(over)
    n = job.counts["stripped"]
    said += [f"{n:,} line{'s' * (n != 1)} with spaces at an end (stripped, as training reads them)"] * bool(n)
    if said:
        print(f"warning: {job.described}: {' and '.join(said)}", file=sys.stderr, flush=True)
    print(
        f"generating {len(job.sources) - empty:,} sentences in {len(plan.shards)} shards ({len(done)} done) into "
        f"{job.folder}; if stopped, resume with: {resume}",
        file=sys.stderr,
        flush=True,
    )
    return job


def decode(args: argparse.Namespace, job: argparse.Namespace) -> int | None:
    """Every shard not yet written, decoded by Lightning's prediction on the processes asked for. On rank 0, the
    number of processes once every shard is written, or a stop's one line and exit; elsewhere None."""
    import lightning as L

    from common.noise import quiet_prediction
    from inference.generation.run import Generation, ShardSampler, loader

    sampler = ShardSampler(job.plan, args.max_time, time.monotonic())
    world = args.devices * args.num_nodes
    with quiet_prediction():
        trainer = L.Trainer(
            accelerator=args.accelerator or "cpu",
            devices=args.devices,
            num_nodes=args.num_nodes,
            strategy=args.strategy or ("ddp" if world > 1 else "auto"),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,
            default_root_dir=str(job.folder),
        )
        module = Generation(job.engine, job.opts, job.plan, job.folder, sampler, job.ensemble, args.log_every)
        trainer.predict(module, loader(job.plan, job.sources, sampler), return_predictions=False)
    if not trainer.is_global_zero:
        return None
    shards = len(job.plan.shards)
    written = len(gen.complete_shards(job.folder, shards))
    if written == shards:
        return trainer.world_size
    why, signum = sampler.stop_reason()
    print(
        f"stopped by {why or 'an error on another process'}: {written} of {shards} shards written in "
        f"{job.folder / gen.SHARDS}; resume with: {job.resume}",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(128 + signum if signum else EXIT_TIME_LIMIT if why else 1)


if __name__ == "__main__":
    main()
