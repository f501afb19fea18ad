"""Lazy package interfaces: a layer's ``__init__`` names its public objects without importing them.

A package lists where each public name lives and binds the function this module makes as its
``__getattr__`` (PEP 562); a name's module is imported on its first use, and the value is then
kept in the package, so start-up (``onnxmem --help``) imports none of the heavy modules.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__ = lazy_attributes(pkg.__dict__, {"sqrt": "math"})
>>> pkg.sqrt(9.0)
3.0
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(namespace: MutableMapping[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that loads ``exports[name]`` (a module name, absolute or, with a
    leading dot, relative to the package) on first use and keeps the value in ``namespace``."""
    package = namespace.get("__name__", "?")

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package if module.startswith(".") else None), name)
        namespace[name] = value
        return value

    return __getattr__
