"""Proof of a memory plan: a static check, and execution in one arena with onnxruntime.

Static proof (:func:`prove_plan`), independent of the planner's own code:

1. the plan's order names every node of the model once and is topological;
2. the plan holds exactly the model's arena tensors (every non-weight value;
   with ``io="external"`` graph inputs and outputs are left out), each with the
   model's dtype, shape and size;
3. every offset is a multiple of the plan's alignment and every tensor ends
   inside the arena;
4. lifetimes are recomputed from the graph and the plan's order (a value is
   live from its producer's step to its last reader's step, graph inputs from
   step 0, graph outputs to the end); a plan lifetime that misses a step where
   the value is live is an error;
5. members of one alias group lie in one buffer (``offset - group_offset``
   is the same for all), and a member may be written over bytes of another
   that is live then only when the write leaves those bytes as they are, or
   the writer reads it: a view (an op whose rule in ``onnxmem.aliasing.RULES``
   is ``view``) of a member at the output's bytes changes nothing; a Concat
   whose input is one contiguous run of the output (all dims before the axis
   1) and sits at that run changes nothing there; an op whose rule is
   ``inplace`` may write over an input it reads at an input the rule lists,
   at exactly the output's bytes, that dies at that step; any other op (one
   that reads neighbours: Conv, MatMul, Softmax, ...) never;
6. no two tensors of different groups that are live at one step share a byte;
7. shared-objects plans: tensors of one object sit at the object's offset,
   fit in it, and are never live at the same step unless they alias.

Execution (:func:`execute_plan`): the arena is one buffer filled with 0xFF.
Graph inputs are copied in at their offsets; weights (initializers, and the
outputs of constant nodes, computed once) stay outside the arena and are bound
as inputs. Each node runs as its own onnxruntime session (optimizations off,
one thread, no spinning) in the plan's order, its inputs and outputs bound by
IOBinding at ``arena_base + offset``. Per node: every input still holds the
bytes its producer wrote; each output landed at its bound address with the
planned shape; no live tensor that shares bytes with an output was changed by
the write (an in-place write over an input of the same alias group that dies
at this node is allowed). The first finding names the tensor, the node whose
write clobbered it and the byte range.

The reference is the same run without the arena: before each node runs in
the arena, its session runs once more with every value in a buffer of
onnxruntime's own (inputs from the previous reference outputs). Same
kernels, same order, same thread count, so a correct plan gives the same
bits; at the end each graph output must match its reference within
``atol + rtol * max|reference|`` (NaN and infinities exactly; integers equal).
An ordinary whole-model onnxruntime run is compared too, for information
only: its kernels may sum in another order, and its difference (scale-aware,
the same tolerance) is reported and noted, never a finding.

What it does not prove: a plan is checked for one set of input values; a
kernel that writes outside its bound outputs is caught only when a later
reader's bytes change.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .aliasing import RULES, alias_rule
from .errors import OnnxmemError, PlanError, RuntimeBackendError, ShapeError
from .graph import CONSTANT_OPS, GraphView, build_view
from .plan import MemoryPlan, PlannedTensor

__all__ = [
    "DEVICES",
    "VIEW_OPS",
    "Execution",
    "Finding",
    "OutputCheck",
    "VerifyOptions",
    "VerifyReport",
    "compute_weights",
    "execute_plan",
    "prove_plan",
    "read_inputs",
    "true_lifetimes",
    "verify_plan",
    "view_for_plan",
]

DEVICES = ("cpu", "cuda")

#: ops whose output holds the same bytes as their first input
VIEW_OPS = frozenset(op for (d, op), r in RULES.items() if r.kind == "view" and d == "")

SENTINEL = 0xFF
#: base alignment of the host arena (the CUDA allocator gives 256)
HOST_BASE_ALIGNMENT = 4096


@dataclass(frozen=True, slots=True)
class Finding:
    """One way the plan is wrong.

    ``kind``: ``order``, ``mismatch``, ``alignment``, ``arena``, ``lifetime``,
    ``alias``, ``overlap``, ``object`` (static); ``clobber``, ``address``,
    ``shape``, ``output`` (execution). ``tensor`` is the bad tensor, ``node``
    the node involved, ``byte_range`` arena bytes ``[lo, hi)``.
    """

    kind: str
    tensor: str | None
    message: str
    node: str | None = None
    other: str | None = None
    byte_range: tuple[int, int] | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """One graph output of the arena run against the per-node reference run.

    ``ok`` when ``max_abs_diff <= tolerance`` where ``tolerance = atol + rtol *
    max|reference|`` (integers and booleans: equal). ``identical``: bit for
    bit. ``whole_model_diff`` / ``whole_model_ok``: the same measure against
    one ordinary whole-model onnxruntime run, for information (kernels there
    may sum in another order); ``None`` when that run was not made.
    """

    name: str
    max_abs_diff: float
    ok: bool
    tolerance: float = 0.0
    identical: bool = False
    whole_model_diff: float | None = None
    whole_model_ok: bool | None = None


@dataclass(frozen=True, slots=True)
class Execution:
    """What running the plan showed; ``findings`` is empty when it held."""

    device: str
    findings: tuple[Finding, ...]
    outputs: tuple[OutputCheck, ...]
    nodes_run: int
    seconds: float  # the per-node loop in the arena
    reference_seconds: float  # one ordinary whole-model run
    changed_result: bool  # a graph output differs or a node failed
    notes: tuple[str, ...] = ()
    private_seconds: float = 0.0  # the same nodes run again on private buffers (the reference)


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """How to verify. ``inputs`` overrides the seeded random inputs."""

    device: str = "cpu"
    inputs: Mapping[str, np.ndarray] | None = None
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5
    execute: bool = True
    keep_going: bool = False  # run on after a clobber (to see whether results change)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    model: str
    static: tuple[Finding, ...]
    execution: Execution | None
    tensors: int
    nodes: int
    arena_size: int
    static_seconds: float
    warnings: tuple[str, ...] = ()

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.static + (self.execution.findings if self.execution else ())

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        f = self.findings
        return f[0] if f else None


# ------------------------------------------------------------------ static proof


def true_lifetimes(view: GraphView, order: Sequence[int]) -> dict[str, tuple[int, int, int | None]]:
    """``{value: (start, end, last_reader)}`` of every non-weight value under ``order``.

    ``[start, end)`` in steps; ``last_reader`` is the node index of the last
    step that reads the value (``None`` when nothing reads it).
    """
    horizon = max(len(order), 1)
    step = {op: k for k, op in enumerate(order)}
    last: dict[str, tuple[int, int]] = {}
    for k, op_index in enumerate(order):
        for name in view.ops[op_index].reads:
            last[name] = (k, op_index)
    outs = set(view.outputs)
    out: dict[str, tuple[int, int, int | None]] = {}
    for t in view.tensors.values():
        if t.kind == "weight":
            continue
        start = 0 if t.producer is None else step[t.producer]
        k, reader = last.get(t.name, (start, None))  # type: ignore[arg-type]
        end = horizon if t.name in outs else k + 1
        out[t.name] = (start, max(end, start + 1), reader)
    return out


def _order_findings(plan: MemoryPlan, view: GraphView) -> tuple[list[Finding], list[int]]:
    by_name = {op.name: op.index for op in view.ops}
    found: list[Finding] = []
    seen: set[str] = set()
    order: list[int] = []
    for name in plan.order:
        if name not in by_name:
            found.append(Finding("order", None, f"the plan orders node '{name}', which the model does not have", node=name))
        elif name in seen:
            found.append(Finding("order", None, f"the plan orders node '{name}' twice", node=name))
        else:
            seen.add(name)
            order.append(by_name[name])
    for op in view.ops:
        if op.name not in seen:
            found.append(Finding("order", None, f"node '{op.name}' ({op.op_type}) is missing from the plan's order", node=op.name))
    if found:
        return found, order
    step = {op: k for k, op in enumerate(order)}
    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        for name in op.reads:
            t = view.tensors.get(name)
            if t is None or t.producer is None:
                continue
            if step[t.producer] >= k:
                found.append(
                    Finding(
                        "order",
                        name,
                        f"the order is not topological: node '{op.name}' at step {k} reads '{name}', "
                        f"which node '{view.ops[t.producer].name}' writes at step {step[t.producer]}",
                        node=op.name,
                    )
                )
    return found, order


def prove_plan(plan: MemoryPlan, view: GraphView, *, limit: int | None = None) -> list[Finding]:
    """Every rule ``plan`` breaks for the model ``view``; empty means proven.

    See the module docstring for the rules. ``limit`` stops after that many.
    """
    found, order = _order_findings(plan, view)
    if found:
        return found[:limit] if limit else found
    names = [view.ops[i].name for i in order]

    def full() -> bool:
        return limit is not None and len(found) >= limit

    def done() -> list[Finding]:
        return found[:limit] if limit else found

    io_out = set(view.inputs) | set(view.outputs) if plan.io == "external" else set()
    expected = {t.name: t for t in view.activations() if t.name not in io_out}
    planned: dict[str, PlannedTensor] = {}
    for pt in plan.tensors:
        if pt.name in planned:
            found.append(Finding("mismatch", pt.name, f"tensor '{pt.name}' appears twice in the plan"))
        planned[pt.name] = pt
    for name, t in expected.items():
        got = planned.get(name)
        where = f"written by node '{view.ops[t.producer].name}'" if t.producer is not None else "a graph input"
        if got is None:
            found.append(Finding("mismatch", name, f"tensor '{name}' ({where}) is not in the plan; re-plan the model"))
        elif (got.dtype, tuple(got.shape), got.size) != (t.dtype, tuple(t.shape), t.size):
            found.append(
                Finding(
                    "mismatch",
                    name,
                    f"tensor '{name}' ({where}) is {t.dtype}{list(t.shape)} ({t.size} B) in the model but "
                    f"{got.dtype}{list(got.shape)} ({got.size} B) in the plan; re-plan with the same dims",
                )
            )
        if full():
            return done()
    for name in planned:
        if name not in expected:
            why = "a weight" if name in view.tensors else "not a value of the model"
            found.append(Finding("mismatch", name, f"plan tensor '{name}' is {why}; re-plan the model"))
    if found:
        return done()

    align = max(plan.alignment, 1)
    for pt in plan.tensors:
        if pt.offset % align:
            found.append(
                Finding("alignment", pt.name, f"tensor '{pt.name}' at offset {pt.offset} is not a multiple of the alignment {align}")
            )
        if pt.offset < 0 or pt.offset + pt.size > plan.arena_size:
            found.append(
                Finding(
                    "arena",
                    pt.name,
                    f"tensor '{pt.name}' occupies bytes [{pt.offset}, {pt.offset + pt.size}) beyond the arena of {plan.arena_size} B",
                    byte_range=(pt.offset, pt.offset + pt.size),
                )
            )
        if full():
            return done()

    life = true_lifetimes(view, order)
    for pt in plan.tensors:
        s, e, reader = life[pt.name]
        if pt.start > s:
            prod = names[s]
            found.append(
                Finding(
                    "lifetime",
                    pt.name,
                    f"tensor '{pt.name}' is written at step {s} (node '{prod}') but the plan starts its life at step {pt.start}",
                    node=prod,
                )
            )
        elif pt.end < e:
            who = f"node '{names[e - 1]}' reads it" if reader is not None else "it is live"
            found.append(
                Finding(
                    "lifetime",
                    pt.name,
                    f"tensor '{pt.name}' is live until step {e - 1} ({who} there) but the plan ends its life at step {pt.end}",
                    node=names[e - 1] if reader is not None else None,
                )
            )
        if full():
            return done()

    found.extend(_alias_findings(plan, view, order, life))
    if full():
        return done()
    found.extend(_overlap_findings(plan, view, names, life, limit=(limit - len(found)) if limit else None))
    if full():
        return done()
    if plan.form == "shared-objects":
        found.extend(_object_findings(plan, life))
    return done()


def _alias_findings(
    plan: MemoryPlan, view: GraphView, order: list[int], life: Mapping[str, tuple[int, int, int | None]]
) -> list[Finding]:
    groups: dict[str, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        groups.setdefault(pt.group, []).append(pt)
    found: list[Finding] = []
    for gid, members in groups.items():
        if len(members) < 2:
            continue
        bases = {m.offset - m.group_offset for m in members}
        if len(bases) > 1:
            found.append(
                Finding(
                    "alias",
                    members[1].name,
                    f"tensors of alias group '{gid}' must lie in one buffer (offset - group_offset the same) "
                    f"but start it at {sorted(bases)}",
                )
            )
            continue
        by_name = {m.name: m for m in members}
        for y in members:
            t = view.tensors[y.name]
            if t.producer is None or y.size == 0:
                continue
            s = life[y.name][0]
            op = view.ops[t.producer]
            lo, hi = y.offset, y.offset + y.size
            kept = _kept_bytes(view, op, y, by_name)
            rule = alias_rule(op)
            for x in members:
                if x.name == y.name or x.size == 0 or not (x.offset < hi and lo < x.offset + x.size):
                    continue  # other bytes of the group's buffer
                xs, xe, _ = life[x.name]
                if not (xs <= s < xe):
                    continue  # not live when y is written
                if xs == s and view.tensors[x.name].producer == t.producer:
                    found.append(
                        Finding("alias", y.name, f"outputs '{x.name}' and '{y.name}' of node '{op.name}' share bytes (group '{gid}')", node=op.name, other=x.name)
                    )
                    continue
                a, b = max(lo, x.offset), min(hi, x.offset + x.size)
                if any(klo <= a and b <= khi for klo, khi in kept):
                    continue  # a view, or a Concat over its own input: those bytes do not change
                dies = x.name in op.inputs and xe <= s + 1 and x.name not in view.outputs
                elementwise = (
                    rule is not None
                    and rule.kind == "inplace"
                    and all(j in rule.inputs and (x.offset, x.size) == (y.offset, y.size) for j, n in enumerate(op.inputs) if n == x.name)
                )
                if dies and elementwise:
                    continue  # written in place, element by element, over an input that dies here
                why = (
                    f"which is still live until step {xe - 1}"
                    if not dies
                    else f"but {op.op_type} may not write its output over that input in place "
                    "(it reads neighbours, reads it at another input, or the bytes differ)"
                )
                found.append(
                    Finding(
                        "alias",
                        x.name,
                        f"node '{op.name}' ({op.op_type}) writes '{y.name}' over '{x.name}' (alias group '{gid}'), {why}",
                        node=op.name,
                        other=y.name,
                    )
                )
    return found


def _concat_slices(view: GraphView, op: Any) -> list[int] | None:
    """Byte offset of each input of a Concat inside its output, when each input is one
    contiguous run of the output (every dim before the axis is 1); else ``None``."""
    if op.op_type != "Concat" or op.domain not in ("", "ai.onnx") or not op.outputs:
        return None
    out = view.tensors.get(op.outputs[0])
    ins = [view.tensors[n] for n in op.inputs if n in view.tensors]
    if out is None or len(ins) != len(op.inputs) or any(len(t.shape) != len(out.shape) for t in ins):
        return None
    numel = int(np.prod(out.shape, dtype=np.int64))
    if numel == 0 or out.size % numel:
        return None
    axes = {d for t in ins for d in range(len(out.shape)) if t.shape[d] != out.shape[d]}
    if len(axes) > 1 or (axes and int(np.prod(out.shape[: min(axes)], dtype=np.int64)) != 1):
        return None
    sizes = [int(np.prod(t.shape, dtype=np.int64)) * (out.size // numel) for t in ins]
    if sizes != [t.size for t in ins] or sum(sizes) != out.size:
        return None
    return [int(v) for v in np.cumsum([0] + sizes[:-1])]


def _kept_bytes(view: GraphView, op: Any, y: PlannedTensor, members: Mapping[str, PlannedTensor]) -> list[tuple[int, int]]:
    """Arena ranges inside ``y`` that ``op`` writes with the bytes already there: all of
    ``y`` for a view of a member at ``y``'s bytes; for a Concat, the slices whose
    input is a member sitting at that slice."""
    lo, hi = y.offset, y.offset + y.size
    rule = alias_rule(op)
    if rule is not None and rule.kind == "view":
        src = members.get(op.inputs[0]) if op.inputs else None
        return [(lo, hi)] if src is not None and (src.offset, src.size) == (y.offset, y.size) else []
    slices = _concat_slices(view, op)
    if slices is None:
        return []
    return [(lo + off, lo + off + members[n].size) for n, off in zip(op.inputs, slices)
            if n in members and members[n].offset == lo + off and members[n].size == view.tensors[n].size]


def _overlap_findings(
    plan: MemoryPlan,
    view: GraphView,
    names: list[str],
    life: Mapping[str, tuple[int, int, int | None]],
    *,
    limit: int | None,
) -> list[Finding]:
    tensors = [pt for pt in plan.tensors if pt.size > 0]
    if not tensors:
        return []
    start = np.array([life[t.name][0] for t in tensors], dtype=np.int64)
    end = np.array([life[t.name][1] for t in tensors], dtype=np.int64)
    off = np.array([t.offset for t in tensors], dtype=np.int64)
    size = np.array([t.size for t in tensors], dtype=np.int64)
    gid = {g: i for i, g in enumerate(sorted({t.group for t in tensors}))}
    group = np.array([gid[t.group] for t in tensors], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    hi = np.searchsorted(start[order], end[order], side="left")
    found: list[Finding] = []
    for pos in range(len(order)):
        if hi[pos] <= pos + 1:
            continue
        i = int(order[pos])
        cand = order[pos + 1 : hi[pos]]
        clash = (off[cand] < off[i] + size[i]) & (off[i] < off[cand] + size[cand]) & (group[cand] != group[i])
        for j in cand[clash]:
            a, b = tensors[i], tensors[int(j)]
            if (life[b.name][0], b.name) < (life[a.name][0], a.name):
                a, b = b, a
            lo_t, hi_t = max(life[a.name][0], life[b.name][0]), min(life[a.name][1], life[b.name][1])
            lo, hi_b = max(a.offset, b.offset), min(a.offset + a.size, b.offset + b.size)
            writer = view.tensors[b.name].producer
            wname = view.ops[writer].name if writer is not None else "(graph input)"
            found.append(
                Finding(
                    "overlap",
                    b.name,
                    f"tensors '{a.name}' and '{b.name}' (written by node '{wname}') are both live in steps "
                    f"[{lo_t}, {hi_t}) (nodes '{names[lo_t]}' to '{names[hi_t - 1]}') and share bytes [{lo}, {hi_b})",
                    node=wname,
                    other=a.name,
                    byte_range=(int(lo), int(hi_b)),
                )
            )
            if limit is not None and len(found) >= limit:
                return found
    return found


def _object_findings(plan: MemoryPlan, life: Mapping[str, tuple[int, int, int | None]]) -> list[Finding]:
    objs = {o.id: o for o in plan.objects}
    found: list[Finding] = []
    members: dict[int, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        if pt.object is None:
            found.append(Finding("object", pt.name, f"tensor '{pt.name}' has no shared object in a shared-objects plan"))
            continue
        o = objs.get(pt.object)
        if o is None:
            found.append(Finding("object", pt.name, f"tensor '{pt.name}' names shared object {pt.object}, which the plan lacks"))
            continue
        if pt.offset - pt.group_offset != o.offset or pt.group_offset + pt.size > o.size:
            found.append(
                Finding(
                    "object",
                    pt.name,
                    f"tensor '{pt.name}' ({pt.size} B at {pt.offset}) does not sit inside its object {o.id} "
                    f"({o.size} B at {o.offset})",
                )
            )
        members.setdefault(pt.object, []).append(pt)
    for oid, ms in members.items():
        ms = sorted(ms, key=lambda m: life[m.name][0])
        for i, a in enumerate(ms):
            for b in ms[i + 1 :]:
                if life[b.name][0] >= life[a.name][1]:
                    continue
                if a.group != b.group:
                    found.append(
                        Finding(
                            "object",
                            b.name,
                            f"tensors '{a.name}' and '{b.name}' share object {oid} but are both live at step {life[b.name][0]}",
                            other=a.name,
                        )
                    )
    return found


# ------------------------------------------------------------------ execution


def view_for_plan(model: onnx.ModelProto, plan: MemoryPlan, model_path: str | os.PathLike[str] | None) -> GraphView:
    """The graph view at the plan's dims (measured shapes when inference cannot say)."""
    from .model import infer_shapes

    dims = dict(plan.dims)
    ishapes = {k: tuple(v) for k, v in plan.input_shapes.items()}
    try:
        shapes = infer_shapes(model, dims=dims, input_shapes=ishapes, model_path=model_path)
    except ShapeError:
        shapes = infer_shapes(model, dims=dims, input_shapes=ishapes, measure=True, model_path=model_path)
    return build_view(model, shapes)


def _weight_ops(view: GraphView) -> list[int]:
    return [
        op.index
        for op in view.ops
        if op.op_type in CONSTANT_OPS
        and any(o and view.tensors.get(o) is not None and view.tensors[o].kind == "weight" for o in op.outputs)
    ]


def compute_weights(model: onnx.ModelProto, view: GraphView) -> dict[str, np.ndarray]:
    """Every weight the graph reads: initializers, and constant-node outputs computed once.

    ``model`` must carry its weight data (see ``runtime.load_with_weights``).
    """
    from onnx import numpy_helper

    from .runtime import make_session

    out: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if init.name in view.tensors or init.name in view.consumers:
            out[init.name] = numpy_helper.to_array(init)
    ops = _weight_ops(view)
    if not ops:
        return out
    g = onnx.GraphProto()
    g.name = "weights"
    need: dict[str, None] = {}
    for i in ops:
        node = model.graph.node[i]
        g.node.add().CopyFrom(node)
        for n in node.input:
            if n:
                need.setdefault(n, None)
    made = {o for i in ops for o in model.graph.node[i].output if o}
    for n in need:
        if n not in made:
            g.initializer.append(numpy_helper.from_array(out[n], n))
    for o in sorted(made):
        t = view.tensors.get(o)
        if t is None:
            continue
        g.output.append(onnx.helper.make_tensor_value_info(o, t.elem_type, list(t.shape)))
    m = _model_like(model, g)
    sess = make_session(m)
    names = [o.name for o in sess.get_outputs()]
    for n, v in zip(names, sess.run(names, {})):
        out[n] = np.asarray(v)
    return out


def fold_weights(model: onnx.ModelProto, view: GraphView, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose constant-node weights are initializers (the graph we plan).

    A folded weight that no remaining node reads and that is no graph output
    is dropped. Below IR version 4 every initializer must also be a graph
    input, so each new initializer gets one there (onnxruntime refuses the
    graph otherwise); the IR version is kept.
    """
    from onnx import numpy_helper

    drop = set(_weight_ops(view))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [n for i, n in enumerate(model.graph.node) if i not in drop]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    have = {i.name for i in m.graph.initializer}
    read = {n for node in keep for n in _node_reads(node)} | {o.name for o in m.graph.output}
    legacy = m.ir_version < 4
    for i in sorted(drop):
        for o in model.graph.node[i].output:
            if o and o not in have and o in weights and o in read:
                arr = np.require(weights[o], requirements="C")
                m.graph.initializer.append(numpy_helper.from_array(arr, o))
                have.add(o)
                if legacy:
                    elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
                    m.graph.input.append(onnx.helper.make_tensor_value_info(o, elem, list(arr.shape)))
    return m


def _node_reads(node: onnx.NodeProto) -> set[str]:
    """Names ``node`` reads: its inputs and, through If/Loop/Scan bodies, outer-scope values."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for inner in g.node:
                names |= _node_reads(inner)
    return names


def _model_like(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    m.graph.CopyFrom(graph)
    return m


def read_inputs(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, by name."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except FileNotFoundError:
        raise OnnxmemError(f"--inputs '{path}' does not exist") from None
    except (OSError, ValueError) as exc:
        raise OnnxmemError(f"--inputs '{path}' is not an .npz file of arrays: {exc}") from None


class _HostArena:
    """The arena as one host buffer, filled with the sentinel."""

    device_type = "cpu"

    def __init__(self, size: int) -> None:
        self._raw = np.full(size + HOST_BASE_ALIGNMENT, SENTINEL, dtype=np.uint8)
        shift = (-self._raw.ctypes.data) % HOST_BASE_ALIGNMENT
        self.view = self._raw[shift : shift + size]
        self.base = int(self.view.ctypes.data) if size else int(self._raw.ctypes.data) + shift

    def read(self, offset: int, size: int) -> np.ndarray:
        return self.view[offset : offset + size].copy()

    def write(self, offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.view[offset : offset + flat.size] = flat


class _CudaArena:
    """The arena as one CUDA allocation; bytes move through an Identity session."""

    device_type = "cuda"

    def __init__(self, size: int, ort: Any) -> None:
        n = max(size, 1)
        self._ov = ort.OrtValue.ortvalue_from_shape_and_type([n], np.uint8, "cuda", 0)
        self._ov.update_inplace(np.full(n, SENTINEL, dtype=np.uint8))
        self.base = int(self._ov.data_ptr())
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, ["n"])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, ["n"])
        g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "copy", [x], [y])
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
        from .runtime import session_options

        self._copy = ort.InferenceSession(
            m.SerializeToString(), sess_options=session_options(), providers=["CUDAExecutionProvider"]
        )

    def _move(self, src: tuple[str, int], dst: tuple[str, int], size: int) -> None:
        if size == 0:
            return
        b = self._copy.io_binding()
        b.bind_input("x", src[0], 0, np.uint8, [size], src[1])
        b.bind_output("y", dst[0], 0, np.uint8, [size], dst[1])
        self._copy.run_with_iobinding(b)
        b.synchronize_outputs()

    def read(self, offset: int, size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.uint8)
        self._move(("cuda", self.base + offset), ("cpu", int(out.ctypes.data)), size)
        return out

    def write(self, offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._move(("cpu", int(flat.ctypes.data)), ("cuda", self.base + offset), int(flat.size))


def _cuda_or_fail(ort: Any) -> None:
    """Raise a one-line error when onnxruntime's CUDA provider cannot run here."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeBackendError(
            "--device cuda: this onnxruntime has no CUDA provider; install onnxruntime-gpu or use --device cpu"
        )
    try:
        ort.set_default_logger_severity(4)
        ort.OrtValue.ortvalue_from_shape_and_type([1], np.uint8, "cuda", 0)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuntimeBackendError(
            f"--device cuda: onnxruntime's CUDA provider cannot run here ({first.rsplit(') ', 1)[-1][:160]}); use --device cpu"
        ) from None
    finally:
        from .runtime import LOG_SEVERITY

        ort.set_default_logger_severity(LOG_SEVERITY)


def cuda_available() -> bool:
    """Whether onnxruntime's CUDA provider can allocate on a GPU here."""
    import onnxruntime as ort

    try:
        _cuda_or_fail(ort)
    except RuntimeBackendError:
        return False
    return True


def _on_host(meminfo: Any) -> bool:
    name = str(getattr(meminfo, "name", ""))
    mem = str(getattr(meminfo, "mem_type", ""))
    return name == "Cpu" or mem.endswith(("CPU_INPUT", "CPU_OUTPUT", "CPU"))


@dataclass(slots=True)
class _Slot:
    """Where one tensor lives during execution."""

    name: str
    home: str  # "arena", "host" (CUDA: the host mirror) or "private" (io external)
    offset: int
    size: int
    elem_type: int
    shape: tuple[int, ...]
    group: str
    end: int  # last step it is needed (exclusive)
    private: np.ndarray | None = None


@dataclass(slots=True)
class _Run:
    findings: list[Finding] = field(default_factory=list)
    saved: dict[str, np.ndarray] = field(default_factory=dict)
    written_by: dict[str, str] = field(default_factory=dict)


def execute_plan(
    plan: MemoryPlan,
    model: onnx.ModelProto,
    view: GraphView,
    *,
    options: VerifyOptions | None = None,
    model_path: str | os.PathLike[str] | None = None,
) -> Execution:
    """Run ``model`` node by node inside one arena laid out by ``plan``.

    ``plan`` must name ``view``'s nodes (run :func:`prove_plan` first); raises
    ``RuntimeBackendError`` when onnxruntime cannot run a node.
    """
    import onnxruntime as ort

    from .runtime import load_with_weights, session_options

    opts = options or VerifyOptions()
    if opts.device not in DEVICES:
        raise OnnxmemError(f"--device '{opts.device}' is not one of {', '.join(DEVICES)}")
    cuda = opts.device == "cuda"
    if cuda:
        _cuda_or_fail(ort)
    by_name = {op.name: op.index for op in view.ops}
    try:
        order = [by_name[n] for n in plan.order]
    except KeyError as exc:
        raise PlanError(f"the plan orders node {exc}, which the model does not have; re-plan the model") from None
    full = load_with_weights(model, model_path)
    weights = compute_weights(full, view)
    feeds = _feeds(full, view, opts)
    life = true_lifetimes(view, order)

    arena: Any = _CudaArena(plan.arena_size, ort) if cuda else _HostArena(plan.arena_size)
    mirror = _HostArena(plan.arena_size) if cuda else arena
    slots: dict[str, _Slot] = {}
    for pt in plan.tensors:
        t = view.tensors[pt.name]
        slots[pt.name] = _Slot(pt.name, "arena", pt.offset, pt.size, t.elem_type, t.shape, pt.group, life[pt.name][1])
    for name, (_s, e, _r) in life.items():
        if name not in slots:  # io external: the caller's buffers
            t = view.tensors[name]
            buf = np.zeros(max(t.size, 1), dtype=np.uint8)
            slots[name] = _Slot(name, "private", 0, t.size, t.elem_type, t.shape, name, e, buf)

    def mem(slot: _Slot) -> Any:
        return mirror if slot.home == "host" else arena

    def addr(slot: _Slot) -> int:
        if slot.private is not None:
            return int(slot.private.ctypes.data)
        return int(mem(slot).base) + slot.offset

    def read(slot: _Slot) -> np.ndarray:
        if slot.private is not None:
            return slot.private[: slot.size].copy()
        return mem(slot).read(slot.offset, slot.size)  # type: ignore[no-any-return]

    run = _Run()
    for name, arr in feeds.items():
        slot = slots.get(name)
        if slot is None:
            continue
        data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        if slot.private is not None:
            slot.private[: data.size] = data
        else:
            mem(slot).write(slot.offset, data)
            if cuda:
                mirror.write(slot.offset, data)
        run.saved[name] = data.copy()
        run.written_by[name] = "(graph input)"

    so = session_options()
    providers: list[Any] = ["CPUExecutionProvider"]
    if cuda:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        providers = ["CUDAExecutionProvider"]
    ov_host: dict[str, Any] = {}
    ov_dev: dict[str, Any] = {}

    def weight_value(name: str, host: bool) -> Any:
        cache = ov_host if (host or not cuda) else ov_dev
        if name not in cache:
            # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
            arr = np.require(weights[name], requirements="C")
            cache[name] = ort.OrtValue.ortvalue_from_numpy(arr, "cpu" if cache is ov_host else "cuda", 0)
        return cache[name]

    weight_ops = set(_weight_ops(view))
    history: list[tuple[int, str, list[_Slot]]] = []  # (step, node, outputs written)
    live: dict[str, _Slot] = {n: slots[n] for n in run.saved}
    # the per-node reference: the same sessions, every value in its own
    # onnxruntime buffer; graph inputs on the host (the binding copies them)
    private: dict[str, Any] = {
        n: ort.OrtValue.ortvalue_from_numpy(np.require(a, requirements="C"), "cpu", 0) for n, a in feeds.items()
    }
    private_seconds = 0.0
    nodes_run = 0
    changed = False
    notes: list[str] = []
    t0 = time.perf_counter()
    for k, op_index in enumerate(order):
        if op_index in weight_ops:
            continue
        op = view.ops[op_index]
        node = full.graph.node[op_index]
        # 1. every input still holds its producer's bytes
        for name in op.reads:
            if name in weights or name not in slots:
                continue
            slot = slots[name]
            if name not in run.saved:
                continue
            now = read(slot)
            if not np.array_equal(now, run.saved[name]):
                run.findings.append(_clobber(slot, now, run.saved[name], op.name, history, "before it runs"))
                if not opts.keep_going:
                    return _done(opts, run, (), nodes_run, t0, 0.0, False, notes)
        # 2. run the node with everything bound in the arena
        sess = _node_session(ort, full, node, op, {n: slots[n].shape for n in op.reads if n in slots}, view, so, providers)
        in_host = [not cuda] * len(op.reads)
        if cuda:  # tensors the CUDA provider keeps on the host live in the host mirror
            in_host = [_on_host(m) for m in sess.get_input_memory_infos()]
            for o, host in zip([o for o in node.output if o], [_on_host(m) for m in sess.get_output_memory_infos()]):
                if host and slots[o].home == "arena":
                    slots[o].home = "host"
        outs = [o for o in node.output if o]
        # the same node on private buffers first: what the arena run must reproduce
        t_ref = time.perf_counter()
        try:
            ref_binding = sess.io_binding()
            for i, name in enumerate(op.reads):
                if name in weights:
                    ref_binding.bind_ortvalue_input(name, weight_value(name, in_host[i]))
                else:
                    ref_binding.bind_ortvalue_input(name, private[name])
            for o in outs:
                ref_binding.bind_output(o, "cpu" if (slots[o].home != "arena" or not cuda) else "cuda", 0)
            sess.run_with_iobinding(ref_binding)
            if cuda:
                ref_binding.synchronize_outputs()
            private.update(zip(outs, ref_binding.get_outputs()))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeBackendError(f"onnxruntime failed to run node '{op.name}' ({op.op_type}): {first[:300]}") from None
        private_seconds += time.perf_counter() - t_ref

        def bind(preallocated: bool) -> Any:
            binding = sess.io_binding()  # noqa: B023 - used at once
            for i, name in enumerate(op.reads):  # noqa: B023
                if name in weights:
                    binding.bind_ortvalue_input(name, weight_value(name, in_host[i]))  # noqa: B023
                    continue
                s = slots[name]
                if cuda and in_host[i] and s.home == "arena" and name in feeds:  # noqa: B023
                    # a graph input read on the host: its copy in the host mirror
                    binding.bind_input(name, "cpu", 0, s.elem_type, list(s.shape), mirror.base + s.offset)
                    continue
                dev = "cpu" if (s.home != "arena" or not cuda) else "cuda"
                binding.bind_input(name, dev, 0, s.elem_type, list(s.shape), addr(s))
            for o in outs:  # noqa: B023
                s = slots[o]
                dev = "cpu" if (s.home != "arena" or not cuda) else "cuda"
                if preallocated:
                    binding.bind_output(o, dev, 0, s.elem_type, list(s.shape), addr(s))
                else:
                    binding.bind_output(o, dev, 0)
            sess.run_with_iobinding(binding)  # noqa: B023
            if cuda:
                binding.synchronize_outputs()
            return binding

        try:
            try:
                binding = bind(True)
            except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
                if "computed output shape" not in str(exc):
                    raise
                # the planned shape differs from the computed one: learn it in
                # onnxruntime's own buffers, keep it when the bytes are the same
                for o, val in zip(outs, bind(False).get_outputs()):
                    real = tuple(int(d) for d in val.shape())
                    s = slots[o]
                    if real != tuple(s.shape):
                        if int(val.tensor_size_in_bytes()) != s.size:
                            run.findings.append(
                                Finding("shape", o, f"node '{op.name}' computes '{o}' with shape {list(real)} "
                                        f"({val.tensor_size_in_bytes()} B); the plan has {list(s.shape)} ({s.size} B)",
                                        node=op.name)
                            )
                        else:
                            notes.append(f"'{o}' runs with shape {list(real)}; the plan has {list(s.shape)} (same bytes)")
                            s.shape = real
                if run.findings:
                    return _done(opts, run, (), nodes_run, t0, 0.0, True, notes)
                binding = bind(True)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if run.findings:  # running on after a clobber: garbage in
                changed = True
                break
            raise RuntimeBackendError(f"onnxruntime failed to run node '{op.name}' ({op.op_type}): {first[:300]}") from None
        nodes_run += 1
        # 3. the outputs landed at their bound addresses, with the planned shapes
        for o, val in zip(outs, binding.get_outputs()):
            s = slots[o]
            if s.size and int(val.data_ptr()) != addr(s):
                run.findings.append(
                    Finding("address", o, f"node '{op.name}' wrote '{o}' at {val.data_ptr():#x}, not at its bound address {addr(s):#x}", node=op.name)
                )
            if tuple(val.shape()) != tuple(s.shape):
                run.findings.append(
                    Finding("shape", o, f"node '{op.name}' produced '{o}' with shape {list(val.shape())}; the plan says {list(s.shape)}", node=op.name)
                )
        # 4. the write changed no live tensor it must not change
        written = [slots[o] for o in outs]
        for w in written:
            if w.private is not None or w.size == 0:
                continue
            for name, s in list(live.items()):
                if name in outs or s.private is not None or s.home != w.home:
                    continue
                lo, hi = max(s.offset, w.offset), min(s.offset + s.size, w.offset + w.size)
                if lo >= hi:
                    continue
                if s.group == w.group and s.end <= k + 1 and name in op.reads and name not in view.outputs:
                    continue  # in place over an input that dies here
                now = read(s)
                if not np.array_equal(now, run.saved[name]):
                    run.findings.append(_clobber(s, now, run.saved[name], op.name, history, "", writer_out=w.name))
        history.append((k, op.name, written))
        if run.findings and not opts.keep_going:
            return _done(opts, run, (), nodes_run, t0, 0.0, False, notes)
        for s in written:
            run.saved[s.name] = read(s)
            run.written_by[s.name] = op.name
            live[s.name] = s
        for name in [n for n, s in live.items() if s.end <= k + 1]:
            del live[name]
            run.saved.pop(name, None)
            if name not in view.outputs:
                private.pop(name, None)
    seconds = time.perf_counter() - t0 - private_seconds

    # 5. the graph outputs against the per-node reference (same kernels, private
    # buffers: any difference is the plan's), and, for information, against an
    # ordinary whole-model run (other kernels' summation order)
    got: dict[str, np.ndarray] = {}
    mine: dict[str, np.ndarray] = {}
    for name in view.outputs:
        if name in weights:
            got[name] = mine[name] = weights[name]
            continue
        if name in private:
            mine[name] = np.asarray(private[name].numpy())
        if name in slots and not changed:
            s = slots[name]
            got[name] = read(s).view(_np_dtype(s.elem_type)).reshape(s.shape)
    t1 = time.perf_counter()
    whole = _reference(full, feeds, view.outputs)
    ref_seconds = time.perf_counter() - t1
    checks: list[OutputCheck] = []
    for name in view.outputs:
        if name not in got or name not in mine:
            checks.append(OutputCheck(name, float("inf"), False))
            continue
        c = _compare(name, got[name], mine[name], opts.rtol, opts.atol)
        wm = _compare(name, got[name], whole[name], opts.rtol, opts.atol)
        checks.append(dataclasses.replace(c, whole_model_diff=wm.max_abs_diff, whole_model_ok=wm.ok))
        if not wm.ok and c.ok:
            notes.append(
                f"graph output '{name}' differs from an ordinary whole-model onnxruntime run by {wm.max_abs_diff:.3g} "
                f"(tolerance {wm.tolerance:.3g}) while it matches the same kernels run outside the arena: "
                "the kernels differ, not the plan"
            )
    bad = [c for c in checks if not c.ok]
    changed = changed or bool(bad)
    if bad:
        c = bad[0]
        run.findings.append(
            Finding(
                "output",
                c.name,
                f"graph output '{c.name}' differs from the same nodes run outside the arena: max |diff| "
                f"{c.max_abs_diff:.3g} > {c.tolerance:.3g} (atol {opts.atol:g} + rtol {opts.rtol:g} x max |output|)",
            )
        )
    return Execution(opts.device, tuple(run.findings), tuple(checks), nodes_run, seconds, ref_seconds, changed,
                     tuple(notes), private_seconds)


def _done(opts: VerifyOptions, run: _Run, outputs: tuple[OutputCheck, ...], nodes_run: int, t0: float,
          ref_seconds: float, changed: bool, notes: list[str]) -> Execution:
    return Execution(opts.device, tuple(run.findings), outputs, nodes_run, time.perf_counter() - t0, ref_seconds,
                     changed, tuple(notes))


def _clobber(slot: _Slot, now: np.ndarray, before: np.ndarray, at_node: str,
             history: list[tuple[int, str, list[_Slot]]], when: str, writer_out: str | None = None) -> Finding:
    diff = np.flatnonzero(now != before)
    lo, hi = slot.offset + int(diff[0]), slot.offset + int(diff[-1]) + 1
    writer = at_node
    if writer_out is None:  # found before a node ran: the last earlier write over these bytes
        writer = "(unknown)"
        for _k, name, outs in reversed(history):
            if any(o.home == slot.home and o.offset < hi and lo < o.offset + o.size for o in outs):
                writer, writer_out = name, next(o.name for o in outs if o.offset < hi and lo < o.offset + o.size)
                break
    by = f" (output '{writer_out}')" if writer_out else ""
    return Finding(
        "clobber",
        slot.name,
        f"tensor '{slot.name}' was overwritten by node '{writer}'{by} at arena bytes [{lo}, {hi}) "
        f"while still live{(' (' + when + ' of ' + repr(at_node) + ')') if when else ''}",
        node=writer,
        other=writer_out,
        byte_range=(lo, hi),
    )


def _np_dtype(elem_type: int) -> Any:
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type)


def _feeds(model: onnx.ModelProto, view: GraphView, opts: VerifyOptions) -> dict[str, np.ndarray]:
    from .runtime import random_inputs

    shapes = {n: view.tensors[n].shape for n in view.inputs}
    if opts.inputs is None:
        return random_inputs(model, shapes, opts.seed)
    feeds: dict[str, np.ndarray] = {}
    for n in view.inputs:
        if n not in opts.inputs:
            raise OnnxmemError(f"--inputs has no array '{n}' for graph input '{n}'; add it to the .npz")
        arr = np.asarray(opts.inputs[n])
        t = view.tensors[n]
        want = np.dtype(_np_dtype(t.elem_type))
        if arr.dtype != want or tuple(arr.shape) != tuple(t.shape):
            raise OnnxmemError(
                f"--inputs array '{n}' is {arr.dtype}{list(arr.shape)}; the plan has {want}{list(t.shape)}"
            )
        feeds[n] = arr
    return feeds


def _node_session(ort: Any, model: onnx.ModelProto, node: onnx.NodeProto, op: Any,
                  shapes: Mapping[str, tuple[int, ...]], view: GraphView, so: Any, providers: list[Any]) -> Any:
    g = onnx.GraphProto()
    g.name = "node"
    g.node.add().CopyFrom(node)
    for name in op.reads:
        t = view.tensors[name]
        g.input.append(onnx.helper.make_tensor_value_info(name, t.elem_type, list(shapes.get(name, t.shape))))
    for o in node.output:
        if o:  # the dtype only: the kernel computes the shape, the binding checks it
            g.output.append(onnx.helper.make_tensor_value_info(o, view.tensors[o].elem_type, None))
    data = _model_like(model, g).SerializeToString()
    try:
        return ort.InferenceSession(data, sess_options=so, providers=providers)
    except Exception as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuntimeBackendError(f"onnxruntime cannot load node '{op.name}' ({op.op_type}) alone: {first}") from None


def _reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
    from .runtime import make_session

    sess = make_session(model)
    try:
        vals = sess.run(list(outputs), dict(feeds))
    except Exception as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0]
        raise RuntimeBackendError(f"onnxruntime failed to run the whole model: {first}") from None
    return {n: np.asarray(v) for n, v in zip(outputs, vals)}


def _compare(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> OutputCheck:
    """``got`` against ``ref`` on the scale of ``ref``.

    Floats: ``max |got - ref| <= atol + rtol * max |ref|`` over the finite
    values of ``ref`` (NaN and infinities must match exactly); an element-wise
    tolerance would fail outputs whose large entries differ in the last bits.
    Integers and booleans: equal.
    """
    if got.shape != ref.shape:
        return OutputCheck(name, float("inf"), False)
    identical = got.dtype == ref.dtype and np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(ref).tobytes()
    if np.issubdtype(ref.dtype, np.floating):
        g64, r64 = got.astype(np.float64), ref.astype(np.float64)
        same = (g64 == r64) | (np.isnan(g64) & np.isnan(r64))
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.where(same, 0.0, np.abs(g64 - r64))
        d = np.where(np.isnan(d), np.inf, d)
        diff = float(d.max(initial=0.0))
        finite = np.abs(r64[np.isfinite(r64)])
        tol = atol + rtol * float(finite.max(initial=0.0))
        return OutputCheck(name, diff, diff <= tol, tol, identical)
    eq = np.array_equal(got, ref)
    diff = 0.0 if eq else float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(initial=0.0))
    return OutputCheck(name, diff, eq, 0.0, identical)


# ------------------------------------------------------------------ both


def verify_plan(
    model: onnx.ModelProto,
    plan: MemoryPlan,
    *,
    model_path: str | os.PathLike[str] | None = None,
    view: GraphView | None = None,
    options: VerifyOptions | None = None,
) -> VerifyReport:
    """Prove ``plan`` for ``model`` statically, then (unless it failed) by execution."""
    opts = options or VerifyOptions()
    t0 = time.perf_counter()
    v = view if view is not None else view_for_plan(model, plan, model_path)
    static = tuple(prove_plan(plan, v))
    static_s = time.perf_counter() - t0
    warnings: list[str] = []
    if opts.device == "cuda" and plan.alignment % 256:
        warnings.append(
            f"the plan aligns offsets to {plan.alignment} B; CUDA kernels expect 256: re-plan with --alignment 256"
        )
    execution = None
    if opts.execute and not static:
        execution = execute_plan(plan, model, v, options=opts, model_path=model_path)
    return VerifyReport(
        model=str(model_path) if model_path is not None else "",
        static=static,
        execution=execution,
        tensors=len(plan.tensors),
        nodes=len(plan.order),
        arena_size=plan.arena_size,
        static_seconds=static_s,
        warnings=tuple(warnings),
    )

