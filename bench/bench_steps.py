"""CPU seconds of each step of ``plan -o`` on the 100,000-node graphs, in one process, least of N.

A whole ``plan -o`` of the transformer moves by more than a second from one run to the next on
a shared machine (8.3 to 11.9 CPU s in four runs of one tree in a row); what a change saves is
less. Here each graph is loaded once in a process of its own, then planned ``--runs`` times
(``onnxmem.planning.pipeline.plan_loaded``) with each step's CPU time recorded and the plan
written to a file; each step's figure is its least over the runs. With ``--against DIR`` (a
checkout of another tree, with its ``make install`` done or its store absent alike) the same is
run on that tree's code, the two trees alternating ``--rounds`` times; the table gives each
step's least over every round, and the ratio of the totals. Steps a tree does not have (the node
fields read once, ``read_nodes``) show a dash. Written between the ``bench-steps`` markers of
docs/speed.md::

    python bench/bench_steps.py                               # make bench-steps
    python bench/bench_steps.py --against ../onnxmem-old --no-doc
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402

DOC = ROOT / "docs" / "speed.md"
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
#: (module, function): the steps timed, each where the pipeline calls it (a module global there)
STEPS = (
    ("onnxmem.planning.pipeline", "read_nodes"),
    ("onnxmem.planning.pipeline", "_infer"),
    ("onnxmem.planning.pipeline", "view_of"),
    ("onnxmem.planning.compose", "order_view"),
    ("onnxmem.planning.pipeline", "aliased_liveness"),
    ("onnxmem.planning.compose", "solve_layout"),
    ("onnxmem.planning.pipeline", "_make_plan"),
    ("onnxmem.planning.pipeline", "prove_plan"),
)

#: the child: ``TREE MODEL RUNS OUT`` -> one JSON line of each step's least CPU seconds
_CHILD = r"""
import gc, importlib, json, sys, time
tree, model_path, runs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tree)
try:
    from onnxmem.cli.main import GC_THRESHOLDS  # the command line's collector settings
    gc.set_threshold(*GC_THRESHOLDS)
except ImportError:
    pass
from onnxmem.model import load_model
import onnxmem.planning.pipeline as pipeline
spent = {}
def timed(module, name):
    mod = importlib.import_module(module)
    real = getattr(mod, name, None)
    if real is None:
        return
    def step(*args, **kwargs):
        t = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - t
    setattr(mod, name, step)
for module, name in json.loads(sys.argv[5]):
    timed(module, name)
assert pipeline.__file__.startswith(tree), pipeline.__file__
t = time.process_time()
model = load_model(model_path)
least = {"load": time.process_time() - t}
for _ in range(runs):
    spent.clear()
    t = time.process_time()
    planned = pipeline.plan_loaded(model, model_path)
    spent["plan"] = time.process_time() - t
    t = time.process_time()
    with open(out, "wb") as fh:
        planned.plan.write_json(fh)
    spent["write"] = time.process_time() - t
    del planned
    for k, v in spent.items():
        least[k] = min(least.get(k, v), v)
print(json.dumps(least))
"""


def measure(tree: Path, model: Path, runs: int, out: Path) -> dict[str, float]:
    """Each step's least CPU seconds over ``runs`` plans of ``model`` by the code of ``tree``."""
    done = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(tree), str(model), str(runs), str(out),
                           json.dumps(STEPS)], capture_output=True, text=True, env=ENV, cwd=tree, check=False)
    if done.returncode:
        raise SystemExit(f"error: planning {model.name} with {tree} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="plans per process (each step's least is kept)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree, the trees alternating")
    parser.add_argument("--nodes", type=int, default=100_000, help="nodes of the chain and the transformer")
    parser.add_argument("--families", default="transformer,chain", help="the graphs, of transformer and chain")
    parser.add_argument("--against", type=Path, default=None, help="a checkout of another tree, run side by side")
    parser.add_argument("--no-doc", action="store_true", help="print the table, leave docs/speed.md alone")
    opts = parser.parse_args(argv)
    if opts.against is not None and not (opts.against / "onnxmem" / "planning" / "pipeline.py").is_file():
        print(f"error: --against {opts.against} is not a checkout of onnxmem (no onnxmem/planning/pipeline.py); "
              "give the folder of a clone", file=sys.stderr)
        return 2
    from bench_scale import machine
    from bench_speed import large_model

    start, where = time.time(), machine()
    trees = [("this tree", ROOT)] + ([("against", opts.against.resolve())] if opts.against else [])
    names = ["load", *(n for _, n in STEPS), "plan", "write"]
    lines = []
    with tempfile.TemporaryDirectory(prefix="onnxmem-steps-") as tmp:
        for family in opts.families.split(","):
            path = Path(tmp) / f"{family}.onnx"
            count = large_model(family, opts.nodes, path)
            best: dict[str, dict[str, float]] = {label: {} for label, _ in trees}
            for _ in range(opts.rounds):
                for label, tree in trees:
                    for k, v in measure(tree, path, opts.runs, Path(tmp) / "plan.json").items():
                        best[label][k] = min(best[label].get(k, v), v)
            head = " | ".join(label for label, _ in trees)
            lines += [f"{family}, {count:,} nodes:", "", f"| step | {head} |" + (" ratio |" if opts.against else ""),
                      "|---|" + "---:|" * (len(trees) + bool(opts.against))]
            for name in names:
                cells = [f"{best[label][name]:.3f}" if name in best[label] else "-" for label, _ in trees]
                ratio = ""
                if opts.against and all(name in best[label] for label, _ in trees) and best["against"][name] > 0:
                    ratio = f" {best['this tree'][name] / best['against'][name]:.2f} |"
                shown = "**`plan_loaded`, every step**" if name == "plan" else f"`{name}`"
                lines.append(f"| {shown} | " + " | ".join(cells) + " |" + ratio)
            lines.append("")
            print("\n".join(lines[-len(names) - 4:]), flush=True)
    command = "python bench/bench_steps.py" + (f" --against {opts.against}" if opts.against else "") + (
        f" --families {opts.families}" if opts.families != "transformer,chain" else "")
    header = [f"- command: `{command} --runs {opts.runs} --rounds {opts.rounds}` "
              f"(whole run {time.time() - start:.0f} s)",
              f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))}",
              f"- machine: {where}",
              "- each figure: the step's least CPU seconds over every plan of every round, in-process "
              "(`plan` is the whole `plan_loaded`; `write` is the plan's JSON file)", ""]
    text = "\n".join(header + lines) + "\n"
    return publish(DOC, "bench-steps", text, not opts.no_doc)


if __name__ == "__main__":
    sys.exit(main())
