"""Average the weights of the last checkpoints of a run, fairseq-style, into one checkpoint.

    .venv/bin/python scripts/average_checkpoints.py CKPT CKPT [CKPT ...] --out averaged.ckpt
    .venv/bin/python scripts/average_checkpoints.py RUN/checkpoints --last 5 --out averaged.ckpt

docs/guide/training.md ("Before and after a run") says what the output holds and what it can be used for.
"""

from __future__ import annotations

from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.checkpoints import add_output_arguments, add_weights_argument, output_checkpoint, read_checkpoint  # noqa: E402
from common.commands import script_parser  # noqa: E402
from common.errors import CheckpointError  # noqa: E402
from common.exits import exit_on_user_error  # noqa: E402
from common.files import atomic_output  # noqa: E402


@exit_on_user_error
def main(argv: list[str] | None = None) -> Path:
    parser = script_parser(__doc__)
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one directory of them with --last N")
    parser.add_argument("--last", type=int, help="with a directory: average its N checkpoints of highest step")
    add_output_arguments(parser)
    add_weights_argument(parser, "average")
    args = parser.parse_args(argv)
    if args.last is not None and (len(args.inputs) != 1 or args.last < 2):
        parser.error("--last N takes one directory and N of at least 2")
    import torch  # once the arguments are read: --help and an argument error answer before torch loads

    from training.averaging import average_checkpoints, last_checkpoints

    if args.last is not None:
        paths = last_checkpoints(args.inputs[0], args.last)
    else:
        paths = [Path(p) for p in args.inputs]
    out = Path(args.out)
    if any(out.resolve() == p.resolve() for p in paths):
        raise CheckpointError(f"--out {out} is one of the checkpoints being averaged; choose another path")
    output_checkpoint(args)
    # The output's place is tried (a temporary file beside it) before the averaging; the average is
    # renamed onto --out only once it is complete, and a failed write leaves nothing behind.
    with atomic_output(out) as tmp:
        averaged = average_checkpoints(paths, weights=args.weights)
        with open(tmp, "wb") as f:  # a file object: a full disk is an OSError, not torch's "unexpected pos"
            torch.save(averaged, f)
    ema = "current_model_state" in read_checkpoint(paths[-1])  # of a run without EMA, its only weights
    which = ("EMA weights" if args.weights == "averaged" else "training weights") if ema else "weights"
    print(f"wrote {out}: the mean of the {which} of {len(paths)} checkpoints ({paths[0].name} … {paths[-1].name})")
    return out


if __name__ == "__main__":
    main()
