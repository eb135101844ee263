"""Rewrite what is derived from the tables of variants (models/activations.py, norms.py, ...) and the variant files.

    .venv/bin/python scripts/regenerate.py

docs/guide/variants.md ("A network's settings") lists what it rewrites: the sweeps of variants, the docs' lists of
what each export refuses, and scripts/help/fit.txt and prepare.txt; the tests that fail while a file differs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

import yaml  # noqa: E402

from common.commands import help_key, script_parser, stored_help_path  # noqa: E402
from common.environment import ROOT  # noqa: E402

COMMAND = ".venv/bin/python scripts/regenerate.py"
DOCS = ("README.md", "docs/guide/export-deploy.md")
# The sentence each doc gives per engine, however its lines wrap; its list (up to the sentence's end) is generated.
REFUSALS = re.compile(
    r"(The (CTranslate2|Hugging Face) export refuses, in one line naming the setting[^:]*: )(.*?)\.(?=\s|$)".replace(" ", r"\s+"),
    re.S,
)


def sweep_of_variants(text: str) -> str:
    """A sweep file's text with its `config` values every variant file that fits its recipe (baseline first) and
    its first "N runs" / "N × S runs" (S seeds) counted; a sweep of other settings comes back as it is."""
    from training.variants import recipe_task, task_input, variants

    sweep = yaml.safe_load(text)
    if "config" not in sweep["parameters"]:
        return text
    recipe = ROOT / sweep["command"][sweep["command"].index("--config") + 1]
    names = [f"configs/variants/{v.name}.yaml" for v in variants(task_input(recipe_task(recipe)))]
    seeds = len(sweep["parameters"].get("seed_everything", {}).get("values", [0]))
    text = re.sub(r"\d+ (× \d+ )?runs", f"{len(names)} × {seeds} runs" if seeds > 1 else f"{len(names)} runs", text, count=1)
    listed = "".join(f"      - {name}\n" for name in names)
    return re.sub(r"(\n  config:\n    values:\n)(      - .*\n)*", lambda m: m.group(1) + listed, text)


def refusals(allowed) -> str:
    """What an allow-list refuses of `Seq2SeqSettings`, field by field: the refused names of a table's field
    (`one_of`: every entry, one added at run time too), the refused boolean, else the rule's reason."""
    from deploy.verify import ANY
    from models.config import Seq2SeqSettings

    base, phrases = Seq2SeqSettings(), []
    for field in dataclasses.fields(Seq2SeqSettings):
        rule = allowed.get(field.name, ANY)
        options = getattr(Seq2SeqSettings.CHECKS.get(field.name), "options", None)
        if isinstance(field.default, bool):
            options = (True, False)
        if rule is ANY:
            continue
        if options is None:  # a number: the rule's reason says what it takes
            phrases.append(f"`{field.name}` ({rule.why})")
        elif refused := [str(v).lower() if isinstance(v, bool) else str(v) for v in options if not rule.allows(v, base)]:
            phrases.append(f"`{field.name}` {' or '.join(refused)}")
    return "; ".join(phrases)


def with_refusals(text: str) -> str:
    """`text` (a doc) with each export's refusal sentence listing what its allow-list refuses today."""
    from deploy import ctranslate2, marian_shape

    lists = {module.ENGINE: refusals(module.ALLOWED) for module in (ctranslate2, marian_shape)}
    return REFUSALS.sub(lambda m: f"{m.group(1)}{lists[' '.join(m.group(2).split())]}.", text)


STORED_HELPS = ("fit", "prepare")  # scripts/help/<name>.txt


def parsers_help(name: str) -> str:
    """What scripts/<name>.py's parser prints for `--help` (fit.py's with its default recipe), 80 columns wide: in a
    fresh interpreter, where the classes it lists as known are those a run imports (and not, say, a test's)."""
    code = f"import sys; sys.argv = ['{name}.py']; from scripts import {name}; {name}.main(['--help'])"
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout


def stored_help_text(name: str) -> str:
    """scripts/help/<name>.txt: the key it was written under (common.commands.help_key), then the parser's help."""
    return f"# key: {help_key()}\n{parsers_help(name)}"


def main(argv: list[str] | None = None) -> None:
    script_parser(__doc__).parse_args(argv)
    targets = [(p, sweep_of_variants) for p in sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))]
    targets += [(ROOT / doc, with_refusals) for doc in DOCS]
    targets += [(stored_help_path(name), lambda old, name=name: stored_help_text(name)) for name in STORED_HELPS]
    for path, generate in targets:
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if (new := generate(old)) != old:
            path.parent.mkdir(exist_ok=True)
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
