"""Verify time next to a plain onnxruntime run, for the nine onnx-wheel models; the static proof at scale.

Usage: python bench/bench_verify.py [--repeat N] [--scale N,N,...] [MODEL.onnx ...]

First, the static proof alone (``prove_plan``) on Relu chains of ``--scale``
nodes (default 2,000, 20,000 and 100,000), for two valid plans of each: every
tensor in one in-place group at offset 0 (each step judges a write over a
member of the group) and every tensor in its own group on two alternating
buffers (each step judges a pair of groups); best of ``--repeat``, wall clock
and (in parentheses) the CPU time of this process.

For each model: plan it (default options), then time ``verify_plan`` (static
proof + execution in one arena + the same nodes again outside the arena, the
reference + the whole-model run, for information) and a plain
onnxruntime run (one session, ORT_DISABLE_ALL, one thread: creation and one
run), best of ``--repeat``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import onnx

from onnxmem.graph import GraphView, build_view
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans.point import MemoryPlan, PlannedTensor
from onnxmem.proof.plan import prove_plan, true_lifetimes
from onnxmem.runtime.ort import load_with_weights, make_session, random_inputs
from onnxmem.shapes import infer_shapes
from onnxmem.verify.run import verify_plan

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def plain_run(model: onnx.ModelProto, path: Path, shapes: dict) -> float:
    t0 = time.perf_counter()
    full = load_with_weights(model, path)
    sess = make_session(full)
    sess.run(None, random_inputs(full, shapes, 0))
    return time.perf_counter() - t0


def relu_chain(n: int) -> GraphView:
    """The view of ``x -> Relu -> ... -> y`` (``n`` nodes, 64 B tensors)."""
    names = ["x"] + [f"r{i}" for i in range(n)]
    nodes = [onnx.helper.make_node("Relu", [a], [b], name=f"n{b}") for a, b in zip(names, names[1:])]
    io = [onnx.helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, [1, 16]) for v in (names[0], names[-1])]
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "chain", io[:1], io[1:]), ir_version=10,
                                   opset_imports=[onnx.helper.make_opsetid("", 17)])
    return build_view(model, infer_shapes(model))


def chain_plan(view: GraphView, one_group: bool) -> MemoryPlan:
    """A valid plan of a Relu chain: one in-place group at offset 0, or two alternating buffers."""
    life = true_lifetimes(view, range(len(view.ops)))
    acts = view.activations()
    size = acts[0].size

    def placed(k: int) -> PlannedTensor:
        t = acts[k]
        writer = view.ops[t.producer] if t.producer is not None else None
        return PlannedTensor(name=t.name, dtype=t.dtype, shape=t.shape, size=t.size,
                             offset=0 if one_group else size * (k & 1), start=life[t.name][0],
                             end=life[t.name][1], producer=writer.name if writer else None,
                             producer_op=writer.op_type if writer else None, kind=t.kind,
                             group=acts[0].name if one_group else t.name)

    arena = size if one_group else 2 * size
    return MemoryPlan(model={}, dims={}, input_shapes={}, order=tuple(op.name for op in view.ops),
                      op_types=tuple(op.op_type for op in view.ops), order_strategy="file", io="internal",
                      alignment=1, inplace=one_group, form="offsets",
                      tensors=tuple(placed(k) for k in range(len(acts))), arena_size=arena, lower_bound=arena,
                      naive_size=size * len(acts), weights_size=0, peak_step=0, solver={}, plan_seconds=0.0)


def proof_at_scale(sizes: list[int], repeat: int) -> None:
    print("| Relu chain | tensors | proof, one in-place group | proof, two buffers |")
    print("|---:|---:|---:|---:|")
    for n in sizes:
        view = relu_chain(n)
        cells = []
        for one_group in (True, False):
            plan = chain_plan(view, one_group)
            best = (float("inf"), 0.0)
            for _ in range(repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                found = prove_plan(plan, view)
                best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
                if found:
                    raise SystemExit(f"chain of {n}: the proof refuses a valid plan: {found[0]}")
            cells.append(f"{best[0]:.2f} s (CPU {best[1]:.2f} s)")
        print(f"| {n:,} nodes | {len(plan.tensors):,} | {cells[0]} | {cells[1]} |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", default="2000,20000,100000", help="chain lengths for the proof at scale ('' for none)")
    args = ap.parse_args()
    models = args.models or sorted(LIGHT.glob("light_*.onnx"))
    print(f"machine: {platform.machine()}, {__import__('os').cpu_count()} cores; onnxruntime "
          f"{__import__('onnxruntime').__version__}, CPU")
    print()
    if args.scale:
        proof_at_scale([int(n) for n in args.scale.split(",")], args.repeat)
    print("| model | nodes run | arena | static proof | verify (total) | of which in the arena | outside the arena "
          "| whole-model run | plain onnxruntime run | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in models:
        p = plan_model(path, PlanOptions())
        shapes = {n: p.view.tensors[n].shape for n in p.view.inputs}
        best_v = best_loop = best_private = best_whole = best_plain = float("inf")
        static = 0.0
        nodes = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
            took = time.perf_counter() - t0
            if not report.ok:
                raise SystemExit(f"{path.name}: {report.first}")
            assert report.execution is not None
            if took < best_v:
                best_v, best_loop = took, report.execution.seconds
                best_private, best_whole = report.execution.private_seconds, report.execution.reference_seconds
                static, nodes = report.static_seconds, report.execution.nodes_run
            best_plain = min(best_plain, plain_run(p.model, path, shapes))
        print(f"| {path.stem.removeprefix('light_')} | {nodes} | {p.plan.arena_size / 2**20:.2f} MiB | "
              f"{static * 1000:.1f} ms | {best_v:.2f} s | {best_loop:.2f} s | {best_private:.2f} s | "
              f"{best_whole:.2f} s | {best_plain:.2f} s | "
              f"{best_v / best_plain:.1f}x |")


if __name__ == "__main__":
    main()
