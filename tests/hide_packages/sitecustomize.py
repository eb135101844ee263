"""Hides the top-level packages named in $HIDE_PACKAGES (comma-separated import names) from this interpreter and
its children, as if they were not installed: `import x` and `importlib.util.find_spec("x")` raise
ModuleNotFoundError, and `importlib.metadata` finds no distribution of that name (what Lightning and torchmetrics
ask first). Python imports this module at start-up when its folder is on PYTHONPATH (tests/test_gpu_suite.py)."""

import os
import sys

HIDDEN = {name.strip() for name in os.environ.get("HIDE_PACKAGES", "").split(",") if name.strip()}


class _Hidden:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _hide_distributions():
    import importlib.metadata
    import re

    discover = importlib.metadata.Distribution.discover.__func__

    def visible(cls, *args, **kwargs):
        for dist in discover(cls, *args, **kwargs):
            if re.sub(r"[-_.]+", "_", dist.metadata["Name"] or "").lower() not in HIDDEN:
                yield dist

    importlib.metadata.Distribution.discover = classmethod(visible)


if HIDDEN:
    sys.meta_path.insert(0, _Hidden())
    _hide_distributions()
