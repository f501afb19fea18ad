"""The command line's choices, defaults and listings come from the library's registries."""

from __future__ import annotations

import subprocess
import sys

import click
import onnx
import pytest
from click.testing import CliRunner

from onnxmem.analysis.happens_before import CONCURRENCY_MODES
from onnxmem.analysis.liveness import IO_MODES
from onnxmem.cli import registries
from onnxmem.cli.main import COMMANDS, main
from onnxmem.cli.options import RegistryChoice
from onnxmem.cli.output import fmt_bytes
from onnxmem.cli.registries import LISTINGS
from onnxmem.core.solvers import SOLVERS
from onnxmem.export import FORMATS
from onnxmem.model.generate import GENERATORS, RANDWIRE_KINDS
from onnxmem.planning.pipeline import PlanOptions
from onnxmem.remat import ALGORITHMS
from onnxmem.remat.training import TRAINING
from onnxmem.runtime.peak import EXECUTION_MODES
from onnxmem.scheduling import ORDERS
from onnxmem.verify.run import DEVICES

from .conftest import ROOT


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def option(command: str, name: str):
    cmd = main.get_command(click.Context(main), command)
    assert cmd is not None
    return next(p for p in cmd.params if p.name == name)


REGISTRIES = {
    "solvers": {n: s.summary for n, s in SOLVERS.items()},
    "orders": {n: o.summary for n, o in ORDERS.items()},
    "formats": {n: f.summary for n, f in FORMATS.items()},
    "generators": {**{n: g.summary for n, g in GENERATORS.items()}, **{n: t[1] for n, t in TRAINING.items()}},
    "remat": {n: a.summary for n, a in ALGORITHMS.items()},
}

#: (command, parameter, the registry's names)
CHOICES = [
    *[(c, "solver", list(SOLVERS)) for c in ("plan", "verify", "compare", "zoo", "pack")],
    *[(c, "order", list(ORDERS)) for c in ("plan", "verify", "compare", "zoo")],
    *[(c, "io", list(IO_MODES)) for c in ("plan", "verify", "compare", "zoo")],
    ("verify", "device", list(DEVICES)),
    ("compare", "device", list(DEVICES)),
    ("zoo", "verify", list(DEVICES)),
    ("export", "fmt", list(FORMATS)),
    ("generate", "kind", list(GENERATORS) + list(TRAINING)),
    ("plan", "remat_algorithm", list(ALGORITHMS)),
    ("generate", "graph_kind", list(RANDWIRE_KINDS)),
    *[(c, "concurrency", list(CONCURRENCY_MODES)) for c in ("plan", "verify", "compare", "zoo")],
    ("compare", "execution_mode", list(EXECUTION_MODES)),
]


@pytest.mark.parametrize("command,param,names", CHOICES, ids=lambda x: x if isinstance(x, str) else "")
def test_choices_are_the_registry(command, param, names):
    p = option(command, param)
    assert isinstance(p.type, RegistryChoice)
    assert list(p.type.choices) == names


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_listing_names_every_entry_with_its_summary(kind):
    r = run("list", kind)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0] == f"{kind}:"
    assert len(lines) == 1 + len(REGISTRIES[kind])
    for line, (name, summary) in zip(lines[1:], REGISTRIES[kind].items()):
        assert line.split()[0] == name and summary in line
    assert list(LISTINGS[kind]()) == list(REGISTRIES[kind])


def test_list_without_a_kind_lists_them_all():
    out = run("list").output
    for kind, entries in REGISTRIES.items():
        assert f"{kind}:" in out
        assert all(summary in out for summary in entries.values())


@pytest.mark.parametrize("command,flag,kind", [
    ("plan", "--solver", "solvers"), ("plan", "--order", "orders"), ("pack", "--solver", "solvers"),
    ("export", "--format", "formats"), ("plan", "--remat", "remat"),
])
def test_help_points_to_the_listing(command, flag, kind):
    out = run(command, "--help").output
    assert f"'onnxmem list {kind}'" in " ".join(out.split())


@pytest.mark.parametrize("args,kind,bad", [
    (["plan", "m.onnx", "--solver", "greedyy"], "solvers", "greedyy"),
    (["plan", "m.onnx", "--order", "serenity"], "orders", "serenity"),
    (["pack", "p.csv", "--solver", "minimalloc"], "solvers", "minimalloc"),
    (["export", "p.json", "--format", "h", "-o", "x"], "formats", "h"),
    (["generate", "resnet", "x.onnx"], "generators", "resnet"),
])
def test_unknown_name_is_a_usage_error_naming_the_listing(args, kind, bad):
    r = run(*args)
    assert r.exit_code == 2
    assert f"'{bad}' is not one of the {len(REGISTRIES[kind])} {kind}" in r.output
    assert f"'onnxmem list {kind}'" in r.output


@pytest.mark.parametrize("args", [
    ["export", "p.json", "--format", "car\rriage", "-o", "x"],
    ["plan", "m.onnx", "--solver", "\x1b]0;title\x07"],
    ["verify", "m.onnx", "--device", "\x1b[31mtpu"],
])
def test_an_unknown_name_is_shown_escaped(args):
    """The name a user gave was echoed as it was: a carriage return or a terminal's escape reached
    the terminal (fuzz family flags, seed 0, flags:231 and flags:273)."""
    r = run(*args)
    assert r.exit_code == 2 and not any(c in r.output for c in "\r\x1b\x07"), repr(r.output)
    assert repr(args[args.index(next(a for a in args if a.startswith("--"))) + 1])[1:-1] in r.output


def test_a_close_name_is_suggested():
    r = run("plan", "m.onnx", "--solver", "greedyy")
    assert "did you mean 'greedy'?" in r.output


def test_unknown_device_and_io_name_the_choices():
    r = run("verify", "m.onnx", "--device", "tpu")
    assert r.exit_code == 2 and all(d in r.output for d in DEVICES)
    r = run("plan", "m.onnx", "--io", "extern")
    assert r.exit_code == 2 and "did you mean 'external'?" in r.output


def test_defaults_are_the_planners():
    defaults = PlanOptions()
    assert option("plan", "solver").default == defaults.solver
    assert option("plan", "order").default == defaults.order
    assert option("plan", "io").default == defaults.io
    assert option("plan", "alignment").default == defaults.alignment


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_generate_dispatches_through_the_registry(kind, tmp_path):
    out = tmp_path / f"{kind}.onnx"
    r = run("generate", kind, str(out), "--size", "2", "--seed", "3")
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == GENERATORS[kind].build(2, 3, "ws").SerializeToString()
    onnx.checker.check_model(onnx.load(out))


def test_randwire_graph_kind_reaches_the_generator(tmp_path):
    sizes = set()
    for g in RANDWIRE_KINDS:
        out = tmp_path / f"{g}.onnx"
        assert run("generate", "randwire", str(out), "--size", "12", "--graph", g).exit_code == 0
        assert out.read_bytes() == GENERATORS["randwire"].build(12, 0, g).SerializeToString()
        sizes.add(out.read_bytes())
    assert len(sizes) == len(RANDWIRE_KINDS)


def test_fmt_bytes_is_format_bytes_and_the_exact_count():
    assert fmt_bytes(0) == "0 B"
    assert fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1536) == "1.50 KiB (1,536 B)"
    assert fmt_bytes(3 * 2**30) == "3.00 GiB (3,221,225,472 B)"


def heavy_modules_loaded(args: list[str], heavy: tuple[str, ...]) -> tuple[str, list[str]]:
    """Run ``onnxmem ARGS`` in a fresh interpreter: (its output, which of ``heavy`` it imported)."""
    code = (
        "import sys\nfrom onnxmem.cli.main import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"print('heavy', *sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    *out, last = r.stdout.splitlines()
    return "\n".join(out), last.split()[1:]


HEAVY = ("onnx", "numpy", "onnxruntime", "numba", "matplotlib", "rich")


@pytest.mark.parametrize("args", [["--help"], ["list", "formats"], *[[name, "--help"] for name in COMMANDS]],
                         ids=" ".join)
def test_help_imports_neither_onnx_nor_numpy(args):
    out, loaded = heavy_modules_loaded(args, HEAVY)
    assert out and loaded == []


def test_a_command_loads_only_its_own_module():
    modules = tuple(where.partition(":")[0] for where in COMMANDS.values())
    out, loaded = heavy_modules_loaded(["plan", "--help"], modules)
    assert "Usage: " in out and loaded == ["onnxmem.cli.plan"]
    out, loaded = heavy_modules_loaded(["--help"], modules)
    assert all(name in out for name in COMMANDS) and loaded == sorted(modules)


@pytest.mark.parametrize("name,library", [
    ("IO_MODES", IO_MODES), ("CONCURRENCY_MODES", CONCURRENCY_MODES), ("EXECUTION_MODES", EXECUTION_MODES),
    ("DEVICES", DEVICES), ("RANDWIRE_KINDS", RANDWIRE_KINDS),
])
def test_the_names_the_help_spells_out_are_the_librarys(name, library):
    assert tuple(getattr(registries, name)) == tuple(library)


def test_a_user_error_is_one_line_and_its_exit_code(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "onnxmem", "show", str(bad)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


#: what a plain ``plan MODEL -o PLAN`` does not use, imported only by the flags and commands that do
NOT_FOR_A_PLAIN_PLAN = (
    "onnxmem.remat", "onnxmem.report", "onnxmem.export", "onnxmem.verify", "onnxmem.zoo",
    "onnxmem.proof.range", "onnxmem.proof.program", "onnxmem.proof.alone", "onnxmem.plans.range",
    "onnxmem.plans.program", "onnxmem.planning.ranges", "onnxmem.planning.program", "onnxmem.planning.fit",
    "onnxmem.runtime.optimize", "onnxmem.runtime.checkpoint", "onnxmem.runtime.ort",
    "onnxruntime", "numba", "matplotlib", "rich", "onnx.reference",
    "onnxmem.core.dimexpr", "fractions",  # only for a dim given as an expression
)


def test_a_plain_plan_imports_only_what_it_uses(tmp_path):
    out, loaded = heavy_modules_loaded(["plan", str(ROOT / "models" / "inception_block.onnx"),
                                        "-o", str(tmp_path / "p.json")], NOT_FOR_A_PLAIN_PLAN)
    assert f"plan         {tmp_path / 'p.json'}" in out and "arena " in out
    assert loaded == []
    # the flags that need them still load them
    out, loaded = heavy_modules_loaded(["plan", str(ROOT / "models" / "inception_block.onnx"),
                                        "--annotate", str(tmp_path / "a.onnx")], ("onnxmem.export",))
    assert "annotated" in out and loaded == ["onnxmem.export"]


def test_every_registry_default_is_a_registry_name():
    """A default is taken without reading its registry (``plan`` without ``--remat`` loads no
    recomputation module): each must be one of the names."""
    checked = 0
    for name in COMMANDS:
        cmd = main.get_command(click.Context(main), name)
        assert cmd is not None
        for p in cmd.params:
            if isinstance(p.type, RegistryChoice) and isinstance(p.default, str):
                assert p.default in p.type.choices, (name, p.name, p.default)
                checked += 1
    assert checked >= 10


def test_a_command_runs_with_the_collectors_thresholds_and_restores_them(monkeypatch):
    import gc

    from onnxmem.cli.main import GC_THRESHOLDS, LazyGroup

    seen: list[tuple[int, ...]] = []
    invoke = LazyGroup.invoke

    def watched(self, ctx):
        seen.append(gc.get_threshold())
        return invoke(self, ctx)

    monkeypatch.setattr(LazyGroup, "invoke", watched)
    before = gc.get_threshold()
    assert before != GC_THRESHOLDS
    r = CliRunner().invoke(main, ["list", "solvers"], catch_exceptions=False)
    assert r.exit_code == 0 and "solvers:" in r.output
    assert seen == [GC_THRESHOLDS] and gc.get_threshold() == before
    r = CliRunner().invoke(main, ["show", "missing.json"])  # a user error exits the same way
    assert r.exit_code == 1 and gc.get_threshold() == before


_COLLECTIONS_PROBE = """
import gc, sys
from onnxmem.cli.main import main

def module_bodies(phase, info):  # which libraries' modules are being imported when a collection starts
    if phase == "start":
        f = sys._getframe(1)
        while f is not None:
            name = f.f_globals.get("__name__", "")
            if f.f_code.co_name == "<module>" and name.partition(".")[0] in ("numpy", "onnx", "google", "onnxmem"):
                during.append(name)
            f = f.f_back

during = []
gc.callbacks.append(module_bodies)
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
gc.callbacks.remove(module_bodies)
print("imports-collected", len(during), *sorted(set(during))[:5])
"""


def test_a_plan_loads_its_modules_without_a_collection(tmp_path):
    # what the modules of numpy, onnx, protobuf and onnxmem make lives to the end: a collection
    # while they load walks some 50,000 objects for nothing (0.02 CPU s of a small model's plan)
    r = subprocess.run([sys.executable, "-c", _COLLECTIONS_PROBE, "plan", str(ROOT / "models" / "inception_block.onnx"),
                        "-o", str(tmp_path / "p.json")], capture_output=True, text=True, cwd=ROOT, check=True)
    assert (tmp_path / "p.json").is_file()
    assert r.stdout.splitlines()[-1] == "imports-collected 0"


def test_a_command_runs_with_its_modules_frozen_and_restores_the_collector(monkeypatch, tmp_path):
    import gc

    from onnxmem.core.solvers import pack as pack_module

    csv = tmp_path / "p.csv"
    csv.write_text("id,lower,upper,size\nb0,0,2,4\nb1,1,3,4\n")
    seen: list[tuple[bool, bool]] = []
    solve = pack_module.pack

    def watched(*args, **kwargs):
        seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
        return solve(*args, **kwargs)

    monkeypatch.setattr(pack_module, "pack", watched)
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    r = CliRunner().invoke(main, ["pack", str(csv)], catch_exceptions=False)
    assert r.exit_code == 0 and "height       8" in r.output
    # while the command ran, its modules were out of the collector's sight; after it, all as before
    assert seen == [(True, True)]
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_the_entry_point_ends_with_the_objects_frozen(tmp_path):
    import configparser

    csv = tmp_path / "p.csv"
    csv.write_text("id,lower,upper,size\nb0,0,2,4\n")
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen at exit', gc.get_freeze_count() > 0))\n"
            "from onnxmem.cli.main import run\n"
            f"sys.argv = ['onnxmem', 'pack', {str(csv)!r}]\n"
            "run()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "height       4" in r.stdout
    assert r.stdout.splitlines()[-1] == "frozen at exit True"
    # the installed command and ``python -m onnxmem`` both go through it
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "onnxmem = onnxmem.cli.main:run" in cfg["options.entry_points"]["console_scripts"]
    assert "run()" in (ROOT / "onnxmem" / "__main__.py").read_text()


def test_pack_does_not_import_onnx(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("id,lower,upper,size\nb0,0,2,4\nb1,1,3,4\nb2,2,4,4\n")
    out, loaded = heavy_modules_loaded(["pack", str(csv), "--solver", "greedy"],
                                       ("onnx", "onnxruntime", "matplotlib", "rich", "onnxmem.runtime",
                                        "difflib", "click.shell_completion"))
    assert "height       8" in out and loaded == []


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_entry_has_a_one_line_summary(kind):
    for name, summary in LISTINGS[kind]().items():
        assert name == name.lower() and " " not in name
        assert summary.strip() and "\n" not in summary and len(summary) <= 120, (name, summary)


_THREADS_PROBE = """
import os, sys
from onnxmem.cli.main import main
main(["list", "solvers"], standalone_mode=False)
import numpy
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
@pytest.mark.parametrize("given,threads", [(None, 1), ("2", 2)])
def test_a_command_loads_numpy_without_blas_threads_unless_the_user_asks(given, threads):
    # numpy's OpenBLAS starts a thread per core that spins at start (0.1 CPU s a process) and
    # nothing onnxmem runs uses it; a user's own setting is kept
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    r = subprocess.run([sys.executable, "-c", _THREADS_PROBE], env={**env, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=60, check=True)
    setting, tasks = r.stdout.split()[-2:]
    assert setting == (given or "1") and int(tasks) == min(threads, os.cpu_count() or 1)
