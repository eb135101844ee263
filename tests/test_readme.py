"""The README's Python examples run as they are written, from a fresh folder (a reader pastes them), and every
relative link of the README and the docs reaches a file and, where it names one, a heading of that file."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.helpers import ENV, HANG_TIMEOUT, ROOT

BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


# An example that trains (the toy translator's 25 epochs) is slow.
CASES = [pytest.param(i, marks=[pytest.mark.slow] if ".fit(" in b else []) for i, b in enumerate(BLOCKS)]


@pytest.mark.parametrize("block", CASES)
def test_a_readme_python_example_runs(tmp_path, block):
    (tmp_path / "example.py").write_text(BLOCKS[block], encoding="utf-8")
    # From a folder of its own (what it writes stays there), with the project importable as after `pip install -e .`.
    env = {**ENV, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(tmp_path / "example.py")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_readme_runs_the_notebook_with_what_dev_installs(tmp_path):
    # The README's command, on a one-cell notebook of our own in place of the quickstart (which trains).
    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith(".venv/bin/jupyter execute ")]
    command = line.split("#")[0].split()
    assert command[2] == "notebooks/quickstart.ipynb" and (ROOT / command[2]).is_file()
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(nb, tmp_path / "quickstart.ipynb")
    program = [str(ROOT / command[0]), *command[1:2], str(tmp_path / "quickstart.ipynb"), *command[3:]]
    result = subprocess.run(program, capture_output=True, text=True, env=ENV, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    (written,) = [p for p in tmp_path.glob("*.ipynb") if p.name != "quickstart.ipynb"]
    assert "42" in written.read_text()


def test_what_a_newcomer_looks_for_is_in_the_docs():
    readme, guide = ((ROOT / doc).read_text() for doc in ("README.md", "docs/guide/pretrained.md"))
    assert "`--test false` skips it" in readme
    assert "save_pretrained('opus-mt-de-en')" in guide and "scripts/import_pretrained.py opus-mt-de-en " in guide
    ignored = subprocess.run(["git", "check-ignore", "-q", "exported/multi30k/model.bin"], cwd=ROOT)
    assert ignored.returncode == 0  # scripts/export.py's outputs, as the docs name them, stay out of git


# ---------------------------------------------------------------------------------------------- links in the docs

DOCS = [ROOT / "README.md", ROOT / "docs" / "guide.md", ROOT / "docs" / "results.md"]
DOCS += sorted((ROOT / "docs").rglob("*.md"))
DOCS = list(dict.fromkeys(DOCS))
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if opening:
            mark = opening.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (links by their text, code without its backticks), lowercased,
    every character but letters, digits, spaces, hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The #anchors a markdown file has: its headings' slugs (a repeated one numbered -1, -2, … as GitHub numbers
    them), and the ids of HTML anchors."""
    text = path.read_text(encoding="utf-8")
    seen, found = Counter(), set()
    for _, line in prose_lines(text):
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)
        if heading:
            slug = github_slug(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return found | set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))


def broken_links(path: Path) -> list[str]:
    """Each relative link of a markdown file (inline `[text](target)`, outside code) whose file is missing, or whose
    #anchor is no heading of the markdown file it names: `FILE:LINE: TARGET: why`."""
    broken = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"(`+)(?:(?!\1).)+?\1", "`code`", line)  # a link's look-alike inside code is code
        for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: …: not a file of the repository
                continue
            file, _, anchor = unquote(target).partition("#")
            linked = (path.parent / file).resolve() if file else path
            where = f"{path}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where}: no heading #{anchor} in {linked.name}")
            elif anchor and linked.suffix != ".md":
                broken.append(f"{where}: an #anchor into a file that is not markdown")
    return broken


def test_the_docs_are_found():
    assert len(DOCS) > 20 and all(p.is_file() for p in DOCS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_its_file_and_heading(doc):
    assert not broken_links(doc), "\n".join(broken_links(doc))


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "other.md").write_text("# Other page\n\n## A `code` heading: ×2\n\n## Twice\n\n## Twice\n")
    (tmp_path / "index.md").write_text(
        "# Index\n\n"
        "[ok](pages/other.md) [ok](pages/other.md#a-code-heading-2) [ok](pages/other.md#twice-1) [ok](#index)\n"
        "[no file](pages/gone.md#other-page) [no heading](pages/other.md#a-code-heading)\n"
        "[no heading here](#contents) [twice is not thrice](pages/other.md#twice-2) [web](https://example.com/x.md)\n"
        "```\n[in code](nowhere.md)\n```\n`[in a code span](nowhere.md)`\n"
    )
    found = [line.split(": ", 1)[1] for line in broken_links(tmp_path / "index.md")]
    assert found == [
        "pages/gone.md#other-page: no such file",
        "pages/other.md#a-code-heading: no heading #a-code-heading in other.md",
        "#contents: no heading #contents in index.md",
        "pages/other.md#twice-2: no heading #twice-2 in other.md",
    ]


@pytest.mark.parametrize("index", ["guide", "results"])
def test_each_page_of_the_docs_has_a_title_and_a_row_in_its_index(index):
    listed = (ROOT / "docs" / f"{index}.md").read_text(encoding="utf-8")
    pages = sorted((ROOT / "docs" / index).glob("*.md"))
    assert pages
    for page in pages:
        assert page.read_text(encoding="utf-8").startswith("# "), f"{page} does not start with a # title"
        assert f"]({index}/{page.name})" in listed, f"docs/{index}.md has no link to {page.name}"
