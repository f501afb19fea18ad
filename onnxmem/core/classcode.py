"""The methods ``dataclasses`` writes for onnxmem's classes, compiled once at install.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` (and,
frozen, ``__setattr__`` and ``__delattr__``) as source text and compiles each text with
``exec``, every time the class's module is imported: about 1.2 ms a class, three quarters of
it compiling. A ``plan`` of a small model imports 59 of them, about 75 ms of its 0.45 CPU
seconds, more than the plan itself.

:func:`build` (``python -m onnxmem.core.classcode``, run by ``make install``) imports every
module of the package, compiles each text ``dataclasses`` writes for them, and stores the code
objects, keyed by a digest of their text, in ``onnxmem/core/_classcode.<tag>.bin`` beside the
package's modules (``<tag>``: the interpreter's, as ``__pycache__`` names its files; the file
begins with the interpreter's bytecode magic number). :func:`compiled_once` then runs a block
(the command line runs each command in it) with ``dataclasses`` taking each code object from
that store where its text's digest is there, and compiling the text as before where it is not.
The code taken is what compiling the same text gives (``compile`` of that text, with no future
flag inherited, as ``exec`` of it in ``dataclasses`` has none), so the classes are the same;
only the compiling is saved. A missing, unreadable, or other interpreter's store is an empty
one: nothing is compiled differently, only more slowly; ``ONNXMEM_CLASSCODE=off`` in the
environment leaves the store unread. Nothing is written at run time. The store is code: it is
read from the package's own folder only, which holds the package's modules, and no command
takes a path to one from its user or a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["STORE", "SWITCH", "build", "compiled_once", "load"]

#: the store of this interpreter: the code objects of the texts, by the digests of the texts
STORE = Path(__file__).with_name(f"_classcode.{sys.implementation.cache_tag}.bin")

#: ``ONNXMEM_CLASSCODE=off``: every text compiled as without a store (``bench/bench_classcode.py``)
SWITCH = "ONNXMEM_CLASSCODE"

_lock = threading.Lock()
_depth = 0
_kept: dict[bytes, Any] | None = None  # the store, read once per process
_kept_from: Path | None = None  # the path it was read from
_installed: Any = None  # the exec that dataclasses takes while a block runs


def _digest(text: str) -> bytes:
    import hashlib  # here: a command that makes no dataclass (``--help``) does not load it

    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _compile(text: str) -> Any:
    """What ``exec(text)`` in ``dataclasses`` compiles: no future flag of this module inherited."""
    return compile(text, "<string>", "exec", dont_inherit=True)


def _exec_with(code_of: Callable[[str], Any]) -> Callable[..., None]:
    """The ``exec`` that ``dataclasses`` takes while a block runs: a method text becomes the code
    object ``code_of`` gives for it (the texts are ``dataclasses``' own, built from the fields of
    onnxmem's classes: no model or plan reaches them)."""

    def patched(source: Any, globals: Any = None, locals: Any = None) -> None:
        exec(code_of(source) if isinstance(source, str) else source, globals, locals)  # noqa: S102

    return patched


def load(path: Path = STORE) -> dict[bytes, Any]:
    """The code objects stored at ``path`` by their texts' digests; empty where the file is
    missing, unreadable, or written by an interpreter of another bytecode."""
    import importlib.util
    import marshal

    try:
        data = path.read_bytes()
    except OSError:
        return {}
    magic = importlib.util.MAGIC_NUMBER
    if not data.startswith(magic):
        return {}
    try:
        codes = marshal.loads(data[len(magic):])
    except (EOFError, ValueError, TypeError):
        return {}
    return codes if isinstance(codes, dict) else {}


def _stored(path: Path) -> dict[bytes, Any]:
    """The store at ``path``, read on the first dataclass made in a block (a command that makes
    none does not read it), and kept for the process."""
    global _kept, _kept_from
    if _kept is None or _kept_from != path:
        _kept, _kept_from = load(path), path
    return _kept


@contextlib.contextmanager
def compiled_once(path: Path = STORE) -> Iterator[None]:
    """Run the block with ``dataclasses`` taking the code of each method text from the store at
    ``path`` where it is there (module doc); as before once the outermost block ends."""
    global _depth, _installed
    with _lock:
        if _depth == 0 and "exec" not in vars(dataclasses) and os.environ.get(SWITCH) != "off":
            # compiled here, a text would take this module's future flags: _compile inherits none
            _installed = _exec_with(lambda text: _stored(path).get(_digest(text)) or _compile(text))
            dataclasses.exec = _installed  # type: ignore[attr-defined]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _installed is not None:
                if vars(dataclasses).get("exec") is _installed:
                    del dataclasses.exec  # type: ignore[attr-defined]
                _installed = None


def build(path: Path = STORE, package: str = "onnxmem") -> int:
    """Import every module of ``package`` (those whose optional dependencies are missing are
    left out), compile each text ``dataclasses`` writes while they load, and write the code
    objects to ``path`` (replaced whole: a reader sees the old file or the new one). The
    number of texts stored. Run it in a process that has not imported the package's modules
    (``python -m onnxmem.core.classcode``): a module imported before records nothing."""
    import importlib
    import importlib.util
    import marshal
    import pkgutil

    codes: dict[bytes, Any] = {}

    def record(text: str) -> Any:
        code = codes[_digest(text)] = _compile(text)
        return code

    dataclasses.exec = _exec_with(record)  # type: ignore[attr-defined]
    try:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if info.name.split(".")[-1] == "__main__":
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:  # an optional dependency (ray, torch) not installed
                continue
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
    # imported after the walk, so that fileio's own classes are recorded too
    from onnxmem.core.fileio import write_bytes_atomic

    write_bytes_atomic(path, importlib.util.MAGIC_NUMBER + marshal.dumps(codes), "dataclass code store")
    return len(codes)


if __name__ == "__main__":  # pragma: no cover - make install
    count = build()
    print(f"{STORE.name}: the code of {count} dataclass method texts")
