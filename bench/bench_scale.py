"""Scale benchmark: plan time and peak memory of large graphs, default options.

Three families, each at 1k, 10k and 100k nodes (``--sizes``):

* ``chain``: ``x -> Relu -> Relu -> ... -> y`` on a ``[1, 64]`` float input;
* ``transformer``: :func:`onnxmem.model.generate.transformer`, 25 nodes per layer;
* ``random``: :func:`onnxmem.model.generate.randwire` on a Watts-Strogatz graph,
  3 nodes (Sum, Relu, Conv) per graph node: a random DAG.

Every case runs in a subprocess of its own, so that its peak resident memory
(``ru_maxrss`` of that process) is its own: the child builds the model, writes
it, then times ``onnxmem.planning.pipeline.plan_model`` with the default options. The
static proof (``onnxmem.proof.plan.prove_plan``, run by every plan) is timed on its
own inside that call and reported apart; it stops at ``--proof-limit`` seconds
(then the table shows ``>`` that limit, and the plan time excludes it). Both
wall-clock and CPU seconds are shown: on a shared machine the wall time
includes waiting for a core.

    python bench/bench_scale.py                       # table, and docs/scale.md
    python bench/bench_scale.py --sizes 1000,10000 --no-doc
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "scale.md"
FAMILIES = ("chain", "transformer", "random")
#: nodes per unit of each generator: Relu chain 1, transformer layer 25, randwire node 3
PER_UNIT = {"chain": 1, "transformer": 25, "random": 3}


def build(family: str, nodes: int):  # -> onnx.ModelProto
    """The model of ``family`` with about ``nodes`` nodes."""
    from onnx import TensorProto, helper

    from onnxmem.model.generate import randwire, transformer

    units = max(nodes // PER_UNIT[family], 2)
    if family == "transformer":
        return transformer(units)
    if family == "random":
        return randwire(units, "ws", seed=0)
    names = ["x"] + [f"t{i}" for i in range(1, units)] + ["y"]
    node_list = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"relu{i}") for i in range(units)]
    graph = helper.make_graph(node_list, f"chain_{units}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench_scale")
    model.ir_version = 10
    return model


def _cpu_timed(fn: Callable[..., Any], into: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn``, adding the CPU seconds each call takes to ``into[key]``."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        c = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into[key] += time.process_time() - c

    return wrapped


def child(family: str, nodes: int, proof_limit: float, workdir: str) -> None:
    """Build, save and plan one case; print one JSON line with its figures."""
    import resource
    import signal

    import onnx

    from onnxmem.planning import pipeline
    from onnxmem.planning.pipeline import plan_model

    model = build(family, nodes)
    path = Path(workdir) / f"{family}_{nodes}.onnx"
    onnx.save(model, path)
    real_nodes = len(model.graph.node)
    del model
    proof = {"seconds": 0.0, "cpu": 0.0, "done": True}
    prove = pipeline.prove_plan

    class ProofLimit(Exception):
        pass

    def on_alarm(signum: int, frame: object) -> None:
        raise ProofLimit

    def timed_proof(*args: object, **kwargs: object) -> list[object]:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, proof_limit)
        t, c = time.perf_counter(), time.process_time()
        try:
            return prove(*args, **kwargs)  # type: ignore[arg-type]
        except ProofLimit:
            proof["done"] = False
            return []
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            proof["seconds"] = time.perf_counter() - t
            proof["cpu"] = time.process_time() - c

    pipeline.prove_plan = timed_proof  # type: ignore[assignment]
    stages = {"shapes": 0.0, "solver": 0.0}
    for attr, stage in (("infer_shapes", "shapes"), ("solve", "solver")):
        setattr(pipeline, attr, _cpu_timed(getattr(pipeline, attr), stages, stage))
    t, c = time.perf_counter(), time.process_time()
    planned = plan_model(path)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(json.dumps({
        "family": family, "nodes": real_nodes, "buffers": len(planned.liveness.problem),
        "plan_s": wall - proof["seconds"], "plan_cpu_s": cpu - proof["cpu"],
        "shapes_cpu_s": stages["shapes"], "solver_cpu_s": stages["solver"],
        "proof_s": proof["seconds"], "proof_cpu_s": proof["cpu"], "proof_done": proof["done"],
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "arena": planned.plan.arena_size, "lower_bound": planned.plan.lower_bound,
    }))


def run_case(family: str, nodes: int, proof_limit: float, workdir: str, timeout: float) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--child", family, str(nodes), str(proof_limit), workdir]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"family": family, "nodes": nodes, "error": f"over {timeout:.0f} s"}
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        return {"family": family, "nodes": nodes, "error": last[:120]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The machine a table ran on: the processor (its family and model, and its widest vector
    extension, where Linux says in ``cpuinfo``: one model name covers processors of several
    generations, whose ratios to onnxruntime differ), its logical CPUs, the system, Python and
    the load."""
    model = platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the first processor's fields only
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name", model)
    if "cpu family" in fields and "model" in fields:
        flags = set(fields.get("flags", "").split())
        vector = next((v for v, f in (("AVX-512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx")) if f in flags), None)
        model += f" (family {fields['cpu family']}, model {fields['model']}" + (f", {vector})" if vector else ")")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average at start {load}")


def table(rows: list[dict[str, object]], proof_limit: float) -> list[str]:
    out = ["| graph | nodes | buffers | plan s (wall) | plan s (CPU) | shapes | solver | rest | "
           "proof s (wall) | proof s (CPU) | plan + proof s (wall) | peak RSS MiB | arena B |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['family']} | {r['nodes']} | | failed: {r['error']} | | | | | | | | | |")
            continue
        proof = f"{r['proof_s']:.2f}" if r["proof_done"] else f"> {proof_limit:.0f}"
        proof_cpu = f"{r['proof_cpu_s']:.2f}" if r["proof_done"] else "-"
        rest = r["plan_cpu_s"] - r["shapes_cpu_s"] - r["solver_cpu_s"]  # type: ignore[operator]
        total = f"{r['plan_s'] + r['proof_s']:.2f}" if r["proof_done"] else "-"  # type: ignore[operator]
        out.append(f"| {r['family']} | {r['nodes']:,} | {r['buffers']:,} | {r['plan_s']:.2f} | "
                   f"{r['plan_cpu_s']:.2f} | {r['shapes_cpu_s']:.2f} | {r['solver_cpu_s']:.2f} | {rest:.2f} | "
                   f"{proof} | {proof_cpu} | {total} | {r['rss_mib']:.0f} | {r['arena']:,} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="node counts, comma-separated")
    ap.add_argument("--families", default=",".join(FAMILIES), help="of: " + ", ".join(FAMILIES))
    ap.add_argument("--proof-limit", type=float, default=20.0, help="seconds the proof may take per case")
    ap.add_argument("--case-timeout", type=float, default=150.0, help="seconds per case, everything included")
    ap.add_argument("--no-doc", action="store_true", help=f"print only, do not write {DOC.relative_to(ROOT)}")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        family, nodes, limit, workdir = args.child
        child(family, int(nodes), float(limit), workdir)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s]
    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        ap.error(f"unknown family {bad[0]!r}; choose from {', '.join(FAMILIES)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    where = machine()
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for family in families:
            for nodes in sizes:
                row = run_case(family, nodes, args.proof_limit, workdir, args.case_timeout)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    total = time.perf_counter() - t0
    lines = table(rows, args.proof_limit)
    print("\n".join(lines))
    print(f"\nwhole run {total:.0f} s")
    if not args.no_doc:
        command = "python bench/bench_scale.py" + (f" --sizes {args.sizes}" if args.sizes != "1000,10000,100000" else "")
        DOC.write_text(doc(lines, command, started, where, total, args.proof_limit))
    return 0


def doc(lines: list[str], command: str, started: str, where: str, total: float, proof_limit: float) -> str:
    return "\n".join([
        "# Planning at scale",
        "",
        "Plan time and peak memory of large generated graphs with the default options",
        "(`onnxmem plan MODEL`: `--order auto`, `--solver auto`, `--inplace on`), each case",
        "in a subprocess of its own (`make bench-scale`, `bench/bench_scale.py`).",
        "",
        f"- command: `{command}` (whole run {total:.0f} s)",
        f"- date: {started}",
        f"- machine: {where}",
        "",
        "*plan s*: `plan_model` from reading the file to the recorded plan (shape",
        "inference, view, order, liveness and aliasing, solver, plan record), the proof",
        "excluded. *proof s*: the static proof (`onnxmem.proof.plan.prove_plan`) that every",
        f"plan runs, timed apart and stopped at {proof_limit:.0f} s (`>`). *shapes*, *solver*,",
        "*rest*: the plan's CPU seconds in shape inference (`onnxmem.shapes.infer_shapes`),",
        "in the solver (`onnxmem.core.solvers.solve`) and in everything else (reading the file,",
        "view, order, liveness and aliasing, plan record). *peak RSS*: the",
        "case's own process, the model build included. Wall seconds include waiting for",
        "a core on a shared machine; CPU seconds do not.",
        "",
        *lines,
        "",
        "The *chain* is a Relu chain on a `[1, 64]` input; *transformer* is",
        "`onnxmem.model.generate.transformer` (25 nodes per layer, so 4,000 layers at 100k",
        "nodes); *random* is `onnxmem.model.generate.randwire` on a Watts-Strogatz graph (Sum,",
        "Relu and Conv per graph node).",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
