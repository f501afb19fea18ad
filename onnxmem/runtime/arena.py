"""Execution of a memory plan in one arena with onnxruntime, node by node.

:class:`ArenaRun` carries out the procedure; each step is one method
(:class:`onnxmem.runtime.arena_steps.ArenaSteps` holds those of nodes without
bodies; the arena's memory and the tensors' slots are in
:mod:`onnxmem.runtime.arena_buffers`, the options and results in
:mod:`onnxmem.runtime.arena_records`).

Before the first node (:meth:`ArenaRun.__init__`):

* every tensor's buffer, and its value at the view's shape, must lie inside the
  arena (:func:`onnxmem.runtime.arena_buffers.arena_slots`: ``PlanInvalid`` before
  anything is bound; a kernel bound past the arena's end would write memory that is
  not the arena's);
* the arena is checked against the memory there is (host: ``MemAvailable``
  of ``/proc/meminfo``; CUDA: the device's free memory, and the host mirror
  of the same size), then allocated as one buffer filled with the sentinel
  0xFF;
* weights (initializers, and the outputs of constant nodes, computed once)
  stay outside the arena and are bound as inputs
  (:func:`onnxmem.runtime.folding.compute_weights`);
* graph inputs are copied in at their offsets (:meth:`ArenaRun.load_inputs`);
* on the CPU, for a graph without bodies or random ops, the reference: the whole
  model run once by onnxruntime outside the arena, every value of the graph an
  output (:meth:`ArenaRun.run_reference`), optimizations and prepacking off, one
  thread, so each node runs the kernel it runs alone, on the same inputs, and each
  value has the bits the node's own session computes; it runs in pieces of
  consecutive nodes, each when its values are first asked for
  (:class:`onnxmem.runtime.reference.PieceReference`). Where a core is spare
  (:func:`onnxmem.runtime.ahead.spare_core`, or ``ExecutionOptions.beside``) it runs
  on a thread of its own while the nodes run in the arena (:meth:`ArenaRun.run_ahead`: steps 1 and 4
  to 7, each output bound at its planned shape, which onnxruntime holds the kernel
  to); that reference gives the graph outputs and the values passed from one piece to
  the next alone; step 3 follows for every node run once the reference ends (for the
  values it gave), and where a node failed to run or a planned shape does
  not hold, the arena goes back to the sentinel and the run starts again step by
  step, so the findings and notes are those of the run below (so too where a
  node fails to run in the reference: its piece is cut into pieces of one node, and
  the run step by step finds what the nodes before it hold before it fails).
  That run ahead writes the values of shape arithmetic (small values computed from shapes
  and weights alone: Shape, Gather, Unsqueeze, Cast, ...,
  :func:`onnxmem.runtime.arena_buffers.handed`) at their offsets from the reference, which
  hands each over as its piece ends, instead of running their nodes in the arena: the same
  bytes at the same offsets at the same step, each input checked as it is read (step 1) and
  each write against every live value (step 6). onnxruntime's own session folds those nodes
  away; verify's reference still runs each of them with its kernel. A value whose shape or
  type is not the plan's, or that the reference cannot give, sends the run step by step.

Then each node, in the plan's order, runs as its own onnxruntime session
(optimizations off, one thread, no spinning):

1. :meth:`~ArenaRun.check_inputs`: every input still holds the bytes its
   producer wrote;
2. :meth:`~ArenaRun.run_private`: the node's values of the whole-model
   reference, or, where there is none (CUDA, whose kernels are not the CPU's; a
   graph with bodies; a random op, which draws other numbers in a second kernel;
   training graphs; ``reference="nodes"``), the node runs once more with every
   value in a buffer of onnxruntime's own (inputs from the previous private
   outputs): the reference, and the shapes the kernel computes; a node of shape
   arithmetic of the main graph takes its values from one CPU run of those
   nodes alone instead, and they are written at its step 4
   (:mod:`onnxmem.runtime.handover`);
3. :meth:`~ArenaRun.check_shapes`: a computed shape that differs from the
   plan's is a finding unless it has the same bytes (then it is noted and
   used);
4. :meth:`~ArenaRun.run_in_arena`: the node runs with its inputs and outputs
   bound by IOBinding at ``arena_base + offset`` (a random op in a fresh session,
   seeded where the model gives no seed, so it draws what step 2 drew);
5. :meth:`~ArenaRun.check_outputs`: each output landed at its bound address
   with the planned shape;
6. :meth:`~ArenaRun.check_write`: no live tensor that shares bytes with an
   output was changed by the write (an in-place write over an input of the
   same alias group that dies at this node is allowed);
7. :meth:`~ArenaRun.retire`: values that die at this step are dropped.

A node with bodies (:meth:`~ArenaRun.run_bodies`) runs them the same way,
node by node in the arena, each body as a :class:`_BodyRun` over its planned
tensors (inside the node's region): the If branch its condition chooses
(writing its outputs at the If's outputs when the plan says ``outputs: owner``);
every Loop iteration (iteration number, condition and carried values copied
into the body's carried slots first, the body's outputs read back after,
scan outputs stacked); every Scan step (state and slices in, state and
output slices back). No body tensor is allocated by onnxruntime. A body's
writes are checked against every value live in it and in the graphs
around it.

After the last node, :meth:`~ArenaRun.compare_outputs`: each graph output
must match the reference within ``atol + rtol * max|reference|`` (NaN and
infinities exactly; integers equal): same kernels, same thread count, so a
correct plan gives the same bits. Where each node ran again, an ordinary
whole-model onnxruntime run is compared too, for information only: its kernels
may sum in another order, and its difference is noted, never a finding.

The first finding names the tensor, the node whose write clobbered it and the
byte range; with ``keep_going`` the run goes on to show whether the results
change. What it does not prove: a plan is checked for one set of input
values; a kernel that writes outside its bound outputs is caught only when a
later reader's bytes change.
"""

from __future__ import annotations

import os
import time
from collections import ChainMap
from typing import Any

import numpy as np
import onnx

import onnxmem.runtime.ahead as ahead
import onnxmem.runtime.arena_buffers as buffers
import onnxmem.runtime.sessions as sessions
from onnxmem.core.errors import PlanError, RuntimeBackendError, show_name
from onnxmem.graph import GraphView, Op, bound_outputs, child_path
from onnxmem.model import passes_true, subgraph_attributes
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import Finding, true_lifetimes
from onnxmem.runtime.arena_buffers import SENTINEL, Slot
from onnxmem.runtime.arena_records import (
    DEVICES,
    Execution,
    ExecutionOptions,
    OutputCheck,
    Uncopied,
    compare_output,
)
from onnxmem.runtime.arena_steps import ArenaSteps
from onnxmem.runtime.folding import compute_weights, weight_ops
from onnxmem.runtime.isolation import TimeLimitExceeded, at_step, end_run, start_run
from onnxmem.runtime.ort import available_memory, onnx_bytes, ort_value
from onnxmem.runtime.reference import PieceReference, draws
from onnxmem.runtime.trips import LoopClock, loop_bounds, over_bound

__all__ = [
    "DEVICES",
    "SENTINEL",
    "ArenaRun",
    "Execution",
    "ExecutionOptions",
    "OutputCheck",
    "available_memory",
    "compare_output",
    "execute_plan",
]


class ArenaRun(ArenaSteps):
    """One execution of ``plan`` for ``view`` in one arena; see the module docstring.

    ``plan`` must name ``view``'s nodes (run :func:`onnxmem.proof.plan.prove_plan`
    first). Raises ``RuntimeBackendError`` when onnxruntime cannot run a node,
    or the arena does not fit in memory.
    """

    def run(self) -> Execution:
        """Every step of the procedure; the findings and output checks. Where the reference is one
        whole-model run and a core is spare (``options.beside``), it runs on a thread of its own while
        the nodes run in the arena ahead of it (:meth:`run_ahead`): the same checks, the same results;
        on a machine whose cores are all busy the second thread would only wait for one."""
        spare = ahead.wanted(self.opts.beside)
        values = self.reference_values() if spare and not self.opts.keep_going else None
        pieces = None if values is None else self.reference_pieces(values)
        if pieces is None:
            return super().run()
        self.load_inputs()
        self.unkept = self.uncopied()
        keep = set(self.view.outputs)
        if self.opts.handed:
            self.handed = buffers.handed(self.view, self.order, self.weight_ops, self.slots, self.weights)
        hand = frozenset(o for i in self.handed for o in self.view.ops[i].outputs if o)
        beside = ahead.Beside(lambda: pieces.run_all(keep, hand), "onnxmem-reference")
        start_run("the arena run, and the run of the model as a whole (the reference) beside it")
        t0 = time.perf_counter()
        try:
            beside.start()
            ran = self.run_ahead(pieces)
            seconds = time.perf_counter() - t0
            try:
                beside.result()
            except TimeLimitExceeded:
                raise
            except RuntimeBackendError:  # a node fails in the reference: step by step finds what comes before it
                ran = None
            self.whole_values, self.whole_seconds = pieces, pieces.seconds
            self.whole = True
            if ran is not None and self._same_shapes(ran):
                self.private.update((o, self.whole_values.pop(o)) for o in self.view.outputs
                                    if o in self.whole_values)
                return self.compare_outputs(seconds) if not self.findings else self._stopped(t0)
            self._start_again()  # a planned shape the kernels do not compute: step by step, the pieces again
            t0 = time.perf_counter()
            if not self.run_steps():
                return self._stopped(t0)
        except BaseException:
            beside.cancel()  # its values are not wanted: stopped, not waited for
            raise
        finally:
            beside.join()
            end_run()
        return self.compare_outputs(time.perf_counter() - t0)

    def run_ahead(self, pieces: PieceReference) -> list[Op] | None:
        """Steps 1 and 4 to 7 of each node (no reference yet: each output bound at its planned
        shape; the values of :attr:`handed` nodes written from ``pieces``, run beside), until the
        last node or the first finding: the nodes run. ``None`` where a node fails to run or a
        handed value is not the plan's: the run starts again step by step (:meth:`_start_again`)."""
        ran: list[Op] = []
        for k, op_index in enumerate(self.order):
            if op_index in self.weight_ops:
                continue
            op = self.view.ops[op_index]
            at_step(f"node {show_name(op.name)} ({op.op_type})")
            if not self.check_inputs(op):
                return ran
            ran.append(op)
            if op_index in self.handed:
                if not self._write_handed(op, pieces):
                    return None
            else:
                try:
                    binding = self._bind_and_run(op, self.session(op, self.nodes[op_index]), in_arena=True)
                except Exception:  # noqa: BLE001 - step by step, after the reference, says what failed
                    return None
                self.nodes_run += 1
                self.check_outputs(op, binding)
            try:
                self.check_write(k, op)
            except Uncopied:  # a write over a live value whose bytes were not kept: step by step
                return None
            if self.findings:
                return ran
            self.retire(k, op)
        return ran

    def _write_handed(self, op: Op, pieces: PieceReference) -> bool:
        """Step 4 of a handed node (:func:`onnxmem.runtime.arena_buffers.handed`): each value the
        reference gives it written at its offset; ``False`` (nothing written) where one is not
        given, or has not the planned shape and element type."""
        got = []
        for o in op.outputs:
            if not o:
                continue
            s, value = self.slots[o], pieces.handed_value(o)
            if value is None or not buffers.planned_value(s, value):
                return False
            got.append((s, value))
        for s, value in got:
            self.arena.write(s.offset, value)
        self.nodes_handed += 1
        return True

    def _same_shapes(self, ran: list[Op]) -> bool:
        """Whether the reference computed each output of the nodes run ahead that it gave at its
        planned shape (step 3 for each): else the plan's shapes do not hold and the run goes step
        by step. The shape of a value the reference did not give (:meth:`PieceReference.run_all`)
        was checked by onnxruntime as its node ran ahead: a kernel that computes another shape than
        the one its output is bound at fails (``tests/test_verify_beside.py``), and so does the run
        ahead (:meth:`run_ahead`)."""
        for op in ran:
            for o in op.outputs:
                got = self.whole_values.shape(o) if o else None
                if got is not None and got != tuple(self.slots[o].shape):
                    return False
        return True

    def run_bodies(self, op: Op) -> bool:
        """A node with bodies, run node by node in its region: the If branch its condition
        chooses, every Loop iteration, every Scan step (see :mod:`onnxmem.planning.bodies` for where
        each value lives). ``False`` when a finding stops the run."""
        node = self.nodes[op.index]
        bodies = {b.attr: b for b in self.view.bodies[op.index]}
        graphs = dict(subgraph_attributes(node))
        kind = next(iter(bodies.values())).kind
        ins = [self._value(n) if n else None for n in node.input]
        outs = [o for o in node.output if o]
        result: list[tuple[np.ndarray, np.ndarray]] | None
        if kind == "if":
            cond = np.asarray(ins[0][0]).reshape(-1)  # type: ignore[index]
            if cond.size != 1:
                raise RuntimeBackendError(
                    f"If {show_name(child_path(self.view.path, op.name))}: its condition "
                    f"{show_name(node.input[0])} holds {cond.size} elements where an If needs exactly one; "
                    "give that input a one-element shape (--input-shape NAME=1)")
            branch = "then_branch" if bool(cond[0]) else "else_branch"
            if branch not in bodies:
                where = child_path(self.view.path, op.name)
                raise PlanError(f"If {show_name(where)} takes its {branch} on these inputs, which the plan leaves out "
                                f"(--branch: it assumes runs take the other); give inputs that take the planned "
                                "branch, or plan without --branch")
            result = self._run_body(op, bodies[branch], graphs[branch], [])
        elif kind == "loop":
            result = self._run_loop(op, bodies["body"], graphs["body"], ins)
        else:
            result = self._run_scan(op, node, bodies["body"], graphs["body"], ins)
        if result is None:
            return False
        return all(self._place(op, name, a, p) for name, (a, p) in zip(outs, result))

    def _run_body(self, op: Op, body: Any, graph: onnx.GraphProto,
                  formal: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """One run of ``body`` with its formal inputs set: its outputs (arena, reference)."""
        frame = _BodyRun(self, body, graph)
        for name, (a, p) in zip(frame.view.inputs, formal):
            if not frame._place(op, name, a, p):
                return None
            # a copy of its own: the placing is no checked write (HostArena.keep's buffer holds live values' bytes)
            frame.saved.maps[0][name] = frame._read(frame.slots[name])
            frame.live.maps[0][name] = frame.slots[name]
        done = frame.run_steps()
        self.nodes_run += frame.nodes_run
        self.private_seconds += frame.private_seconds
        self.changed = self.changed or frame.changed
        if not done:
            return None
        return [frame._value(vi.name) for vi in graph.output]

    def _run_loop(self, op: Op, body: Any, graph: onnx.GraphProto,
                  ins: list[Any]) -> list[tuple[np.ndarray, np.ndarray]] | None:
        trips = int(np.asarray(ins[0][0]).reshape(-1)[0]) if ins and ins[0] is not None else None
        cond = bool(np.asarray(ins[1][0]).reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else True
        carried = [v for v in ins[2:] if v is not None]
        n_scan = len(graph.output) - 1 - len(carried)
        scans: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(n_scan)]
        path = child_path(self.view.path, op.name)
        bound = loop_bounds(self.plan.extra).get(path)  # the most iterations the plan holds, if it grows
        # a trip count bounds a Loop whose body may end it sooner: only one that runs all of them is timed
        clock = LoopClock(path, trips if passes_true(graph) else None)
        i = 0
        while (trips is None or i < trips) and cond:
            if bound is not None and i >= bound:
                raise over_bound(path, bound, trips)
            clock.check(i)
            it = np.array(i, dtype=np.int64)
            c = np.array(cond, dtype=np.bool_)
            out = self._run_body(op, body, graph, [(it, it), (c, c), *carried])
            if out is None:
                return None
            cond = bool(np.asarray(out[0][0]).reshape(-1)[0])
            carried = [(a.copy(), p.copy()) for a, p in out[1:1 + len(carried)]]
            for k, v in enumerate(out[1 + len(carried):]):
                scans[k].append((v[0].copy(), v[1].copy()))
            i += 1
        stacked = [self._stack(op, graph.output[1 + len(carried) + k].name, sl, 0, False) for k, sl in enumerate(scans)]
        return carried + stacked

    def _run_scan(self, op: Op, node: onnx.NodeProto, body: Any, graph: onnx.GraphProto,
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
            out = self._run_body(op, body, graph, [*state, *sl])
            if out is None:
                return None
            state = [(a.copy(), p.copy()) for a, p in out[:n]]
            for k, v in enumerate(out[n:]):
                scans[k].append((v[0].copy(), v[1].copy()))
        stacked = [self._stack(op, graph.output[n + k].name, sl, out_axes[k], bool(out_dirs[k]))
                   for k, sl in enumerate(scans)]
        return state + stacked

    def _stack(self, op: Op, body_output: str, slices: list[tuple[np.ndarray, np.ndarray]], axis: int,
               reverse: bool) -> tuple[np.ndarray, np.ndarray]:
        """The slices one scan output collected, stacked along ``axis`` (reversed for direction 1)."""
        if reverse:
            slices = slices[::-1]
        if not slices:
            t = self.view.bodies[op.index][0].view.tensors[body_output]
            empty = np.zeros((0, *t.shape), dtype=onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
            return empty, empty
        rank = slices[0][0].ndim + 1
        ax = axis % rank
        return np.stack([a for a, _ in slices], axis=ax), np.stack([p for _, p in slices], axis=ax)

    def _value(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(the value in the arena, the reference's value)`` of ``name`` as arrays."""
        if name in self.weights:
            w = np.asarray(self.weights[name])
            return w, w
        return self._array(self.slots[name]), sessions.host_array(self.private[name])

    def _place(self, op: Op, name: str, arena: np.ndarray, private: np.ndarray) -> bool:
        """Write a value a node with bodies computed into its slot (and the reference's
        value beside it); ``False`` (a finding) when its bytes differ from the plan's."""
        slot = self.slots[name]
        arena = np.require(arena, requirements="C")  # (a 0-d array stays 0-d)
        if tuple(arena.shape) != tuple(slot.shape) and self.grows and arena.nbytes < slot.size:
            slot.shape = tuple(arena.shape)  # an iteration before the Loop's bound: the real shape, in its buffer
        if tuple(arena.shape) != tuple(slot.shape):
            if arena.nbytes != slot.size:
                self.findings.append(Finding("shape", name, f"node {op.name!r} computes {name!r} with shape "
                                             f"{list(arena.shape)} ({arena.nbytes} B); the plan has "
                                             f"{list(slot.shape)} ({slot.size} B)", node=op.name,
                                             graph=self.view.path))
                self.changed = True
                return False
            self.notes.append(f"{name!r} runs with shape {list(arena.shape)}; the plan has {list(slot.shape)} "
                              "(same bytes)")
            slot.shape = tuple(arena.shape)
        data = onnx_bytes(arena)
        if slot.private is not None:
            slot.private[: data.size] = data
        elif slot.size:
            self._memory(slot).write(slot.offset, data)
        # an owned copy: the value must outlive whatever array ``private`` views
        self.private[name] = ort_value(np.array(private, order="C", copy=True))
        return True


class _BodyRun(ArenaRun):
    """One run of a body inside its owner's region: the procedure of :class:`ArenaRun`
    over the body's nodes, in the body's planned order, with the body's own slots.

    Values of enclosing graphs are read through them (their slots, saved bytes,
    reference values and weights), and the body's writes are checked against
    everything live there too: a body write over a live value of any level is a
    clobber. Slots of the body are its plan's tensors (``graph`` = its path).
    """

    def __init__(self, parent: ArenaRun, body: Any, graph: onnx.GraphProto) -> None:  # noqa: D107
        self.ort, self.opts, self.cuda, self.grows = parent.ort, parent.opts, parent.cuda, parent.grows
        self.random_calls = parent.random_calls
        self.root: ArenaRun = getattr(parent, "root", parent)
        self.view = body.view
        self.full, self.plan = parent.full, parent.plan
        self.nodes = graph.node
        self.path = body.path
        static = self.root._body_static.get(body.path)
        if static is None:  # what every iteration shares: order, weights, slot layout
            sub = self.plan.subgraph(body.path)
            by_name = {op.name: op.index for op in self.view.ops}
            order = [by_name[n] for n in sub.order]
            own = compute_weights(sessions.model_like(self.full, graph), self.view, outer=parent.weights)
            life = true_lifetimes(self.view, order)
            layout = []
            for pt in self.plan.tensors:
                if pt.graph == body.path:
                    t = self.view.tensors[pt.name]
                    layout.append((pt.name, pt.offset, pt.size, t.elem_type, t.shape, f"{body.path}/{pt.group}",
                                   life[pt.name][1]))
            if sub.outputs == "owner":  # an If branch writing straight into the If's outputs
                for o, y in (bound_outputs(parent.view, body, self.plan.io) or {}).items():
                    s = parent.slots[y]
                    layout.append((o, s.offset, s.size, s.elem_type, s.shape, f"{body.path}/{o}", len(order) or 1))
            static = (order, own, set(weight_ops(self.view)), layout)
            self.root._body_static[body.path] = static
        self.order, own, self.weight_ops, layout = static
        self.weights = ChainMap(own, parent.weights)
        self.feeds = {}
        slots = {name: Slot(name, "arena", off, size, et, shape, group, end)
                 for name, off, size, et, shape, group, end in layout}
        self.slots = ChainMap(slots, parent.slots)
        self.regions = set(self.view.regions.values())
        self.arena, self.mirror = parent.arena, parent.mirror
        self.session_options, self.providers = parent.session_options, parent.providers
        self.findings, self.notes, self.stood_in = parent.findings, parent.notes, parent.stood_in
        self.saved: Any = ChainMap({}, parent.saved)
        self.live: Any = ChainMap({}, parent.live)
        self.private: Any = ChainMap({}, parent.private)
        self.history = []
        self.nodes_run = 0
        self.changed = False
        self.private_seconds = 0.0
        self.whole = False  # a body's nodes run again outside the arena (ArenaSteps.reference_values)
        self._alones = {}  # none made ahead for a body's nodes (ArenaSteps.run_beside)
        self.building = self.root.building  # (its node runs take turns with those of the sessions built ahead)
        self._weight_values = {}
        self._sessions = self.root._sessions
        self._node_sessions = self.root._node_sessions
        self._body_static = self.root._body_static

    def session(self, op: Op, node: onnx.NodeProto) -> Any:
        """The node's session, made once for every iteration that binds the same shapes (a random
        op's made afresh: a kernel run before draws other numbers)."""
        if draws(node, op, self.random_calls):
            return super().session(op, node)
        key = (self.path, op.index, tuple(tuple(self.slots[n].shape) for n in op.reads if n in self.slots))
        if key not in self._sessions:
            self._sessions[key] = super().session(op, node)
        return self._sessions[key]

    def retire(self, k: int, op: Op) -> None:
        """Step 7 for the body's own values (enclosing values retire in their own graph)."""
        live, saved, private = self.live.maps[0], self.saved.maps[0], self.private.maps[0]
        for name in [n for n, s in live.items() if s.end <= k + 1]:
            del live[name]
            saved.pop(name, None)
            if name not in self.view.outputs:
                private.pop(name, None)


def execute_plan(
    plan: MemoryPlan,
    model: onnx.ModelProto,
    view: GraphView,
    *,
    options: ExecutionOptions | None = None,
    model_path: str | os.PathLike[str] | None = None,
) -> Execution:
    """Run ``model`` node by node inside one arena laid out by ``plan`` (see :class:`ArenaRun`)."""
    return ArenaRun(plan, model, view, options or ExecutionOptions(), model_path).run()

