"""The steps of an arena run (:mod:`onnxmem.runtime.arena` describes the procedure):
:class:`ArenaSteps` carries out each one for the nodes without bodies;
:class:`onnxmem.runtime.arena.ArenaRun` adds the nodes with bodies."""

from __future__ import annotations

import abc
import dataclasses
import os
import time
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np
import onnx

import onnxmem.runtime.ahead as ahead
import onnxmem.runtime.arena_buffers as buffers
import onnxmem.runtime.handover as handover
import onnxmem.runtime.sessions as sessions
import onnxmem.runtime.standins as standins
from onnxmem.core.errors import OnnxmemError, PlanError, RuntimeBackendError, show_name
from onnxmem.graph import GraphView, Op
from onnxmem.model import recorded_values
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import Finding, true_lifetimes
from onnxmem.runtime.arena_buffers import CudaArena, HostArena, Slot, Write, clobber_finding
from onnxmem.runtime.arena_records import (
    DEVICES,
    Execution,
    ExecutionOptions,
    OutputCheck,
    Uncopied,
    compare_output,
    same_bytes,
)
from onnxmem.runtime.folding import compute_weights, weight_ops
from onnxmem.runtime.inputs import feeds_for
from onnxmem.runtime.isolation import at_step, available_memory, end_run, start_run
from onnxmem.runtime.ort import load_weights, onnx_bytes, ort_value
from onnxmem.runtime.reference import PieceReference, draws, random_functions

__all__ = ["ArenaSteps"]


#: what an arena run's values are held to (:class:`onnxmem.runtime.arena_records.ExecutionOptions`)
REFERENCES = ("whole", "nodes")


class ArenaSteps(buffers.ArenaMemory, abc.ABC):
    """The procedure of :class:`onnxmem.runtime.arena.ArenaRun` but nodes with bodies: one execution
    of ``plan`` for ``view`` in one arena; see :mod:`onnxmem.runtime.arena`.

    ``plan`` must name ``view``'s nodes (run :func:`onnxmem.proof.plan.prove_plan`
    first). Raises ``RuntimeBackendError`` when onnxruntime cannot run a node,
    or the arena does not fit in memory.
    """

    #: whether this kind of run may hold its values to one whole-model run (:meth:`reference_values`)
    whole_reference = True
    #: the values whose bytes are not copied when written, nothing running between their write and
    #: their reads (:meth:`uncopied`); a write over one raises Uncopied
    unkept: frozenset[str] = frozenset()
    #: whether the step-by-step run (:meth:`run`) may keep no copy of the values :meth:`uncopied` finds
    spare_copies = True
    handed: frozenset[int] = frozenset()  #: nodes whose values the run ahead writes from the reference (ArenaRun.run_ahead)
    nodes_handed = 0  #: how many it wrote
    hand_values: handover.HandedValues | None = None  #: their values, where each node runs again as its reference
    building: ahead.SessionsAhead | None = None  #: the node sessions built on threads as the nodes run (run_beside)

    def __init__(self, plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, options: ExecutionOptions,
                 model_path: str | os.PathLike[str] | None = None) -> None:
        import onnxruntime as ort

        if options.device not in DEVICES:
            raise OnnxmemError(f"--device {options.device!r} is not one of {', '.join(DEVICES)}")
        if options.reference not in REFERENCES:
            raise OnnxmemError(f"reference {options.reference!r} is not one of {', '.join(REFERENCES)}")
        self.ort = ort
        self.opts = options
        self.view = view
        self.cuda = options.device == "cuda"
        if self.cuda:
            sessions.require_cuda()
        by_name = {op.name: op.index for op in view.ops}
        try:
            self.order = [by_name[n] for n in plan.order]
        except KeyError as exc:
            raise PlanError(f"the plan orders node {exc}, which the model does not have; re-plan the model") from None
        self.full, read = load_weights(model, model_path)
        self.random_calls = random_functions(self.full)  # the local functions that draw
        self.feeds = feeds_for(self.full, view, options.inputs, options.seed)  # seeded where not given
        # a training checkpoint's frozen values the plan's shapes read (extra.checkpoint) are fed as they are
        self.feeds.update({n: v for n, v in recorded_values(plan.extra).items()
                           if n in view.outside and n in self.feeds and v.shape == self.feeds[n].shape
                           and v.dtype == self.feeds[n].dtype})
        # the caller's state of a training graph (view.outside) is bound like a weight, from the feeds
        self.weights: Any = compute_weights(self.full, view,
                                            {n: self.feeds[n] for n in view.outside if n in self.feeds}, read=read)
        self.weight_ops = set(weight_ops(view))
        life = true_lifetimes(view, self.order)
        self.plan = plan
        #: Loops whose values grow per iteration (``extra.loop_trips``): a value may run at a shape
        #: smaller than its buffer, planned for the Loop's bound, and is bound at that shape
        self.grows = bool(plan.extra.get("loop_trips"))
        self.nodes: Any = self.full.graph.node
        self.regions = set(view.regions.values())
        self.slots: Any = buffers.arena_slots(plan, view, life)  # PlanInvalid for a tensor outside the arena
        if self.cuda:  # the host mirror first: the smaller failure
            self.mirror: Any = HostArena(plan.arena_size)
            self.arena: Any = CudaArena(plan.arena_size)
        else:
            self.arena = self.mirror = HostArena(plan.arena_size)
        self.session_options, self.providers = sessions.node_setup(self.cuda)
        self.findings: list[Finding] = []
        self.saved: dict[str, np.ndarray] = {}  # the bytes each live value must still hold
        self.history: list[Write] = []
        self.live: dict[str, Slot] = {}
        self.private: dict[str, Any] = {}  # the reference's values, in onnxruntime's own buffers
        self.notes: list[str] = []
        self.nodes_run, self.changed, self.private_seconds = 0, False, 0.0
        #: the reference is one whole-model run (:meth:`run_reference`), its values not yet taken
        self.whole = False
        self.whole_values: Any = {}  # name -> OrtValue, or a PieceReference
        self.whole_seconds = 0.0
        self.stood_in: set[str] = set()  # the ops whose nodes ran as their stand-ins (runtime.standins)
        self._weight_values: dict[tuple[str, bool], Any] = {}
        self.ordinary: ahead.Beside[dict[str, Any]] | None = None  # the ordinary run beside (run_beside)
        self._alones: dict[int, sessions.Alone] = {}  # by op: the nodes as their sessions run them (run_beside)
        self._body_static: dict[str, Any] = {}  # by body path: what every run of the body shares
        # body nodes' sessions, and those of nodes alike (sessions.node_session); on CUDA the recent ones only
        self._sessions: dict[tuple[str, int, tuple[tuple[int, ...], ...]], Any] = self._session_cache()
        self._node_sessions: dict[Any, Any] = self._session_cache()

    def _session_cache(self) -> Any:
        return sessions.RecentSessions(sessions.CUDA_SESSIONS, sessions.cuda_room()) if self.cuda else {}

    # -------------------------------------------------------------- the procedure

    def run(self) -> Execution:
        """Every step of the procedure, node by node; the findings and output checks. Without bodies,
        stopping at the first finding: no copy of the values :meth:`uncopied` finds; a write over one
        starts the run again (:meth:`_start_again`)."""
        self.load_inputs()
        self.run_reference()
        self.hand_over()
        start_run("the arena run")
        compare = False
        try:
            self.run_beside()
            if self.spare_copies and not self.view.bodies and not self.opts.keep_going and (
                    not self.whole or isinstance(self.whole_values, PieceReference)):  # (pieces run again)
                self.unkept = self.uncopied()
            t0 = time.perf_counter()
            try:
                done = self.run_steps()
            except Uncopied:
                self._start_again()
                done = self.run_steps()
            if not done:
                return self._stopped(t0)
            compare = True
        finally:
            end_run()
            if self.building is not None:
                self.building.close()
            if self.ordinary is not None:
                if not compare:  # its values are not taken: stopped, not waited for (it may not end)
                    self.ordinary.cancel()
                self.ordinary.join()  # none left running on its own
        return self.compare_outputs(time.perf_counter() - t0 - self.private_seconds)

    def run_steps(self) -> bool:
        """Steps 1 to 7 for each node of this graph in the plan's order (a node with
        bodies: :meth:`run_bodies`); ``False`` when a finding stops the run."""
        for k, op_index in enumerate(self.order):
            if op_index in self.weight_ops:
                continue
            op = self.view.ops[op_index]
            at_step(f"node {show_name(op.name)} ({op.op_type})")
            if not self.check_inputs(op) and not self.opts.keep_going:
                return False
            if op_index in self.view.bodies:
                if not self.run_bodies(op):
                    return False
            else:
                node, outs = self.nodes[op_index], [o for o in op.outputs if o]
                handing = op_index in self.handed  # shape arithmetic: its values written (runtime.handover)
                given = self.hand_values.take(outs) if handing and self.hand_values is not None else None
                sess = None
                if given is None:
                    sess = None if handing and self.whole else self.session(op, node)
                    if not self.check_shapes(op, self.run_private(op, sess)):
                        self.changed = True
                        return False
                    given = handover.private_given(self.private, self.slots, outs) if handing and self.whole else None
                if given is not None:
                    self.write_given(given)
                else:
                    if sess is None or draws(node, op, self.random_calls):  # a random kernel run once: a fresh one
                        sess = self.session(op, node)
                    binding = self.run_in_arena(op, sess, k)
                    if binding is None:  # running on after a clobber: garbage in
                        self.changed = True
                        break
                    self.nodes_run += 1
                    self.check_outputs(op, binding)
            self.check_write(k, op)
            if self.findings and not self.opts.keep_going:
                return False
            self.retire(k, op)
        return True

    def hand_over(self) -> None:
        """The nodes of shape arithmetic whose values the run writes rather than runs in the arena
        (:func:`onnxmem.runtime.arena_buffers.handed`), and, where each node runs again as its
        reference, the values of all of them computed together on the CPU (:mod:`onnxmem.runtime.handover`)."""
        if not self.opts.handed:
            return
        self.handed = buffers.handed(self.view, self.order, self.weight_ops, self.slots, self.weights)
        if self.handed and not self.whole:
            self.hand_values = handover.HandedValues(self.full, self.view, self.nodes,
                                                     [k for k in self.order if k in self.handed], self.slots,
                                                     self.weights)

    def write_given(self, given: Mapping[str, tuple[np.ndarray, Any]]) -> None:
        """Step 4 of a handed node: each value written at its offset, and taken as its reference."""
        for o, (arr, value) in given.items():
            s = self.slots[o]
            self._memory(s).write(s.offset, arr)
            self.private[o] = value
        self.nodes_handed += 1

    def uncopied(self) -> frozenset[str]:
        """The values of this run :func:`onnxmem.runtime.arena_buffers.uncopied` finds (:attr:`unkept`)."""
        return buffers.uncopied(self.view, self.order, self.weight_ops, self.slots)

    def _start_again(self) -> None:
        """The arena (and on CUDA its host mirror) back to the sentinel and the inputs, nothing
        found, nothing live, every value's bytes kept from here on; the reference's pieces, where
        it is one whole-model run, to run again as step 2 asks for their values."""
        if isinstance(self.whole_values, PieceReference):
            self.whole_values = self.whole_values.again()
        self.arena.reset()
        if self.mirror is not self.arena:
            self.mirror.reset()
        for done in (self.findings, self.notes, self.stood_in, self.saved):
            done.clear()
        self.unkept = frozenset()  # step by step: every value's bytes kept
        self.live.clear()
        self.history.clear()
        self.nodes_run = self.nodes_handed = 0
        self.changed = False
        if self.hand_values is not None:
            self.hand_values = self.hand_values.again()
        self.load_inputs()

    def load_inputs(self) -> None:
        """Copy the graph inputs in at their offsets (CUDA: into the host mirror too)."""
        for name, arr in self.feeds.items():
            slot = self.slots.get(name)
            if slot is None:
                continue
            data = onnx_bytes(arr)
            if slot.private is not None:
                slot.private[: data.size] = data
            else:
                self._memory(slot).write(slot.offset, data)
                if self.cuda:
                    self.mirror.write(slot.offset, data)
            self.saved[name] = data.copy()
            self.live[name] = slot
        # the reference's graph inputs stay on the host (the binding copies them)
        self.private = {n: ort_value(a) for n, a in self.feeds.items()}

    def run_beside(self) -> None:
        """Where a core is spare (``options.beside``) and the reference is each node run again: the
        ordinary whole-model run started beside the arena run, and the node sessions built on
        threads (:mod:`onnxmem.runtime.ahead`)."""
        if self.whole or not ahead.wanted(self.opts.beside):
            return
        self.ordinary = ahead.ordinary_beside(self.full, self.feeds, self.view.outputs, self.weights)
        items = [(self.nodes[k], self.view.ops[k], self._input_shapes(self.view.ops[k]))
                 for k in self.order if k not in self.weight_ops and k not in self.view.bodies and k not in self.handed]
        self.building = ahead.SessionsAhead(self.full, items, self.view, self.session_options, self.providers,
                                            self._node_sessions, alones=self._alones, known=self.weights.get if self.cuda else None)

    def reference_values(self) -> dict[str, int] | None:
        """The values the whole-model reference gives (name -> element type: every output of a node
        of this graph that runs in the arena), or ``None`` where each node runs again instead:
        ``reference="nodes"``, CUDA (its kernels are not the CPU's), a graph with If/Loop/Scan
        bodies (their nodes run one by one in the arena, each checked against its own run
        outside it), a random op (a second kernel draws other numbers), an op with a stand-in
        (:mod:`onnxmem.runtime.standins`: where it runs, no whole model does), a value without an
        element type, a float16 value (a kernel without float16 runs in float between casts, and
        a whole model drops the casts between two such kernels: not the bits of each node alone),
        or more bytes in all than a quarter of the host memory available (the whole run holds
        every value at once)."""
        if self.opts.reference != "whole" or self.cuda or not self.whole_reference or self.view.bodies:
            return None
        ops = [self.view.ops[k] for k in self.order if k not in self.weight_ops]
        if any(draws(self.nodes[op.index], op, self.random_calls) or standins.has_stand_in(self.nodes[op.index])
               for op in ops):  # a random op, or one onnxruntime may lack a kernel for (run as a stand-in alone)
            return None
        names = [o for op in ops for o in op.outputs if o]
        types = {n: self.view.tensors[n].elem_type for n in names if n in self.view.tensors}
        if len(types) != len(names) or not all(types.values()) or onnx.TensorProto.FLOAT16 in types.values():
            return None
        have = available_memory()
        if have is not None and sum(self.view.tensors[n].size for n in names) > have // 4:
            return None
        return types

    def run_reference(self) -> None:
        """The whole-model reference where :meth:`reference_values` allows it, in pieces that run as
        step 2 asks for their values (:class:`onnxmem.runtime.reference.PieceReference`; in one run,
        :func:`onnxmem.runtime.sessions.run_values`, where a node reads a value no piece can give it);
        else each node runs again in step 2."""
        values = self.reference_values()
        if values is None:
            return
        self.whole_values = self.reference_pieces(values)
        if self.whole_values is None:
            t0 = time.perf_counter()
            self.whole_values = sessions.run_values(self.full, self.feeds, values, self.weights)
            self.whole_seconds = time.perf_counter() - t0
        self.whole = True

    def reference_pieces(self, values: dict[str, int]) -> PieceReference | None:
        """The reference of ``values`` (:meth:`reference_values`) in pieces, none run yet; ``None``
        where a node reads a value no piece can give it."""
        order = [k for k in self.order if k not in self.weight_ops]
        try:
            return PieceReference(self.full, [self.nodes[k] for k in order], values, self.feeds, self.weights,
                                  self.opts.piece_bytes, sizes={n: self.view.tensors[n].size for n in values},
                                  names=[self.view.ops[k].name for k in order])
        except ValueError:
            return None

    def check_inputs(self, op: Op) -> bool:
        """Step 1: every input still holds its producer's bytes. ``False`` when one does not."""
        ok = True
        for name in op.reads:
            if name in self.weights or name not in self.slots or name not in self.saved:
                continue
            slot = self.slots[name]
            now = self._peek(slot)
            if not same_bytes(now, self.saved[name]):
                self.findings.append(self._clobber(slot, now, self.saved[name], op.name, "before it runs"))
                ok = False
                if not self.opts.keep_going:
                    return False
        return ok

    def session(self, op: Op, node: onnx.NodeProto) -> Any:
        """The node's own session; on CUDA, outputs the provider keeps on the host move to the host mirror."""
        if (alone := self._alones.pop(op.index, None)) is not None and self.building is not None:
            self.building.take(alone.key, self._node_sessions)  # its session, once built on its thread
        sess = sessions.node_session(self.full, node, op, self.view, self._input_shapes(op), self.session_options,
                                     self.providers, self._node_sessions, alone)
        if standins.is_stand_in(sess) and op.op_type not in self.stood_in:
            self.stood_in.add(op.op_type)
            self.notes.append(standins.note(op.domain, op.op_type))
        if self.cuda:
            outs = [o for o in node.output if o]
            for o, meminfo in zip(outs, sess.get_output_memory_infos()):
                if sessions.on_host(meminfo) and self.slots[o].home == "arena":
                    self.slots[o].home = "host"
        return sess

    def _input_shapes(self, op: Op) -> dict[str, tuple[int, ...]]:
        return {n: self.slots[n].shape for n in op.reads if n in self.slots}

    def _inputs_on_host(self, op: Op, sess: Any) -> list[bool]:
        if not self.cuda:
            return [True] * len(op.reads)
        return [sessions.on_host(m) for m in sess.get_input_memory_infos()]

    def _bind_and_run(self, op: Op, sess: Any, in_arena: bool) -> Any:
        """Bind the node's values and run it: in the arena at the planned addresses and shapes,
        or (``in_arena=False``) on the private values, with outputs onnxruntime allocates."""
        binding = self._binding(op, sess, in_arena)
        with nullcontext() if self.building is None else self.building.runs:  # (SessionsAhead: one run at a time)
            sess.run_with_iobinding(binding)
            if self.cuda:
                binding.synchronize_outputs()
        return binding

    def _binding(self, op: Op, sess: Any, in_arena: bool) -> Any:
        """The node's IOBinding for :meth:`_bind_and_run` (in the arena, it can run again and again)."""
        host = self._inputs_on_host(op, sess)
        binding = sess.io_binding()
        names = sessions.value_names(op)  # the session's names of the node's values
        for i, name in enumerate(op.reads):
            if name in self.weights:
                binding.bind_ortvalue_input(names[name], self._weight(name, host[i]))
            elif not in_arena:
                binding.bind_ortvalue_input(names[name], self.private[name])
            elif self.cuda and host[i] and self.slots[name].home == "arena" and name in self.feeds:
                # a graph input read on the host: its copy in the host mirror
                s = self.slots[name]
                binding.bind_input(names[name], "cpu", 0, sessions.binding_type(s.elem_type), list(s.shape),
                                   self.mirror.base + s.offset)
            else:
                s = self.slots[name]
                binding.bind_input(names[name], self._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape),
                                   self._address(s))
        for o in op.outputs:
            if not o:
                continue
            s = self.slots[o]
            if in_arena:
                binding.bind_output(names[o], self._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape),
                                    self._address(s))
            else:
                binding.bind_output(names[o], self._device(s), 0)
        return binding

    def run_private(self, op: Op, sess: Any) -> dict[str, tuple[tuple[int, ...], int]]:
        """Step 2: the node on private buffers (the reference), or its values of the whole-model
        reference; ``{output: (shape, bytes)}`` it computes."""
        outs = [o for o in op.outputs if o]
        if self.whole:
            before = getattr(self.whole_values, "seconds", 0.0)  # the reference's pieces run as they are asked for
            self.private.update((o, self.whole_values.pop(o)) for o in outs)
            ran = getattr(self.whole_values, "seconds", 0.0) - before
            self.private_seconds += ran
            self.whole_seconds += ran
            return {o: (tuple(int(d) for d in self.private[o].shape()), sessions.ortvalue_bytes(self.private[o]))
                    for o in outs}
        t0 = time.perf_counter()
        try:
            binding = self._bind_and_run(op, sess, in_arena=False)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(
                f"onnxruntime failed to run node {op.name!r} ({op.op_type}): {sessions.first_line(exc)}"
            ) from None
        values = binding.get_outputs()
        self.private.update(zip(outs, values))
        self.private_seconds += time.perf_counter() - t0
        return {o: (tuple(int(d) for d in v.shape()), sessions.ortvalue_bytes(v)) for o, v in zip(outs, values)}

    def check_shapes(self, op: Op, computed: Mapping[str, tuple[tuple[int, ...], int]]) -> bool:
        """Step 3: the planned shapes against the computed ones; ``False`` when the bytes differ."""
        ok = True
        for o, (real, size) in computed.items():
            s = self.slots[o]
            if real == tuple(s.shape):
                continue
            if self.grows and size < s.size:  # an iteration before the bound: the real shape, in its buffer
                s.shape = real
                continue
            if size != s.size:
                self.findings.append(
                    Finding("shape", o, f"node {op.name!r} computes {o!r} with shape {list(real)} ({size} B); "
                            f"the plan has {list(s.shape)} ({s.size} B)", node=op.name, graph=self.view.path)
                )
                ok = False
            else:
                self.notes.append(f"{o!r} runs with shape {list(real)}; the plan has {list(s.shape)} (same bytes)")
                s.shape = real
        return ok

    def run_in_arena(self, op: Op, sess: Any, k: int) -> Any:
        """Step 4 (at step ``k``): the node with every value bound in the arena; ``None`` when it
        fails after a clobber, or with an output over a live value (:func:`buffers.refused_finding`)."""
        try:
            return self._bind_and_run(op, sess, in_arena=True)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            if self.findings:
                return None
            over = next(buffers.overlaps(op, k, self._arena_outputs(op), self.slots, self.live, self.view.outputs),
                        None)
            if over is not None:
                self.findings.append(buffers.refused_finding(*over, op, sessions.first_line(exc), self.view.path))
                return None
            raise RuntimeBackendError(
                f"onnxruntime failed to run node {op.name!r} ({op.op_type}): {sessions.first_line(exc)}"
            ) from None

    def check_outputs(self, op: Op, binding: Any) -> None:
        """Step 5: the outputs landed at their bound addresses, with the planned shapes."""
        outs = [o for o in op.outputs if o]
        for o, val in zip(outs, binding.get_outputs()):
            s = self.slots[o]
            if s.size and int(val.data_ptr()) != self._address(s):
                self.findings.append(
                    Finding("address", o, f"node {op.name!r} wrote {o!r} at {val.data_ptr():#x}, not at its bound "
                            f"address {self._address(s):#x}", node=op.name, graph=self.view.path)
                )
            if tuple(val.shape()) != tuple(s.shape):
                self.findings.append(
                    Finding("shape", o, f"node {op.name!r} produced {o!r} with shape {list(val.shape())}; the plan "
                            f"says {list(s.shape)}", node=op.name, graph=self.view.path)
                )

    def check_write(self, k: int, op: Op) -> None:
        """Step 6: the write changed no live tensor it must not change."""
        outs = self._arena_outputs(op)
        written = [self.slots[o] for o in outs]
        for w, s in buffers.overlaps(op, k, outs, self.slots, self.live, self.view.outputs):
            name = s.name
            if name in self.unkept:
                raise Uncopied(name)
            now = self._peek(s)
            if not same_bytes(now, self.saved[name]):
                self.findings.append(self._clobber(s, now, self.saved[name], op.name, "", writer_out=w.name))
                self.saved[name] = np.array(self.saved[name])  # still what it must hold, apart from the write's
        self.history.append(Write(k, op.name, written))
        for s in written:
            if s.name not in self.unkept:
                self.saved[s.name] = self._keep(s)
            self.live[s.name] = s

    def _arena_outputs(self, op: Op) -> list[str]:
        """The outputs ``op`` writes where the plan places them (not a body's region)."""
        return [o for o in op.outputs if o and o not in self.regions]

    def retire(self, k: int, op: Op) -> None:
        """Step 7: drop the values whose life ends at step ``k``."""
        for name in [n for n, s in self.live.items() if s.end <= k + 1]:
            del self.live[name]
            self.saved.pop(name, None)
            if name not in self.view.outputs:
                self.private.pop(name, None)

    def compare_outputs(self, seconds: float) -> Execution:
        """The graph outputs against the per-node reference (same kernels, private buffers: any
        difference is the plan's), and, for information, against an ordinary whole-model run."""
        view, opts = self.view, self.opts
        got: dict[str, np.ndarray] = {}
        mine: dict[str, np.ndarray] = {}
        for name in view.outputs:
            if name in self.weights:
                got[name] = mine[name] = self.weights[name]
                continue
            if name in self.private:
                mine[name] = sessions.host_array(self.private[name])
            if name in self.slots and not self.changed:
                s = self.slots[name]
                got[name] = self._array(s)
        # no whole run where an op ran as its stand-in: onnxruntime lacks its kernel
        whole, ref_seconds = (mine, self.whole_seconds) if self.whole else ahead.ordinary_values(
            self.ordinary, not self.stood_in, lambda: sessions.run_model(self.full, self.feeds, view.outputs,
                                                                          weights=self.weights))
        checks: list[OutputCheck] = []
        for name in view.outputs:
            if name not in got or name not in mine:
                checks.append(OutputCheck(name, float("inf"), False))
                continue
            c = compare_output(name, got[name], mine[name], opts.rtol, opts.atol)
            if whole is None:
                checks.append(c)
                continue
            wm = c if whole is mine else compare_output(name, got[name], whole[name], opts.rtol, opts.atol)
            checks.append(dataclasses.replace(c, whole_model_diff=wm.max_abs_diff, whole_model_ok=wm.ok))
            if not wm.ok and c.ok:
                self.notes.append(
                    f"graph output {name!r} differs from an ordinary whole-model onnxruntime run by {wm.max_abs_diff:.3g} "
                    f"(tolerance {wm.tolerance:.3g}) while it matches the same kernels run outside the arena: "
                    "the kernels differ, not the plan"
                )
        bad = [c for c in checks if not c.ok]
        self.changed = self.changed or bool(bad)
        if bad:
            c = bad[0]
            self.findings.append(
                Finding(
                    "output",
                    c.name,
                    f"graph output {c.name!r} differs from the same nodes run outside the arena: max |diff| "
                    f"{c.max_abs_diff:.3g} > {c.tolerance:.3g} (atol {opts.atol:g} + rtol {opts.rtol:g} x max |output|)",
                )
            )
        return Execution(opts.device, tuple(self.findings), tuple(checks), self.nodes_run, seconds, ref_seconds,
                         self.changed, tuple(self.notes), self.private_seconds, "whole" if self.whole else "nodes",
                         tuple(sorted(self.stood_in)), self.nodes_handed,
                         {n: np.array(v) for n, v in got.items()} if opts.keep_outputs and not self.changed else None)

    # -------------------------------------------------------------- values of nodes with bodies

    @abc.abstractmethod
    def run_bodies(self, op: Op) -> bool:
        """A node with bodies: :class:`onnxmem.runtime.arena.ArenaRun` runs each body in its region."""

    def _array(self, slot: Slot) -> np.ndarray:
        """The value in ``slot`` at its shape (:func:`onnxmem.runtime.arena_buffers.slot_value`)."""
        return buffers.slot_value(slot, self._read(slot))

    def _stopped(self, t0: float) -> Execution:
        """The run ended early at a finding: no output checks."""
        return Execution(self.opts.device, tuple(self.findings), (), self.nodes_run, time.perf_counter() - t0,
                         self.whole_seconds, self.changed, tuple(self.notes), self.private_seconds,
                         "whole" if self.whole else "nodes", nodes_handed=self.nodes_handed)

    def _clobber(self, slot: Slot, now: np.ndarray, before: np.ndarray, at_node: str, when: str,
                 writer_out: str | None = None) -> Finding:
        return clobber_finding(slot, now, before, at_node, when, writer_out, self.history, self.view.path)
