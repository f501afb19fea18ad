"""Speed where the user waits: each target against its measured figure (docs/speed.md).

Every figure is one command run as a user runs it, in a process of its own (``python -m
onnxmem ...``), timed from the interpreter's start to its exit; the CPU seconds and the peak
resident memory are that process's and its children's (``os.wait4``):

1. ``plan -o`` on a 100,000-node Relu chain and transformer (``bench_scale.build``): at most 10 s
   and 400 MB; and reading that plan back (``verify --plan plan.json --static-only``: the model,
   the plan file and the static proof), in the same limits;
2. every zoo model (``models/zoo``, weights filled in by ``onnxmem.zoo.fixtures.materialize``):
   ``plan MODEL -o`` against a process that creates an onnxruntime session for the same
   model and runs it once (``ratio``: plan over onnxruntime; target at most 1);
3. ``pack --help`` and ``pack`` on a three-buffer instance: under 0.2 s;
4. ``plan``'s default solver against ``pack``'s (``--solver exact``, 30 s of work) on the
   buffers of the plan of a random DAG (``bench_scale.build("random", N)``): the same gap;
5. every zoo model: ``verify MODEL`` (plan, static proof, the reference outside the arena: one
   whole-model run, or each node again where that cannot be; the run in one arena, where the
   values of shape arithmetic are written from the reference beside it) against
   the same onnxruntime process as 2 (target: at most 2); beside it, against that process: its
   imports and every node's kernel run twice (in the arena and in the reference; ``verify`` runs
   shape arithmetic's once since it writes those values from the reference), with the kernels ``verify`` uses (``_TWICE``, which times both itself: the
   session it runs them in is not counted, as ``verify``'s reference sessions, made of the
   model with its weights folded, cost another amount); where that is over 2, so is any
   ``verify`` that holds each value to the bits of the same kernels run outside the arena.
6. ``verify-cuda`` (only when named in ``--sections``): ``verify MODEL --device cuda`` against a
   process that runs the model once on onnxruntime's CUDA provider (target: at most 2).

Runs are medians of ``--runs`` after one run that is not counted (it writes the modules'
bytecode, as the first run after an install does; ``PYTHONDONTWRITEBYTECODE`` is dropped);
the commands of one row (a model's and onnxruntime's, the large graphs' three) take turns,
round by round, so that a slow minute of a shared machine falls on each, and each round's
figure is shown beside the median. Wall seconds include waiting for a core on a shared
machine, CPU seconds do not.

    python bench/bench_speed.py                 # every target, and docs/speed.md
    python bench/bench_speed.py --sections zoo,verify   # those tables only (and theirs in docs/speed.md)
    python bench/bench_speed.py --quick --no-doc
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "speed.md"
sys.path.insert(0, str(ROOT / "bench"))

#: the inputs of the model a script below has in ``session``: zeros, symbolic dims bound by ``DIM=N``
#: arguments after the model and the device (1 where not bound)
_FEEDS = r"""
dims = {k: int(v) for k, v in (d.split("=") for d in sys.argv[3:])}
types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
         "tensor(bool)": np.bool_, "tensor(float16)": np.float16}
feeds = {i.name: np.zeros([d if isinstance(d, int) else dims.get(d, 1) for d in i.shape], types[i.type])
         for i in session.get_inputs()}
"""

_ORT_RUN = r"""
import sys
import numpy as np
import onnxruntime as ort
providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if sys.argv[2] == "cuda" else ["CPUExecutionProvider"]
session = ort.InferenceSession(sys.argv[1], providers=providers)
if session.get_providers()[0] != providers[0]:
    sys.exit(f"onnxruntime did not take {providers[0]}")
""" + _FEEDS + "session.run(None, feeds)\n"

#: what ``verify`` did on the CPU before it wrote shape arithmetic from the reference, timed by
#: itself: the interpreter's start, its imports (numpy, onnx, click and onnxruntime) and every
#: node's kernel run twice (in the arena and in the reference beside it), here the whole model run twice in a session of the
#: reference's kind (optimizations and prepacking off, one thread: ``make_session`` as
#: ``onnxmem.runtime.reference`` calls it), the session's making not counted; it appends those
#: CPU seconds to the file it is given in place of the device
_TWICE = r"""
import time
import sys
import click
import numpy as np
import onnx
import onnxruntime
imports = time.process_time()  # the interpreter's start and the imports
from onnxmem.runtime.ort import make_session
session = make_session(sys.argv[1], prepacking=False, shared=True)
""" + _FEEDS + r"""
t1 = time.process_time()
session.run(None, feeds)
session.run(None, feeds)
with open(sys.argv[2], "a") as out:
    out.write(f"{imports + time.process_time() - t1}\n")
"""


#: every command runs as after an install: modules compiled to bytecode once and kept
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall and CPU seconds and peak resident MiB of ``cmd`` (and its children), which must exit 0."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or ENV, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err.strip()[-400:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024}


def met(figures: dict[str, float], seconds: float, mib: float | None = None) -> str:
    """Whether the target holds, on wall and on CPU seconds (a shared machine's wall time
    includes waiting for a core; on an idle one it is about the CPU time of these
    single-threaded commands)."""
    fits = mib is None or figures["rss"] <= mib
    return "; ".join(f"{kind} {'yes' if figures[kind] <= seconds and fits else 'no'}" for kind in ("wall", "cpu"))


Runs = dict[str, list[dict[str, float]]]


def taking_turns(runs: int, cmds: dict[str, list[str]], warm: bool = True) -> tuple[dict[str, dict[str, float]], Runs]:
    """The median figures of each of ``cmds`` over ``runs`` rounds in which the commands take
    turns, so that a slow minute of a shared machine falls on each of them, not on one (a ratio of
    two is taken within one round), after an uncounted first run of each (``warm``: it writes the
    bytecode, as the first run after an install does, in the order of ``cmds``); and every run."""
    if warm:
        for cmd in cmds.values():
            timed(cmd)
    got: Runs = {key: [] for key in cmds}
    for _ in range(runs):
        for key, cmd in cmds.items():
            got[key].append(timed(cmd))
    return {key: {k: statistics.median(g[k] for g in each) for k in each[0]} for key, each in got.items()}, got


def median_of(runs: int, cmd: list[str], warm: bool = True) -> dict[str, float]:
    """The median figures of ``cmd`` over ``runs`` runs (:func:`taking_turns` of one command)."""
    return taking_turns(runs, {"cmd": cmd}, warm)[0]["cmd"]


def onnxmem(*args: str) -> list[str]:
    return [sys.executable, "-m", "onnxmem", *args]


#: builds one large graph into a file, in a process of its own (:func:`large_model`)
_BUILD = ("import sys, onnx; sys.path.insert(0, sys.argv[1]); from bench_scale import build; "
          "m = build(sys.argv[2], int(sys.argv[3])); m.ir_version = 10; onnx.save(m, sys.argv[4]); "
          "print(len(m.graph.node))")


def large_model(family: str, nodes: int, path: Path) -> int:
    """Write the ``family`` graph of ``nodes`` nodes to ``path``; its node count. Built in a
    process of its own: Linux reports a child's peak resident size as at least its parent's
    peak before it started, so a bench process that once held the graph would lend its own
    peak to every command measured after it."""
    out = subprocess.run([sys.executable, "-c", _BUILD, str(Path(__file__).parent), family, str(nodes), str(path)],
                         check=True, capture_output=True, text=True, env=ENV, cwd=ROOT)
    return int(out.stdout.strip())


def large_case(tmp: Path, nodes: int, runs: int = 1) -> list[str]:
    """``plan -o``, ``plan``, and ``verify --plan --static-only`` of the plan written, on the Relu
    chain and the transformer of ``nodes`` nodes: medians of ``runs`` rounds in which the three
    take turns (:func:`taking_turns`), each run's CPU seconds shown beside the median."""
    rows = ["| command | nodes | wall s | CPU s | peak RSS MiB | target | met | CPU s of each run |",
            "|---|---:|---:|---:|---:|---|---|---|"]
    for family in ("chain", "transformer"):
        path = tmp / f"{family}.onnx"
        count = large_model(family, nodes, path)
        plan_file = str(tmp / f"{family}.json")
        cmds = {"with_o": onnxmem("plan", str(path), "-o", plan_file), "without": onnxmem("plan", str(path)),
                "back": onnxmem("verify", str(path), "--plan", plan_file, "--static-only")}
        fig, got = taking_turns(runs, cmds)  # ``back`` reads the plan the first ``plan -o`` wrote
        each = {key: ", ".join(f"{g['cpu']:.2f}" for g in runs_of) for key, runs_of in got.items()}
        with_o, without, back = fig["with_o"], fig["without"], fig["back"]
        rows += [
            f"| `plan {family}.onnx -o plan.json` | {count:,} | {with_o['wall']:.2f} | {with_o['cpu']:.2f} | "
            f"{with_o['rss']:.0f} | 10 s, 400 MB | {met(with_o, 10, 400 * 1e6 / 2**20)} | {each['with_o']} |",
            f"| `plan {family}.onnx` | {count:,} | {without['wall']:.2f} | {without['cpu']:.2f} | "
            f"{without['rss']:.0f} | | | {each['without']} |",
            f"| `verify {family}.onnx --plan plan.json --static-only` | {count:,} | {back['wall']:.2f} | "
            f"{back['cpu']:.2f} | {back['rss']:.0f} | 10 s, 400 MB | {met(back, 10, 400 * 1e6 / 2**20)} | "
            f"{each['back']} |",
        ]
    return rows


def zoo_case(tmp: Path, runs: int, only: str | None, command: str = "plan", target: float = 1.0,
             device: str = "cpu", warm: str = "each") -> list[str]:
    """``plan MODEL -o`` (``command="verify"``: ``verify MODEL``) on every zoo model against a
    process that creates an onnxruntime session for it and runs it once; ``target``: the
    ratio each should stay under. ``device="cuda"``: ``verify --device cuda --alignment 256``
    against a session on onnxruntime's CUDA provider. ``warm``: an uncounted first run of
    each command (``each``) or of the first model's only (``first``: the bytecode is
    written once for all)."""
    from onnxmem.zoo import load_zoo
    from onnxmem.zoo.fixtures import materialize

    label = "plan -o" if command == "plan" else command
    twice = command == "verify" and device == "cpu"  # with every node's kernel run twice (_TWICE)
    lines = [f"| model | {label} wall s | {label} CPU s | onnxruntime wall s | onnxruntime CPU s | "
             f"{command} / onnxruntime (wall) | {command} / onnxruntime (CPU) | CPU ratio of each round |"
             + (" imports and each node's kernel twice / onnxruntime (CPU) |" if twice else ""),
             "|---|---:|---:|---:|---:|---:|---:|---|" + ("---:|" if twice else "")]
    walls, cpus, floors = [], [], []
    for entry in load_zoo(ROOT / "models" / "zoo"):
        if only and (entry.name not in only.split(",") if "," in only else only not in entry.name):
            continue
        folder = tmp / entry.name
        path = materialize(entry.path, folder)
        dims = [f"{k}={v}" for k, v in entry.dims.items()]
        flags = [a for d in dims for a in ("--dim", d)]
        out = ["-o", str(tmp / "zoo.json")] if command == "plan" else []
        if device == "cuda":
            out = ["--device", "cuda", "--alignment", "256"]
        warm_this = warm == "each" or not walls
        cmds = {"p": onnxmem(command, str(path), *out, *flags),
                "o": [sys.executable, "-c", _ORT_RUN, str(path), device, *dims]}
        figures = tmp / "twice.txt"  # each run of _TWICE appends its CPU seconds
        figures.unlink(missing_ok=True)
        if twice:
            cmds["t"] = [sys.executable, "-c", _TWICE, str(path), str(figures), *dims]
        fig, got = taking_turns(runs, cmds, warm_this)
        p, o = fig["p"], fig["o"]
        walls.append(p["wall"] / o["wall"])
        cpus.append(p["cpu"] / o["cpu"])
        each = ", ".join(f"{a['cpu'] / b['cpu']:.2f}" for a, b in zip(got["p"], got["o"]))
        row = (f"| {entry.name} | {p['wall']:.2f} | {p['cpu']:.2f} | {o['wall']:.2f} | {o['cpu']:.2f} | "
               f"{walls[-1]:.2f} | {cpus[-1]:.2f} | {each} |")
        if twice:
            counted = [float(x) for x in figures.read_text().split()][-runs:]  # after the uncounted first
            floors.append(statistics.median(t / b["cpu"] for t, b in zip(counted, got["o"])))
            row += f" {floors[-1]:.2f} |"
        lines.append(row)
        shutil.rmtree(folder, ignore_errors=True)
    if walls:
        lines.append(f"| **at most {target:g} on** | **{sum(w <= target for w in walls)} of {len(walls)}** "
                     f"(wall), **{sum(c <= target for c in cpus)}** (CPU) | | | | "
                     f"median {statistics.median(walls):.2f}, max {max(walls):.2f} | "
                     f"median {statistics.median(cpus):.2f}, max {max(cpus):.2f} | |"
                     + (f" over {target:g} on {sum(f > target for f in floors)} |" if twice else ""))
    return lines


def pack_case(tmp: Path, runs: int) -> list[str]:
    small = tmp / "small.csv"
    small.write_text("id,lower,upper,size\na,0,2,64\nb,1,3,128\nc,2,4,64\n")
    rows = ["| command | wall s (median) | CPU s (median) | peak RSS MiB | target | met |", "|---|---:|---:|---:|---|---|"]
    for label, cmd in (("pack --help", onnxmem("pack", "--help")),
                       ("pack small.csv (3 buffers)", onnxmem("pack", str(small)))):
        m = median_of(runs, cmd)
        rows.append(f"| `{label}` | {m['wall']:.3f} | {m['cpu']:.3f} | {m['rss']:.0f} | 0.2 s | "
                    f"{met(m, 0.2)} |")
    return rows


def solver_case(tmp: Path, nodes: int) -> list[str]:
    import onnx
    from bench_scale import build

    from onnxmem.core.problem import Buffer, Problem, write_csv
    from onnxmem.plans import read_plan

    model = build("random", nodes)
    model.ir_version = 10
    path = tmp / "random.onnx"
    onnx.save(model, path)
    out = tmp / "random.json"
    p = timed(onnxmem("plan", str(path), "-o", str(out)))
    plan = read_plan(out)
    groups: dict[str, Buffer] = {}
    for t in plan.tensors:  # the arena's buffers: one per alias group of the main graph
        if t.graph:
            continue
        b = groups.get(t.group)
        groups[t.group] = Buffer(t.group, min(t.start, b.start) if b else t.start, max(t.end, b.end) if b else t.end,
                                 max(t.size, b.size) if b else t.size, plan.alignment)
    csv = tmp / "random.csv"
    csv.write_text(write_csv(Problem(tuple(groups.values())), None, None))
    rows = ["| command | buffers | arena B | over the bound | status | wall s | CPU s |", "|---|---:|---:|---:|---|---:|---:|"]
    rows.append(f"| `plan random.onnx -o` (solver auto) | {len(groups):,} | {plan.arena_size:,} | "
                f"+{plan.gap * 100:.3f}% | {plan.solver['status']} | {p['wall']:.2f} | {p['cpu']:.2f} |")
    result = tmp / "offsets.csv"
    k = timed(onnxmem("pack", str(csv), "-o", str(result)))
    offsets = {}  # the arena from the offsets pack wrote
    for line in result.read_text().splitlines()[1:]:
        fields = line.split(",")
        offsets[fields[0]] = int(fields[-1])
    height = max(offsets[b.id] + b.size for b in groups.values())
    rows.append(f"| `pack random.csv` (solver exact) | {len(groups):,} | {height:,} | "
                f"+{(height / plan.lower_bound - 1) * 100:.3f}% | | {k['wall']:.2f} | {k['cpu']:.2f} |")
    return rows


#: the sections of the run, each a table of docs/speed.md between its own markers
SECTIONS = ("pack", "large", "zoo", "verify", "verify-cuda", "solver")
#: each section's heading in docs/speed.md
HEADINGS = {
    "large": "`plan -o` on 100,000-node graphs (target: 10 s and 400 MB, whole process):",
    "pack": "`pack` start-up (target: under 0.2 s, whole process):",
    "solver": "`plan`'s default solver and `pack` on the same buffers (a random DAG):",
    "zoo": "`plan -o` on every zoo model against onnxruntime creating a session for it and running it "
           "once, each a whole process (target: plan at most onnxruntime):",
    "verify": "`verify` on every zoo model (it plans the model, proves the plan, runs the whole model once "
              "outside the arena as the reference, or each node again where that cannot be, and each node "
              "in one arena, where beside that reference the values of shape arithmetic are written from "
              "it) against the same onnxruntime process, each a whole process (target: verify "
              "at most 2x onnxruntime); the last column: its imports and every node's kernel run twice, "
              "in the arena and in the reference, as verify did before it wrote shape arithmetic's values "
              "from the reference (the whole model run twice in a session of its reference's kind: "
              "optimizations and prepacking off, one thread; the session not counted), in CPU seconds "
              "timed by that process in the same rounds, over onnxruntime's:",
    "verify-cuda": "`verify --device cuda --alignment 256` on zoo models (the same steps, each node run by "
                   "onnxruntime's CUDA provider in one device arena) against onnxruntime creating a session "
                   "on its CUDA provider and running it once, each a whole process (target: verify at most "
                   "2x onnxruntime):",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure of the large graphs, the zoo and pack (median)")
    parser.add_argument("--nodes", type=int, default=100_000, help="nodes of the chain and the transformer")
    parser.add_argument("--random", type=int, default=100_000, help="nodes of the random DAG")
    parser.add_argument("--only", default=None,
                        help="zoo models whose name contains this, or (several, comma-separated) these models")
    parser.add_argument("--sections", default=",".join(s for s in SECTIONS if s != "verify-cuda"),
                        help=f"comma-separated sections to run, of {', '.join(SECTIONS)} (default: all but "
                             "verify-cuda, which needs onnxruntime's CUDA provider); "
                             "docs/speed.md gets the tables of those")
    parser.add_argument("--warm", choices=("each", "first"), default="each",
                        help="an uncounted first run of every command (each), or of the first model's only")
    parser.add_argument("--quick", action="store_true", help="10k-node graphs, one run, three zoo models")
    parser.add_argument("--no-doc", action="store_true", help="print the tables, leave docs/speed.md alone")
    opts = parser.parse_args(argv)
    wanted = [w.strip() for w in opts.sections.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: {', '.join(unknown)} is not one of {', '.join(SECTIONS)}")
    if opts.quick:
        opts.runs, opts.nodes, opts.random = 1, 10_000, 10_000
    from bench_scale import machine

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    where = machine()
    t0 = time.perf_counter()
    only = opts.only or ("resnet50_batch" if opts.quick else None)
    cases = {"pack": lambda tmp: pack_case(tmp, opts.runs * 3),
             "large": lambda tmp: large_case(tmp, opts.nodes, opts.runs),
             "zoo": lambda tmp: zoo_case(tmp, opts.runs, only, warm=opts.warm),
             "verify": lambda tmp: zoo_case(tmp, opts.runs, only, "verify", 2.0, warm=opts.warm),
             "verify-cuda": lambda tmp: zoo_case(tmp, opts.runs, only, "verify", 2.0, "cuda", opts.warm),
             "solver": lambda tmp: solver_case(tmp, opts.random)}
    sections: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="onnxmem-speed-") as tmp:
        for name in [s for s in SECTIONS if s in wanted]:
            sections[name] = cases[name](Path(tmp))
            print("\n".join(sections[name]) + "\n", flush=True)
    total = time.perf_counter() - t0
    command = "python bench/bench_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not opts.no_doc:
        write_doc(sections, command.strip(), started, where, total)
    return 0


def write_doc(sections: dict[str, list[str]], command: str, started: str, where: str, total: float) -> None:
    """Each table run between its own markers of docs/speed.md, with the command, date and machine."""
    from _common import replace_section

    for name, rows in sections.items():
        text = "\n".join([
            f"- command: `{command}` (whole run {total:.0f} s)",
            f"- date: {started}",
            f"- machine: {where}",
            "",
            HEADINGS[name],
            "", *rows, "",
        ])
        replace_section(DOC, f"<!-- bench-speed:{name}:begin -->", f"<!-- bench-speed:{name}:end -->", text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    sys.exit(main())
