"""The zoo and the graphs onnxruntime's own tools make from it, planned, verified and compared.

    python bench/bench_ort_graphs.py                    # every zoo model x every variant; docs/ort-graphs.md
    python bench/bench_ort_graphs.py --quick            # QUICK models x every variant
    python bench/bench_ort_graphs.py --models 'bert*' --variants qdq fp16 --set DIR

The set (``bench/ort_graphs.py``: the zoo's models with weights, and per model its
transformer-fused, dynamic/QDQ/QOperator-quantized, float16 and onnxruntime-saved variants) is
built into a temporary folder that is removed at the end, or into / read from ``--set DIR``.
Then for each file of the set and each optimization level (below):

1. ``onnxmem plan FILE -o PLAN`` with the catalogue's binding (``--dim``, ``--input-shape``)
   and no other flag: default order and solver, whose budgets are counted work, so every
   figure is the same at any machine load;
2. ``onnxmem verify FILE --plan PLAN`` (cpu, every node in one arena) and
   ``onnxmem compare FILE --plan PLAN`` (onnxruntime's own peak, same tensors, at
   ORT_DISABLE_ALL and ORT_ENABLE_ALL);
3. onnxsim's ``plan_activation_memory`` (the ONNX-level planner of the ``onnxsim`` package,
   ``pip install .[bench]``) on the same file with its graph inputs fixed to the same shapes:
   greedy best-fit, largest first, graph inputs, node outputs and graph outputs in its arena,
   weights outside; tensors it cannot size are left out of its figure (column *onnxsim
   unplanned*), so a figure with some left out is below what the model needs;
4. the weights onnxmem reports (``weights_size`` of the plan) beside the initializer bytes
   stored in the file (inline or in its external data, counted here from the file).

Optimization level: when ``onnxmem plan --help`` lists ``--optimize``, each file is planned at
each of ``--levels`` (``--optimize LEVEL`` also goes to verify and compare when their help lists
it); otherwise the level column is ``-`` and each file is planned as it is.

Every command runs in a subprocess with a safety time limit; onnxsim runs in onnxmem's
onnxruntime child process (a crash is a row). A step that fails is that row's one-line error,
listed under the table, and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real import (  # noqa: E402
    StepError,
    cell,
    error_line,
    geomean,
    kib,
    last_line,
    ort_peaks,
    ratio,
    run_onnxmem,
    shorten,
    supports,
)
from bench_scale import machine  # noqa: E402
from ort_graphs import VARIANTS, WHAT, Entry, build_set, input_shapes, read_set  # noqa: E402

from onnxmem.core.errors import one_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ort-graphs.md"
QUICK = ("mobilenet_v2", "resnet50_legacy", "bert_base")
LEVELS = ("none", "basic", "extended", "all")
#: seconds one command may take: a safety bound, no figure depends on it
COMMAND_SECONDS = 1200.0


# --------------------------------------------------------------------------- onnxsim (in the child)


def onnxsim_arena(path: str, shapes: dict[str, list[int]]) -> dict[str, Any]:
    """onnxsim's ``plan_activation_memory`` on the model at ``path`` with its graph inputs fixed
    to ``shapes``: ``{"arena", "naive", "unplanned"}``, or ``{"error"}``."""
    import onnx

    from onnxmem.core.errors import one_line
    from onnxmem.runtime.isolation import end_run, start_run

    try:
        from onnxsim import plan_activation_memory
    except ImportError:
        return {"error": "onnxsim is not installed (pip install .[bench])"}
    model = onnx.load(path)
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name]):
                dim.Clear()
                dim.dim_value = int(size)
    start_run(f"onnxsim's plan_activation_memory of {Path(path).name}")
    try:
        plan = plan_activation_memory(model)
    except Exception as exc:  # noqa: BLE001 - the peer's failure is its cell
        return {"error": one_line(f"{type(exc).__name__}: {exc}")[:300]}
    finally:
        end_run()
    return {"arena": int(plan.arena_bytes), "naive": int(plan.naive_bytes), "unplanned": len(plan.unplanned),
            "overlaps": overlapping_nodes(model.graph, plan.tensor_offsets)}


def overlapping_nodes(graph: Any, offsets: dict[str, tuple[int, int]]) -> dict[str, int]:
    """``{op type: count}`` of the nodes of ``graph`` whose output shares bytes with one of their
    inputs in ``offsets`` (``name: (offset, size)``): written over an input while it is read,
    which only an in-place kernel allows.

    >>> import onnx
    >>> g = onnx.helper.make_graph([onnx.helper.make_node("Conv", ["x", "w"], ["y"])], "g", [], [])
    >>> overlapping_nodes(g, {"x": (0, 64), "y": (32, 64)})
    {'Conv': 1}
    """
    counts: dict[str, int] = {}
    for node in graph.node:
        ins = [offsets[i] for i in node.input if i in offsets]
        if any(o in offsets and any(offsets[o][0] < a + n and a < offsets[o][0] + offsets[o][1] for a, n in ins)
               for o in node.output):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def stored_weights(path: Path) -> int:
    """Bytes of the initializers (at every graph level) as the file stores them: each inline
    tensor's data, each external tensor's ``length`` (else the rest of its data file)."""
    import onnx
    from onnx import numpy_helper

    from onnxmem.model import initializers

    total = 0
    for t in initializers(onnx.load(str(path), load_external_data=False).graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            if "length" in info:
                total += int(info["length"])
            else:
                data = (path.parent / info["location"]).resolve()
                if data.parent == path.parent.resolve():  # the set's own files only
                    total += data.stat().st_size - int(info.get("offset", 0))
        elif t.raw_data:
            total += len(t.raw_data)
        else:
            total += numpy_helper.to_array(t).nbytes
    return total


# --------------------------------------------------------------------------- one file at one level


def binding(entry: Entry) -> list[str]:
    """The flags of the catalogue's shape binding."""
    flags = [a for name, size in entry.dims.items() for a in ("--dim", f"{name}={size}")]
    return flags + [a for name, shape in entry.input_shapes.items()
                    for a in ("--input-shape", f"{name}={'x'.join(map(str, shape))}")]


def level_flags(command: str, level: str, helps: dict[str, str]) -> list[str]:
    return ["--optimize", level] if level != "-" and supports(command, "--optimize", helps) else []


def bench_file(entry: Entry, folder: Path, level: str, shapes: dict[str, list[int]],
               timeout: float, helps: dict[str, str]) -> dict[str, Any]:
    import onnx

    from onnxmem.runtime import run_isolated

    path = folder / entry.file
    row: dict[str, Any] = {"model": entry.model, "variant": entry.variant, "level": level}
    row["nodes"] = len(onnx.load(str(path), load_external_data=False).graph.node)
    row["stored"] = stored_weights(path)
    try:
        row["onnxsim"] = run_isolated(onnxsim_arena, str(path), shapes)
    except Exception as exc:  # noqa: BLE001 - a crash or time-out of the peer
        row["onnxsim"] = {"error": shorten(one_line(f"{type(exc).__name__}: {exc}"))}
    with tempfile.TemporaryDirectory(prefix="bench-ort-graphs-") as tmp:
        work = Path(tmp)
        plan_file = work / "plan.json"
        try:
            res = run_onnxmem(["plan", str(path), "-o", str(plan_file), *binding(entry),
                               *level_flags("plan", level, helps)], timeout, work)
        except StepError as exc:
            row["error"] = f"plan: {exc}"
            return row
        if res.returncode != 0:
            row["error"] = f"plan: {error_line(res, limit=1000)}"
            return row
        plan = json.loads(plan_file.read_text())
        row.update(arena=plan["arena_size"], bound=plan["lower_bound"], weights=plan.get("weights_size"))
        for cmd in ("verify", "compare"):
            try:
                res = run_onnxmem([cmd, str(path), "--plan", str(plan_file), *level_flags(cmd, level, helps)],
                                  timeout, work)
            except StepError as exc:
                row[cmd] = str(exc)
                continue
            if cmd == "verify":
                row["verify"] = last_line(res.stdout) if res.returncode == 0 else error_line(res, limit=1000)
            else:
                if res.returncode != 0:
                    row["compare"] = error_line(res, limit=1000)
                row.update({k.lower(): v for k, v in ort_peaks(res.stdout).items()})
                found = DEFAULT.search(res.stdout)
                if found:
                    row["ort_default"] = int(found.group(1).replace(",", ""))
    return row


# --------------------------------------------------------------------------- the table


#: the level onnxruntime's peak is like for like with: a plan of the graph as written against
#: onnxruntime running that graph unoptimized, a plan at a level against onnxruntime at that level
LEVEL_PEAK = {"-": "ort_disable_all", "none": "ort_disable_all", "basic": "ort_enable_basic",
              "extended": "ort_enable_extended", "all": "ort_enable_all"}
DEFAULT = re.compile(r"^onnxruntime peak\s+.*?\(([\d,]+) B\).*?\[default session", re.M)


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | variant | level | nodes | arena KiB | lower bound KiB | verify (cpu) | "
           "ORT peak KiB (same level) | arena/ORT (same level) | ORT default session KiB | arena/ORT default | "
           "onnxsim arena KiB | onnxsim/arena | onnxsim unplanned | onnxsim nodes written over an input | "
           "weights KiB (onnxmem) | weights KiB (file) |",
           "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        sim = r.get("onnxsim", {})
        over = ", ".join(f"{n} {op}" for op, n in sorted(sim.get("overlaps", {}).items(), key=lambda x: -x[1]))
        sim_cells = (f"{kib(sim.get('arena'))} | {ratio(sim.get('arena'), r.get('arena'))} | "
                     f"{sim.get('unplanned', '-')} | {over or 'none'}") if "arena" in sim else (
            "failed | - | - | -" if sim else "- | - | - | -")
        head = f"| {r['model']} | {r['variant']} | {r['level']} | {r.get('nodes', '-')} |"
        if "arena" not in r:
            what = "not built" if r.get("built") is False else "plan failed"
            out.append(f"{head} {what} | - | - | - | - | - | - | {sim_cells} | - | {kib(r.get('stored'))} |")
            continue
        verify = "verified" if r.get("verify") == "verified" else "failed"
        same, default = r.get(LEVEL_PEAK[r["level"]]), r.get("ort_default")
        out.append(f"{head} {kib(r['arena'])} | {kib(r['bound'])} | {verify} | {kib(same)} | "
                   f"{ratio(r['arena'], same)} | {kib(default)} | {ratio(r['arena'], default)} | {sim_cells} | "
                   f"{kib(r.get('weights'))} | {kib(r.get('stored'))} |")
    return out


def problems(rows: list[dict[str, Any]]) -> list[str]:
    """Each failed step with its message, one line each."""
    lines = []
    for r in rows:
        if r.get("built") is False:  # listed with the build failures
            continue
        where = f"**{r['model']}.{r['variant']}**" + (f" ({r['level']})" if r["level"] != "-" else "")
        for key in ("error", "verify", "compare"):
            text = r.get(key)
            if text and text != "verified":
                lines.append(f"- {where} {key if key != 'error' else ''}: `{cell(text)}`".replace(" :", ":"))
        if "error" in r.get("onnxsim", {}):
            lines.append(f"- {where} onnxsim: `{cell(r['onnxsim']['error'])}`")
    return lines


def summary(rows: list[dict[str, Any]], entries: list[Entry]) -> list[str]:
    built = [e for e in entries if e.status == "built"]
    planned = [r for r in rows if "arena" in r]
    verified = [r for r in planned if r.get("verify") == "verified"]
    lines = [f"- files: {len(built)} built of {len(entries)} (model, variant) pairs "
             f"({sum(e.status == 'n/a' for e in entries)} not applicable, "
             f"{sum(e.status == 'failed' for e in entries)} failed to build); runs (file x level) "
             f"{len(rows)}: planned {len(planned)}, verified {len(verified)}."]
    for level in dict.fromkeys(r["level"] for r in planned):
        for key, label in ((LEVEL_PEAK[level], "onnxruntime's peak at the same level"),
                           ("ort_default", "onnxruntime's default session")):
            at = [r for r in planned if r["level"] == level and r.get(key)]
            pairs = [r["arena"] / r[key] for r in at]
            g = geomean(pairs)
            if g is not None:
                above = ", ".join(f"{r['model']}.{r['variant']} {r['arena'] / r[key]:.3f}" for r in at
                                  if r["arena"] > r[key])
                lines.append(f"- level {level}: arena / {label}: geomean {g:.3f} over {len(pairs)} runs; "
                             f"arena above it on {len(above.split(', ')) if above else 0}"
                             + (f" ({above})." if above else "."))
    sims = [(r["onnxsim"]["arena"], r["arena"]) for r in planned
            if "arena" in r.get("onnxsim", {}) and r["onnxsim"]["unplanned"] == 0 and r["arena"]]
    g = geomean([s / a for s, a in sims])
    if g is not None:
        lines.append(f"- onnxsim arena / onnxmem arena, where onnxsim sized every tensor: geomean {g:.3f} "
                     f"over {len(sims)} runs; onnxsim below onnxmem on {sum(s < a for s, a in sims)}.")
    over = [r for r in rows if r.get("onnxsim", {}).get("overlaps")]
    if over:
        lines.append(f"- onnxsim's plan writes a node's output over one of its inputs (bytes shared while the "
                     f"node reads them; only in-place kernels allow it) in {len(over)} of "
                     f"{sum('arena' in r.get('onnxsim', {}) for r in rows)} runs.")
    return lines


def build_failures(entries: list[Entry]) -> list[str]:
    return [f"- **{e.model}.{e.variant}**: `{cell(e.error)}`" for e in entries if e.status == "failed"]


def write_doc(rows: list[dict[str, Any]], entries: list[Entry], command: str, where: str,
              seconds: float, levels_note: str) -> None:
    from onnxmem.core.fileio import write_text_atomic

    lines = [
        "# Graphs made by onnxruntime's tools",
        "",
        "The zoo's models ([zoo.md](zoo.md)) and the graphs onnxruntime's own tools make from them, "
        "each planned with no flag beyond the catalogue's input binding, verified in one arena, and "
        "compared with onnxruntime's own peak and with onnxsim's `plan_activation_memory` "
        "(`bench/bench_ort_graphs.py` says what each step runs and counts; `bench/ort_graphs.py` "
        "builds the set).",
        "",
        f"- command: `{command}`",
        f"- machine: {where}; no GPU",
        f"- run time: {seconds:.0f} s (building the set included)",
        f"- level: {levels_note}",
        "- variants: " + "; ".join(f"*{v}*: {WHAT[v]}" for v in VARIANTS) + ".",
        "- columns: *arena/ORT* below 1 means the plan needs less than onnxruntime for the same tensors; "
        "*onnxsim/arena* above 1 means onnxsim's arena is larger than onnxmem's; *onnxsim unplanned* "
        "tensors onnxsim could not size (its arena leaves them out); *weights KiB (onnxmem)* the plan's "
        "`weights_size`, *(file)* the initializer bytes stored in the file.",
        "",
        *summary(rows, entries),
        "",
        *table(rows),
        "",
        *weights_notes(rows),
        "",
    ]
    failed = build_failures(entries)
    if failed:
        lines += ["Variants that could not be built (the tool's own error):", "", *failed, ""]
    steps = problems(rows)
    if steps:
        lines += ["Steps that failed:", "", *steps, ""]
    write_text_atomic(DOC, "\n".join(lines))


#: a run whose plan counts this many bytes more than the file stores is named under the table
WEIGHTS_NAMED = 2**20


def weights_notes(rows: list[dict[str, Any]]) -> list[str]:
    """Where the two weights columns differ, the runs where the plan counts at least
    :data:`WEIGHTS_NAMED` more than the file stores (figures from ``rows``), and what onnxsim's
    figure leaves out."""
    more = [f"{r['model']}.{r['variant']} at `{r['level']}` +{kib(r['weights'] - r['stored'])} KiB"
            for r in rows if isinstance(r.get("weights"), int) and isinstance(r.get("stored"), int)
            and r["weights"] - r["stored"] >= WEIGHTS_NAMED]
    return [
        "Where the two weights columns differ. The file column counts initializers; the plan's weights "
        "also hold the values computed once from them or from constant nodes ([fold.md](fold.md): "
        "Constant, ConstantOfShape, Range and shape arithmetic, whose bytes the file keeps in nodes or "
        "not at all; a QDQ graph's DequantizeLinear outputs are not among them, they run at run time), "
        "under 1 MiB on the other rows. More where onnxruntime holds more too: a folded copy beside a stored "
        "weight that stays (a tied embedding table transposed once for the output projection while a "
        "Gather still reads the original), and, at `all`, the initializers of the graph onnxruntime "
        f"built (a float16 model's weights converted to float on CPU). By {WEIGHTS_NAMED // 2**20} MiB "
        "or more in this run: " + ("; ".join(more) if more else "none") + ". "
        "onnxsim's plan leaves out every tensor it cannot size (outputs of ops it has no shape rule for, "
        "onnxruntime's contrib and NCHWc ops among them), so its figure is then a partial one.",
    ]


# --------------------------------------------------------------------------- the run


def run(entries: list[Entry], folder: Path, levels: Sequence[str], timeout: float,
        helps: dict[str, str]) -> list[dict[str, Any]]:
    from onnxmem.runtime import run_limits

    rows: list[dict[str, Any]] = []
    with run_limits(seconds=timeout):
        for e in entries:
            if e.status == "n/a":
                continue
            if e.status == "failed":
                rows.append({"model": e.model, "variant": e.variant, "level": "-", "built": False,
                             "error": f"build: {e.error}"})
                continue
            shapes = {k: list(v) for k, v in input_shapes(folder / e.file, e.dims,
                                                          {k: tuple(v) for k, v in e.input_shapes.items()}).items()}
            for level in levels:
                print(f"[{e.model}.{e.variant}] {level} ...", file=sys.stderr, flush=True)
                try:
                    rows.append(bench_file(e, folder, level, shapes, timeout, helps))
                except Exception as exc:  # noqa: BLE001 - a bug here for one file: a row, not the end
                    rows.append({"model": e.model, "variant": e.variant, "level": level,
                                 "error": f"bench: {type(exc).__name__}: {shorten(one_line(str(exc)))}"})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--models", nargs="+", default=[], metavar="NAME", help="zoo models (shell patterns)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="VARIANT")
    ap.add_argument("--levels", nargs="+", default=["none", "all"], choices=LEVELS, metavar="LEVEL",
                    help="--optimize levels to plan at, where 'onnxmem plan' has --optimize")
    ap.add_argument("--set", type=Path, help="folder of the set: read when it holds one, else built there")
    ap.add_argument("--timeout", type=float, default=COMMAND_SECONDS, help="seconds one command may take")
    ap.add_argument("--no-doc", action="store_true", help="print the table; leave docs/ort-graphs.md alone")
    args = ap.parse_args(argv)
    models = list(QUICK) if args.quick and not args.models else args.models
    helps: dict[str, str] = {}
    levels = list(args.levels) if supports("plan", "--optimize", helps) else ["-"]
    levels_note = ("planned at " + ", ".join(f"`--optimize {lv}`" for lv in levels) if levels != ["-"]
                   else "`-`: this onnxmem's plan has no `--optimize`; each file is planned as it is")
    where = machine()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ort-graphs-") as tmp:
        folder = (args.set or Path(tmp)).resolve()
        if args.set is not None and (args.set / "set.json").is_file():
            import fnmatch

            entries = [e for e in read_set(args.set) if e.variant == "original" or e.variant in args.variants]
            entries = [e for e in entries if not models or any(fnmatch.fnmatchcase(e.model, p) for p in models)]
        else:
            entries = build_set(folder, models, args.variants,
                                log=lambda s: print(f"build {s}", file=sys.stderr, flush=True))
        rows = run(entries, folder, levels, args.timeout, helps)
    seconds = time.perf_counter() - t0
    failed = build_failures(entries)
    for line in [*summary(rows, entries), "", *table(rows), "", *failed, *problems(rows)]:
        print(line)
    if not args.no_doc:
        words = sys.argv[1:] if argv is None else list(argv)
        command = " ".join(["python bench/bench_ort_graphs.py", *[w for w in words if w != "--no-doc"]])
        write_doc(rows, entries, command, where, seconds, levels_note)
        print(f"\nwrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
