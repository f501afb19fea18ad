"""The nodes with bodies (If, Loop, Scan) of an arena run (:mod:`.arena`).

Each body runs node by node in the arena as a nested run over its planned
tensors (inside the node's region): the If branch its condition chooses
(writing its outputs at the If's outputs when the plan says ``outputs: owner``),
every Loop iteration (iteration number, condition and carried values copied
into the body's carried slots first, the body's outputs read back after,
scan outputs stacked), every Scan step (state and slices in, state and output
slices back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from onnxmem.core.errors import PlanError, show_name
from onnxmem.graph import Op, child_path
from onnxmem.model import subgraph_attributes

if TYPE_CHECKING:
    from onnxmem.runtime.arena import ArenaRun

__all__ = ["run_bodies"]


def run_bodies(run: ArenaRun, op: Op) -> bool:
    """A node with bodies, run node by node in its region: the If branch its condition
    chooses, every Loop iteration, every Scan step (see :mod:`onnxmem.planning.bodies` for where
    each value lives). ``False`` when a finding stops the run."""
    node = run.nodes[op.index]
    bodies = {b.attr: b for b in run.view.bodies[op.index]}
    graphs = dict(subgraph_attributes(node))
    kind = next(iter(bodies.values())).kind
    ins = [run._value(n) if n else None for n in node.input]
    outs = [o for o in node.output if o]
    result: list[tuple[np.ndarray, np.ndarray]] | None
    if kind == "if":
        branch = "then_branch" if bool(np.asarray(ins[0][0]).reshape(-1)[0]) else "else_branch"  # type: ignore[index]
        if branch not in bodies:
            where = child_path(run.view.path, op.name)
            raise PlanError(f"If {show_name(where)} takes its {branch} on these inputs, which the plan leaves out "
                            f"(--branch: it assumes runs take the other); give inputs that take the planned "
                            "branch, or plan without --branch")
        result = _run_body(run, op, bodies[branch], graphs[branch], [])
    elif kind == "loop":
        result = _run_loop(run, op, bodies["body"], graphs["body"], ins)
    else:
        result = _run_scan(run, op, node, bodies["body"], graphs["body"], ins)
    if result is None:
        return False
    return all(run._place(op, name, a, p) for name, (a, p) in zip(outs, result))

def _run_body(run: ArenaRun, op: Op, body: Any, graph: onnx.GraphProto,
              formal: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """One run of ``body`` with its formal inputs set: its outputs (arena, reference)."""
    frame = run.nested(body, graph)
    for name, (a, p) in zip(frame.view.inputs, formal):
        if not frame._place(op, name, a, p):
            return None
        frame.saved.maps[0][name] = frame._read(frame.slots[name])
        frame.live.maps[0][name] = frame.slots[name]
    done = frame.run_steps()
    run.nodes_run += frame.nodes_run
    run.private_seconds += frame.private_seconds
    run.changed = run.changed or frame.changed
    if not done:
        return None
    return [frame._value(vi.name) for vi in graph.output]

def _run_loop(run: ArenaRun, op: Op, body: Any, graph: onnx.GraphProto,
              ins: list[Any]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    trips = int(np.asarray(ins[0][0]).reshape(-1)[0]) if ins and ins[0] is not None else None
    cond = bool(np.asarray(ins[1][0]).reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else True
    carried = [v for v in ins[2:] if v is not None]
    n_scan = len(graph.output) - 1 - len(carried)
    scans: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(n_scan)]
    i = 0
    while (trips is None or i < trips) and cond:
        it = np.array(i, dtype=np.int64)
        c = np.array(cond, dtype=np.bool_)
        out = _run_body(run, op, body, graph, [(it, it), (c, c), *carried])
        if out is None:
            return None
        cond = bool(np.asarray(out[0][0]).reshape(-1)[0])
        carried = [(a.copy(), p.copy()) for a, p in out[1:1 + len(carried)]]
        for k, v in enumerate(out[1 + len(carried):]):
            scans[k].append((v[0].copy(), v[1].copy()))
        i += 1
    stacked = [_stack(run, op, graph.output[1 + len(carried) + k].name, sl, 0, False) for k, sl in enumerate(scans)]
    return carried + stacked

def _run_scan(run: ArenaRun, op: Op, node: onnx.NodeProto, body: Any, graph: onnx.GraphProto,
              ins: list[Any]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    m = int(attrs["num_scan_inputs"])
    n = len(node.input) - m
    state = ins[:n]
    seqs = ins[n:]
    in_axes = list(attrs.get("scan_input_axes", [0] * m))
    in_dirs = list(attrs.get("scan_input_directions", [0] * m))
    k_out = len(graph.output) - n
    out_axes = list(attrs.get("scan_output_axes", [0] * k_out))
    out_dirs = list(attrs.get("scan_output_directions", [0] * k_out))
    axes = [a % max(seqs[j][0].ndim, 1) for j, a in enumerate(in_axes)]
    steps = int(seqs[0][0].shape[axes[0]]) if seqs else 0
    scans: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(k_out)]
    for t in range(steps):
        sl = []
        for j, (a, p) in enumerate(seqs):
            at = t if not in_dirs[j] else steps - 1 - t
            sl.append((np.take(a, at, axis=axes[j]), np.take(p, at, axis=axes[j])))
        out = _run_body(run, op, body, graph, [*state, *sl])
        if out is None:
            return None
        state = [(a.copy(), p.copy()) for a, p in out[:n]]
        for k, v in enumerate(out[n:]):
            scans[k].append((v[0].copy(), v[1].copy()))
    stacked = [_stack(run, op, graph.output[n + k].name, sl, out_axes[k], bool(out_dirs[k]))
               for k, sl in enumerate(scans)]
    return state + stacked

def _stack(run: ArenaRun, op: Op, body_output: str, slices: list[tuple[np.ndarray, np.ndarray]], axis: int,
           reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """The slices one scan output collected, stacked along ``axis`` (reversed for direction 1)."""
    if reverse:
        slices = slices[::-1]
    if not slices:
        t = run.view.bodies[op.index][0].view.tensors[body_output]
        empty = np.zeros((0, *t.shape), dtype=onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        return empty, empty
    rank = slices[0][0].ndim + 1
    ax = axis % rank
    return np.stack([a for a, _ in slices], axis=ax), np.stack([p for _, p in slices], axis=ax)
