"""The dataclass method code compiled once (:mod:`onnxmem.core.classcode`).

A class made inside :func:`compiled_once` must be the class ``dataclasses`` makes without it
(its methods behave alike, its ``__init__`` has the same annotations: no future flag of the
store's module leaks into the code), must run code taken from the store (the store is used,
not only read), and must come out the same where the store is missing, damaged, or another
interpreter's. Outside the block ``dataclasses`` is as it was.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from onnxmem.core import classcode
from onnxmem.core.classcode import build, compiled_once, load

from .helpers import HANG_S

#: a module of dataclasses of every kind the package uses: frozen, slotted, hashed, with
#: defaults, factories, fields left out of comparison, and a ``__post_init__`` check
SOURCE = textwrap.dedent('''
    from dataclasses import dataclass, field

    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = ()

    @dataclass(slots=True, unsafe_hash=True)
    class Block:
        name: str
        size: int
        seen: list[int] = field(default_factory=list, compare=False)

        def __post_init__(self) -> None:
            if self.size < 0:
                raise ValueError(f"{self.name}: negative size")

    @dataclass
    class Plain:
        a: float
        b: "list[int]"
''')


@pytest.fixture()
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A package of its own name (its modules are imported fresh) holding :data:`SOURCE`."""
    name = f"classcode_pkg_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}"
    root = tmp_path / "src" / name
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "shapes.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[mod]


@pytest.fixture(autouse=True)
def fresh_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test reads the store it names (the process keeps the first one read)."""
    monkeypatch.setattr(classcode, "_kept", None)


def _fresh(name: str) -> types.ModuleType:
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _nested_codes(const)
    return out


def _exercise(mod: types.ModuleType) -> list[object]:
    """What each class of :data:`SOURCE` does: equality, hash, repr, frozen and post-init
    checks, ``replace`` and ``fields``."""
    p = mod.Point(1, 2)
    b = mod.Block("w", 8)
    out: list[object] = [p == mod.Point(1, 2), p == mod.Point(1, 3), hash(p) == hash(mod.Point(1, 2)), repr(p),
                         dataclasses.replace(p, y=5), [f.name for f in dataclasses.fields(mod.Block)],
                         b == mod.Block("w", 8, [1]), hash(b) == hash(mod.Block("w", 8)), repr(mod.Plain(1.0, [2])),
                         mod.Point.__init__.__annotations__, mod.Block.__init__.__annotations__,
                         mod.Plain.__init__.__annotations__, hasattr(p, "__dict__")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(ValueError, match="negative size"):
        mod.Block("w", -1)
    return [str(o) for o in out]


def test_store_is_used_and_classes_are_the_same(package: str, tmp_path: Path) -> None:
    store = tmp_path / "store.bin"
    # Point (frozen): __init__, __repr__, __eq__, __setattr__, __delattr__, __hash__; Block
    # (unsafe_hash): __init__, __repr__, __eq__, __hash__; Plain: __init__, __repr__, __eq__
    assert build(store, package) == 6 + 4 + 3
    codes = load(store)
    assert len(codes) == 13
    plain = _exercise(_fresh(f"{package}.shapes"))
    with compiled_once(store):
        cached = _fresh(f"{package}.shapes")
    assert _exercise(cached) == plain
    assert classcode._kept is not None and classcode._kept.keys() == codes.keys()  # the store the block read
    stored = {id(c) for code in classcode._kept.values() for c in _nested_codes(code)}
    for cls in (cached.Point, cached.Block, cached.Plain):  # the methods run the stored code objects
        assert id(cls.__init__.__code__) in stored
        assert id(cls.__eq__.__code__) in stored
    assert "exec" not in vars(dataclasses)


@pytest.mark.parametrize("damage", ["missing", "magic", "garbage", "truncated"])
def test_unusable_store_compiles_as_before(package: str, tmp_path: Path, damage: str) -> None:
    store = tmp_path / "store.bin"
    build(store, package)
    data = store.read_bytes()
    if damage == "missing":
        store.unlink()
    elif damage == "magic":
        store.write_bytes(b"\0\0\r\n" + data[4:])
    elif damage == "garbage":
        store.write_bytes(importlib.util.MAGIC_NUMBER + b"\xff" * 64)
    else:
        store.write_bytes(data[: len(data) // 2])
    assert load(store) == {}
    plain = _exercise(_fresh(f"{package}.shapes"))
    with compiled_once(store):
        cached = _fresh(f"{package}.shapes")
    assert _exercise(cached) == plain


def test_texts_not_in_the_store_are_compiled(package: str, tmp_path: Path) -> None:
    """A class changed since the store was built (a field added) gets its own code."""
    store = tmp_path / "store.bin"
    build(store, package)
    shapes = tmp_path / "src" / package / "shapes.py"
    shapes.write_text(SOURCE.replace("    y: int = 0\n", "    y: int = 0\n    z: int = 7\n"))
    importlib.invalidate_caches()
    with compiled_once(store):
        changed = _fresh(f"{package}.shapes")
    assert changed.Point(1) == changed.Point(1, 0, 7)
    assert repr(changed.Point(1)) == "Point(x=1, y=0, z=7, tags=())"
    assert classcode._kept is not None and len(classcode._kept) == 13
    stored = {id(c) for code in classcode._kept.values() for c in _nested_codes(code)}
    assert id(changed.Block.__init__.__code__) in stored  # unchanged: from the store
    assert id(changed.Point.__init__.__code__) not in stored


def test_blocks_nest_and_restore(tmp_path: Path) -> None:
    store = tmp_path / "none.bin"
    with compiled_once(store):
        with compiled_once(store):
            assert "exec" in vars(dataclasses)
        assert "exec" in vars(dataclasses)
    assert "exec" not in vars(dataclasses)


def test_command_line_leaves_dataclasses_as_it_was() -> None:
    from onnxmem.cli.main import main

    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    assert "exec" not in vars(dataclasses)


def test_build_from_a_fresh_process(tmp_path: Path) -> None:
    """``python -m onnxmem.core.classcode`` stores the package's classes, and a ``plan`` of a
    fresh process made with the store runs none of the texts it covers through the compiler."""
    store = tmp_path / "store.bin"
    probe = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from onnxmem.core import classcode
        count = classcode.build(Path({str(store)!r}))
        print(count)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_S, check=True)
    count = int(out.stdout.split()[-1])
    assert count > 300  # the package's dataclasses, each of several methods
    check = textwrap.dedent(f"""
        import dataclasses, sys
        from pathlib import Path
        from onnxmem.core import classcode
        compiled = []
        with classcode.compiled_once(Path({str(store)!r})):
            inner = dataclasses.exec
            def spy(source, g=None, l=None):
                if isinstance(source, str) and classcode._digest(source) not in classcode._stored(Path({str(store)!r})):
                    compiled.append(source)
                inner(source, g, l)
            dataclasses.exec = spy
            import onnxmem.planning.pipeline, onnxmem.cli.plan
            dataclasses.exec = inner
        print(len(compiled))
    """)
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=HANG_S, check=True)
    assert out.stdout.split()[-1] == "0"


def test_switch_off_leaves_dataclasses_alone(package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store.bin"
    build(store, package)
    monkeypatch.setenv(classcode.SWITCH, "off")
    with compiled_once(store):
        assert "exec" not in vars(dataclasses)
        made = _fresh(f"{package}.shapes")
    assert classcode._kept is None  # the store was not read
    assert _exercise(made) == _exercise(_fresh(f"{package}.shapes"))
