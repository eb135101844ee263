"""The scripts' command lines: the parser each starts from (`script_parser`) and the checks they share, the
arguments a `main` was called with (`invocation`); the commands a run prints for its user to paste: the one that
resumes it (`resume_command`: after a signal, a time limit, or a corpus generation stopped part-way), and how to
name this interpreter in it (`program`); and the stored help of the commands whose parser takes seconds to build,
and the argument errors it answers at once (`answer_stored_help`)."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import sys
from pathlib import Path

from .exits import EXIT_BROKEN_PIPE, quiet_broken_pipe

# SacreBLEU's BLEU tokenizers, as scripts/evaluate.py and scripts/compare.py offer them.
BLEU_TOKENIZERS = ("13a", "zh", "intl", "char", "none")
# The environment settings that change what a resumed run does or how fast it goes, kept in the resume command.
RESUME_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "WANDB_MODE")


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser, described by the first paragraph of its docstring `doc`. No option may be abbreviated: a
    command that worked would break, or change meaning, the day another option starting the same is added."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0], allow_abbrev=False)


def require_at_least_one(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Each count of `names` (the options' destinations) that was given is at least 1, else the parser's error."""
    for name in names:
        if (value := getattr(args, name)) is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")


def add_tokenize_argument(parser: argparse.ArgumentParser) -> None:
    """`--tokenize`: the tokenizer of the BLEU scores a script prints (tasks/metrics.py picks one when not given)."""
    parser.add_argument(
        "--tokenize",
        default=None,
        choices=BLEU_TOKENIZERS,
        help="SacreBLEU's BLEU tokenizer (default: zh for Chinese references, else 13a)",
    )


def invocation(argv: list[str] | None, name: str) -> tuple[str, list[str]]:
    """The script as its user named it and its arguments: the command line's when `argv` is None, else `argv` given
    to scripts/<name>.py's `main` (by a test, or another script)."""
    if argv is None:
        return sys.argv[0], sys.argv[1:]
    return f"scripts/{name}.py", list(argv)


def chosen_environment() -> dict[str, str]:
    """The settings of `RESUME_ENVIRONMENT` set now. Taken as a run starts, they are the user's: once the run is
    under way, Lightning's W&B logger has set `WANDB_MODE=dryrun` in this process for an offline run, which a
    resumed run must not inherit (it would stay offline after the user logs in)."""
    return {name: os.environ[name] for name in RESUME_ENVIRONMENT if os.environ.get(name)}


def resume_command(
    args: list[str],
    script: str = "scripts/fit.py",
    settings: dict[str, str] | None = None,
    environment: dict[str, str] | None = None,
    switch: str | None = None,
    dropped: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> str:
    """The command that resumes a run started with `args`: the interpreter that runs this process (the
    README's `.venv/bin/python` rather than whatever `python` means in the user's shell), the environment
    settings `environment` (`chosen_environment()` as the run started; now when None), the same arguments but
    for `settings` ({flag: value}, in place of any value given), then `--ckpt_path last`. A script resumed by a
    flag of its own (`switch`: scripts/generate.py's `--resume`) gets that flag instead, and loses the flags
    without a value in `dropped` (its `--force`); the flags in `unset` go with their values (its `--max-time`, so
    that the resume runs to the end). Words after a `--` are another program's (scripts/ablate.py's for fit.py):
    kept as they are, after the rest."""
    settings = {**(settings or {}), **({} if switch else {"--ckpt_path": "last"})}
    args, tail = (args[: args.index("--")], args[args.index("--") :]) if "--" in args else (args, [])
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == switch or arg in dropped:
            continue
        elif arg in settings or arg in unset:
            skip = True
        elif arg.split("=", 1)[0] not in (*settings, *unset):
            kept.append(arg)
    environment = chosen_environment() if environment is None else environment
    env = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    given = [word for flag, value in settings.items() for word in (flag, value)] + [switch] * bool(switch)
    return " ".join([*env, shlex.join([program(sys.executable or "python"), script, *kept, *given, *tail])])


def program(path: str) -> str:
    """How to name the program at `path` in a command a user pastes: relative to the working folder when it lies
    below it (`.venv/bin/python`, `./python`), else the absolute path; never a bare name that PATH would resolve
    to another program (or to none: the venv's `wandb` is on PATH only inside the venv)."""
    relative = os.path.relpath(path)
    if relative.startswith(".."):
        return path
    return relative if os.sep in relative else os.path.join(".", relative)


def help_key() -> str:
    """The versions a stored help was written under (Python, jsonargparse, Lightning, torch): what, beside our code,
    decides what the parser prints. A stored help is printed only under the same key."""
    from importlib.metadata import version

    versions = [f"{name} {version(name)}" for name in ("jsonargparse", "lightning", "torch")]
    return "; ".join([f"python {sys.version_info.major}.{sys.version_info.minor}", *versions])


def stored_help(path: Path, key: str) -> str | None:
    """The help stored in `path` (its first line `# key: KEY`, then the text), if it was written under `key`."""
    try:
        first, _, text = path.read_text(encoding="utf-8").partition("\n")
    except OSError:
        return None
    return text if first == f"# key: {key}" else None


def stored_help_path(name: str) -> Path:
    """scripts/help/<name>.txt, where scripts/regenerate.py stores the help of scripts/<name>.py's parser."""
    return Path(__file__).resolve().parents[1] / "scripts" / "help" / f"{name}.txt"


def answer_stored_help(name: str) -> None:
    """Answer at once from the help stored for scripts/<name>.py (`stored_help_path`), if it was written under these
    versions (`help_key`; else the parser answers, seconds later): `-h` or `--help` alone prints it and exits 0; an
    option it does not list, a `--config` file that does not exist, or a value its stated type cannot read, is one
    line and exit 2. scripts/fit.py's and prepare.py's parsers are jsonargparse's, built from Lightning's classes
    after seconds of imports; their text, 80 columns wide, is written by scripts/regenerate.py, and
    tests/test_imports.py fails while it differs from the parser's under the same versions. Everything else
    (`--config RECIPE --help`, an option below `--model.`, a path) the parser answers."""
    if (text := stored_help(stored_help_path(name), help_key())) is None:
        return
    args = sys.argv[1:]
    if args in (["-h"], ["--help"]):
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `fit.py --help | head`: the reader is gone, as `cat` ends
            quiet_broken_pipe()
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        raise SystemExit(0)
    if "-h" not in args and "--help" not in args and (error := argument_error(args, text)):
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)


NUMBER = re.compile(r"-\d|-\.\d|-inf|-nan", re.IGNORECASE)  # a value such as `--trainer.max_steps -1`


def listed_options(help_text: str) -> tuple[set[str], set[str], dict[str, str]]:
    """The options a stored help lists (`--a.b`, `--a.b+`, `-c`); those whose values are classes (`--model`,
    `--trainer.logger`: any `--model.*` is the parser's to judge) or untyped (`--trainer` of prepare.py); and the
    type each typed option states (`(type: Optional[int], default: null)`, its text run over several lines)."""
    names, types, blocks = set(), {}, []  # blocks: each option's names and the lines of its description
    for line in help_text.splitlines():
        if line.startswith("  -"):  # an option's first line; its description is indented further
            head, *said = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            blocks.append(([part.split()[0] for part in head.split(", ") if part.startswith("-")], said))
        elif blocks:
            blocks[-1][1].append(line.strip())
    for options, said in blocks:
        names |= set(options)
        if typed := re.search(r"\(type: (.+?)(?:, default: |\)$)", " ".join(said)):
            types.update(dict.fromkeys(options, typed.group(1)))
    parents = {name.rpartition(".")[0] for name in names if "." in name}
    open_ = {name[: -len(".help")] for name in names if name.endswith(".help")}
    return names, open_ | {name for name in names if name not in parents}, types


WORDS = {"null", "none", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}  # YAML's, in any case


def refused_value(value: str, typed: str) -> bool:
    """Whether no reading of `value` fits the type `typed` states, for the types this can judge (numbers, booleans,
    null and Literal choices; anything else the parser judges): a word that is not a number where a number is
    wanted, a choice not listed."""
    members = re.split(r",\s*|\s*\|\s*", re.sub(r"^(Optional|Union)\[(.*)\]$", r"\2", typed))
    choices = re.fullmatch(r"Literal\[(.*)\]", typed)
    if choices:
        return value not in re.findall(r"'([^']*)'", choices.group(1))
    if not members or not set(members) <= {"int", "float", "bool", "null"}:
        return False
    try:
        float(value.replace("_", ""))
        return False
    except ValueError:
        pass
    try:
        int(value, 0)
        return False
    except ValueError:
        return value.lower() not in WORDS


def argument_error(args: list[str], help_text: str) -> str | None:
    """What the parser would refuse first, of what the stored help can tell: an option it does not list (not one
    below an option whose value is a class), a `--config` file that does not exist, or a value its stated type
    cannot read (`refused_value`); None when it cannot tell."""
    names, open_, types = listed_options(help_text)
    for i, arg in enumerate(args):
        if not arg.startswith("-") or NUMBER.match(arg) or (i and args[i - 1] in ("-c", "--config")):
            continue
        name, _, value = arg.partition("=")
        if name in ("-c", "--config"):
            value = value if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if value and not re.search(r"[:{\n]", value) and not Path(value).exists():
                return f"{name} {value}: no such file"
        elif name not in names and not any(name.startswith(f"{parent}.") for parent in open_):
            given = arg if "=" in arg or i + 1 == len(args) or args[i + 1].startswith("--") else f"{arg} {args[i + 1]}"
            near = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
            return f"unrecognized arguments: {given}" + (f"; did you mean {near[0]}?" if near else "; --help lists the options")
        elif name in types and ("=" in arg or i + 1 < len(args)):
            value = value if "=" in arg else args[i + 1]
            if (NUMBER.match(value) or not value.startswith("-")) and refused_value(value, types[name]):
                return f"{name} {value}: expected {types[name]}"
    return None
