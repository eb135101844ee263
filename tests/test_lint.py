"""The code stays linted and formatted: `ruff check` and `ruff format --check`, configured in
pyproject.toml (what CI runs through this suite; `ruff check --fix . && ruff format .` repairs most)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import HANG_TIMEOUT, ROOT

RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    if not Path(RUFF).exists():
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    result = subprocess.run([RUFF, *command, "."], capture_output=True, text=True, cwd=ROOT, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# The import tree: what each package may import of the project (lazy and type-checking imports included), drawn in
# docs/guide.md. Training and inference are siblings over the data: decoding (translate, evaluate, generate) loads no
# training code, and training's own validation decodes through the task. The tasks and the exporters stand on
# inference and beside training (a task's summary reaches the training layer through its `run_summary` hook,
# training/records.py); nothing imports the scripts.
BELOW = {"common": set(), "models": {"common"}, "datamodules": {"common", "models"}}
BELOW |= {"training": BELOW["datamodules"] | {"datamodules"}, "inference": BELOW["datamodules"] | {"datamodules"}}
BELOW |= {"tasks": BELOW["inference"] | {"inference"}, "deploy": BELOW["inference"] | {"inference"}}
BELOW |= {"scripts": set(BELOW) - {"scripts"}}
LAYERS = list(BELOW)


def _imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports, lazy and type-checking imports included."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_imports_form_the_tree(package):
    """Each package imports only what `BELOW` allows it, in every module of it (subpackages too): no import circle
    between packages, every error, exit status and atomic write in common/ (which imports no package of the
    project), argument checks (models/checks.py) importable from every package."""
    found = [
        f"{path.relative_to(ROOT)} imports {sorted(extra)}"
        for path in sorted((ROOT / package).rglob("*.py"))
        if (extra := _imported_packages(path) & set(BELOW) - BELOW[package] - {package})
    ]
    assert not found, found


def test_the_import_finder_sees_lazy_imports(tmp_path):
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    import training.records as r\n    from training.loggers import log_text\n")
    assert _imported_packages(lazy) == {"training"}


def test_subprocess_time_limits_are_set_in_one_place():
    # A test's time limit on a subprocess guards against a hang and is not a speed check: one generous value,
    # tests/helpers.HANG_TIMEOUT (a 60 s limit once failed a loaded machine's first start of a fresh venv).
    number = re.compile(r"\btimeout(?:\s*:\s*\w+)?\s*=\s*\d")
    found = [
        f"{path.name}:{i}: {line.strip()}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        if path.name != "helpers.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if number.search(line)
    ]
    assert not found, "\n".join(found)


def _imports_within(package: str) -> dict[str, set[str]]:
    """Each module of `package` (its `__init__` included) → the modules of the same package it imports, lazy and
    type-checking imports included: `from .x import y` and `from package.x import y` name x; `from . import y`
    and `from package import y` name y where it is a module, else the package's `__init__`."""
    import ast

    modules = {path.stem for path in (ROOT / package).glob("*.py")}
    target = lambda name: name if name in modules else "__init__"  # noqa: E731
    graph = {}
    for path in sorted((ROOT / package).glob("*.py")):
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (
                node.level == 1 or (node.level == 0 and node.module or "").split(".")[0] == package
            ):
                parts = (node.module or "").split(".")[node.level == 0 :]
                edges |= {target(parts[0])} if parts and parts[0] else {target(a.name) for a in node.names}
            elif isinstance(node, ast.Import):
                edges |= {target(a.name.split(".")[1]) for a in node.names if a.name.startswith(f"{package}.")}
        graph[path.stem] = edges - {path.stem}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph` (a path that comes back to its start), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            if found := visit(nxt, [*path, node]):
                return found
        done.add(node)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c), None)


@pytest.mark.parametrize("package", LAYERS)
def test_no_import_circle_inside_a_package(package):
    """Inside a folder too, imports form a tree: no module imports one that imports it back, however far round
    (a lazy or type-checking import counts: it is a circle that only its placement keeps from failing)."""
    circle = _circle(_imports_within(package))
    assert circle is None, f"{package}/: " + " -> ".join(circle)


def test_the_circle_finder_finds_circles():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def _test_modules_imported(source: str) -> list[str]:
    """The test modules (test_*) that `source` imports, lazy imports included: `from tests.test_x import y`,
    `from .test_x import y`, `from tests import test_x`, `from . import test_x`, `import tests.test_x`, `import test_x`."""
    import ast

    def is_test(module: str) -> bool:  # tests.test_x, test_x (tests/ on the path, or relative to it)
        parts = module.split(".")
        return parts[-1].startswith("test_") and (len(parts) == 1 or parts[:-1] == ["tests"])

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module in ("", "tests") and (node.level or module):  # from . import test_x, from tests import test_x
                found += [name for name in (a.name for a in node.names) if is_test(name)]
            elif is_test(module):
                found.append(module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if is_test(a.name)]
    return found


def test_no_test_module_imports_another():
    """What tests share is defined once, in tests/helpers.py (fixtures in tests/conftest.py): a test module that
    imports another runs that one's module-level code and ties the two together."""
    found = {
        path.name: imported
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if (imported := _test_modules_imported(path.read_text()))
    }
    assert not found, found


def test_the_test_import_finder_finds_test_imports():
    forms = [
        "from tests.test_core import small_net",
        "from .test_core import small_net",
        "from tests import test_core",
        "from . import test_core",
        "import tests.test_core",
        "import test_core",
        "def f():\n    from tests.test_core import small_net",
    ]
    for source in forms:
        assert _test_modules_imported(source), source
    assert not _test_modules_imported("from tests.helpers import tiny_net\nimport tests.helpers\nfrom models import test_x")
