"""The ``flags`` family: hostile values for the options of every command, found by reading the
command line itself (``click``'s parameters), so an option added later is fuzzed too.

A case runs one command on a valid input (a small model with the flags it needs, or a valid
plan) with one to three of its options, each given a value hostile to its type: integers past
2^63, negative, in hex, written as floats or in another script's digits; floats that are NaN,
infinite, subnormal or past a double; choices that are near misses, empty or hostile names;
strings that are hostile names, code-execution payloads and malformed ``NAME=VALUE``, shapes
and sizes; input paths that are a folder, ``/dev/zero``, a missing file or a file of another
kind. Output paths are files under ``out/`` (any file there may be written; a write anywhere
else is a ``stray-write``). A value that reaches an evaluator is ``pwned``.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from .common import Case
from .corpus import HOSTILE_NAMES, PAYLOADS, Corpus
from .families import _write

#: the commands of this family; the seed picks one
COMMANDS = ("plan", "verify", "compare", "fit", "show", "plot", "export", "instantiate", "pack")
#: options whose value is a file the command writes
OUTPUT_OPTIONS = frozenset({"--output", "--annotate", "--rewrite-out", "--budget-sweep", "--plot", "--cache",
                            "--out", "--write-baseline", "--save-outputs"})
INTS = ("0", "-1", "1", "3", "7", "64", "2147483648", "4294967296", "9223372036854775808",
        "99999999999999999999999", "1e3", "1.5", "", "nan", "0x10", "١٢", "+5", "1_000", " 4")
FLOATS = ("nan", "inf", "-inf", "0", "-0", "1e308", "1e-320", "-1", "1e999", "", "0.001", "3", "0x1p3", "1,5")
#: structured values of the NAME=VALUE, shape and size options, malformed and extreme
STRUCTURED = ("batch=2", "batch=1:8", "seq=8", "=", "a=b=c", "x=" + "1x" * 1000 + "1", "x=2x-1", "x=0x0",
              "img=1x3x8x8", "x=1099511627776x1099511627776", "If_0=maybe", "If_0=then", "batch=9223372036854775808",
              "1GiB", "-1MiB", "1e999GiB", "0", "NaN", "12 MiB", "64MiB", "100x100", "0x0", "99999x99999",
              "batch=" + "9" * 5000, "batch=1:9223372036854775807:1")
INPUT_PATHS = ("model", "/dev/zero", "model/missing", "out")
#: a hostile name without NUL (no command line can carry one)
NAMES = tuple(n for n in HOSTILE_NAMES if "\x00" not in n)


@functools.cache
def _options(command: str) -> tuple[tuple[str, str, tuple[str, ...], bool, bool], ...]:
    """Each option of ``onnxmem COMMAND``: its longest name, its type's kind, its choices, whether
    it is a flag and whether it repeats."""
    import click

    import onnxmem.cli.main as cli

    cmd = cli.main.get_command(click.Context(cli.main), command)
    out = []
    for p in cmd.params if cmd is not None else ():
        if not isinstance(p, click.Option) or "--help" in p.opts:
            continue
        name = max(p.opts, key=len)
        choices = tuple(str(c) for c in getattr(p.type, "choices", ()) or ())
        kind = ("flag" if p.is_flag else "choice" if choices else "path" if isinstance(p.type, click.Path)
                else "int" if isinstance(p.type, (click.types.IntParamType, click.IntRange)) else
                "float" if isinstance(p.type, (click.types.FloatParamType, click.FloatRange)) or "Finite" in
                type(p.type).__name__ else "str")
        out.append((name, kind, choices, p.is_flag, bool(p.multiple)))
    return tuple(out)


def _value(name: str, kind: str, choices: tuple[str, ...], rng: random.Random) -> tuple[str, bool]:
    """A value for option ``name`` of ``kind``, and whether it names ``/dev/zero`` for reading."""
    if kind == "int":
        return rng.choice(INTS), False
    if kind == "float":
        return rng.choice(FLOATS), False
    if kind == "choice":
        pick = rng.choice(choices) if choices and rng.random() < 0.5 else None
        return pick if pick is not None else rng.choice(
            ("", "nonsense", (choices[0].upper() if choices else "X"), rng.choice(NAMES)[:200])), False
    if kind == "path":
        if name in OUTPUT_OPTIONS:
            return f"out/{name.strip('-')}{rng.choice(('.json', '.png', '.onnx', '', '.h'))}", False
        value = rng.choice(INPUT_PATHS)
        return value, value == "/dev/zero"
    r = rng.random()
    if r < 0.5:
        return rng.choice(STRUCTURED), False
    if r < 0.8:
        return rng.choice(NAMES)[:5000], False
    return rng.choice(PAYLOADS), False


def _target(corpus: Corpus, command: str, folder: Path, rng: random.Random) -> tuple[list[str], str]:
    """The command's valid input written under ``folder/model``: its arguments and what it is."""
    if command == "pack":
        (folder / "model" / "p.csv").write_text("id,lower,upper,size\n0,0,2,64\n1,1,3,32\n2,2,4,64\n")
        return ["model/p.csv"], "a 3-buffer instance"
    if command in ("show", "plot", "export", "instantiate"):
        corpus.ensure_plans()
        base = rng.choice([b for b in corpus.small() if b.plan_json])
        _write(folder / "model", base.files)
        (folder / "model" / "plan.json").write_text(base.plan_json or "{}")
        return ["model/plan.json"], f"{base.name}'s plan"
    base = rng.choice(corpus.small())
    _write(folder / "model", base.files)
    args = list(base.args)
    if command == "fit":
        args = ["--json", "--memory", "64MiB", *(["--dim", "batch=1:64"] if base.name == "dynamic" else [])]
    return [f"model/{base.main}", *args], base.name


def flags_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, _command: str) -> Case:
    command = COMMANDS[seed % len(COMMANDS)]
    args, what = _target(corpus, command, folder, rng)
    options = [o for o in _options(command) if o[0] not in ("--progress",)]
    argv = [command, *args]
    named: list[str] = []
    shown = []
    for name, kind, choices, is_flag, _multiple in rng.sample(options, k=min(len(options), rng.randint(1, 3))):
        if is_flag:
            argv.append(name)
            shown.append(name)
            continue
        value, zero = _value(name, kind, choices, rng)
        argv += [name, value]
        shown.append(f"{name} {value[:40]!r}")
        if zero:
            named.append("/dev/zero")
    if command in ("plot", "export", "instantiate") and not any(a in ("--output", "-o") for a in argv):
        argv += ["--output", f"out/{command}.out"]
    return Case("flags", seed, command, argv, [], [], named_reads=named, output_dirs=["out"],
                ok_codes=(2, 3, 4), note=f"{what}: {', '.join(shown)}", fit_json=command == "fit")

