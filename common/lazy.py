"""A package's names imported when first used (PEP 562), so that importing the package costs nothing:

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"seq2seq": ("Seq2SeqNet",), ...})   # in __init__.py

`import models.checks` or `from inference import DecodingOptions` then loads no torch, Lightning or torchvision: a
script's `--help` and argument errors answer before any of them loads. The standard library only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """The `__getattr__`, `__dir__` and `__all__` of `package`, whose names are `modules`' ({module: names}):
    each name is imported from `package.module` when first asked for, and kept in the package from then on."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = f"{package}.{where[name]}"
        __import__(module)  # an import statement's way, not importlib's: `python -X importtime` lists it
        value = getattr(sys.modules[module], name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, list(where)
