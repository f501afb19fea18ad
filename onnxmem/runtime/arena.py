"""Execution of a memory plan in one arena with onnxruntime, node by node.

:class:`ArenaRun` carries out the procedure; each step is one method.

Before the first node (:meth:`ArenaRun.__init__`):

* the arena is checked against the memory there is (host: ``MemAvailable``
  of ``/proc/meminfo``; CUDA: the device's free memory, and the host mirror
  of the same size), then allocated as one buffer filled with the sentinel
  0xFF;
* weights (initializers, and the outputs of constant nodes, computed once)
  stay outside the arena and are bound as inputs
  (:func:`onnxmem.runtime.folding.compute_weights`);
* graph inputs are copied in at their offsets (:meth:`ArenaRun.load_inputs`).

Then each node, in the plan's order, runs as its own onnxruntime session
(optimizations off, one thread, no spinning):

1. :meth:`~ArenaRun.check_inputs`: every input still holds the bytes its
   producer wrote;
2. :meth:`~ArenaRun.run_private`: the node runs once with every value in a
   buffer of onnxruntime's own (inputs from the previous private outputs):
   the reference, and the shapes the kernel computes;
3. :meth:`~ArenaRun.check_shapes`: a computed shape that differs from the
   plan's is a finding unless it has the same bytes (then it is noted and
   used);
4. :meth:`~ArenaRun.run_in_arena`: the node runs with its inputs and outputs
   bound by IOBinding at ``arena_base + offset``;
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
must match the private run within ``atol + rtol * max|reference|`` (NaN and
infinities exactly; integers equal): same kernels, same order, same thread
count, so a correct plan gives the same bits. An ordinary whole-model
onnxruntime run is compared too, for information only: its kernels may sum
in another order, and its difference is noted, never a finding.

The first finding names the tensor, the node whose write clobbered it and the
byte range; with ``keep_going`` the run goes on to show whether the results
change. What it does not prove: a plan is checked for one set of input
values; a kernel that writes outside its bound outputs is caught only when a
later reader's bytes change.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import onnx

from onnxmem.core.errors import OnnxmemError, PlanError, RuntimeBackendError, show_name
from onnxmem.graph import GraphView, Op, bound_outputs, child_path
from onnxmem.model import subgraph_attributes
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import Finding, true_lifetimes
from onnxmem.runtime import sessions
from onnxmem.runtime.folding import compute_weights, weight_ops
from onnxmem.runtime.inputs import feeds_for
from onnxmem.runtime.isolation import at_step, end_run, start_run
from onnxmem.runtime.ort import available_memory, check_memory, load_with_weights, session_options

__all__ = [
    "DEVICES",
    "ArenaRun",
    "Execution",
    "ExecutionOptions",
    "OutputCheck",
    "available_memory",
    "compare_output",
    "execute_plan",
]

DEVICES = ("cpu", "cuda")

SENTINEL = 0xFF
#: base alignment of the host arena (the CUDA allocator gives 256)
HOST_BASE_ALIGNMENT = 4096


@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How to run a plan. ``inputs`` overrides the seeded random inputs."""

    device: str = "cpu"
    inputs: Mapping[str, np.ndarray] | None = None
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5
    keep_going: bool = False  # run on after a clobber (to see whether results change)


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


# ------------------------------------------------------------------ memory


def _fits(size: int, device: str, slack: int = 0) -> None:
    """Raise a one-line error when an arena of ``size`` bytes (plus ``slack``) cannot be allocated on ``device`` now."""
    check_memory(size, device, "the plan's arena", slack=slack,
                 fix="verify on a machine with more memory, or plan smaller dims (--dim, --input-shape)")


# ------------------------------------------------------------------ arenas


class _HostArena:
    """The arena as one host buffer, filled with the sentinel."""

    device_type = "cpu"

    def __init__(self, size: int) -> None:
        _fits(size, "cpu", slack=HOST_BASE_ALIGNMENT)
        try:
            self._raw = np.full(size + HOST_BASE_ALIGNMENT, SENTINEL, dtype=np.uint8)
        except MemoryError:
            raise RuntimeBackendError(
                f"cannot allocate the plan's arena of {size} B in host memory; verify on a machine with more memory"
            ) from None
        shift = (-self._raw.ctypes.data) % HOST_BASE_ALIGNMENT
        self.view = self._raw[shift : shift + size]
        self.base = int(self.view.ctypes.data) if size else int(self._raw.ctypes.data) + shift

    def read(self, offset: int, size: int) -> np.ndarray:
        return np.array(self.view[offset : offset + size])

    def write(self, offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.view[offset : offset + flat.size] = flat


class _CudaArena:
    """The arena as one CUDA allocation; bytes move through an Identity session."""

    device_type = "cuda"

    def __init__(self, size: int) -> None:
        import onnxruntime as ort

        n = max(size, 1)
        _fits(n, "cuda")
        try:
            self._ov = ort.OrtValue.ortvalue_from_shape_and_type([n], np.uint8, "cuda", 0)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(
                f"cannot allocate the plan's arena of {size} B on the GPU: {sessions.first_line(exc, 160)}"
            ) from None
        self._ov.update_inplace(np.full(n, SENTINEL, dtype=np.uint8))
        self.base = int(self._ov.data_ptr())
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, ["n"])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, ["n"])
        g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "copy", [x], [y])
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
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
class _Write:
    """The outputs one node wrote, at one step."""

    step: int
    node: str
    outputs: list[_Slot] = field(default_factory=list)


# ------------------------------------------------------------------ the run


class ArenaRun:
    """One execution of ``plan`` for ``view`` in one arena; see the module docstring.

    ``plan`` must name ``view``'s nodes (run :func:`onnxmem.proof.plan.prove_plan`
    first). Raises ``RuntimeBackendError`` when onnxruntime cannot run a node,
    or the arena does not fit in memory.
    """

    def __init__(self, plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, options: ExecutionOptions,
                 model_path: str | os.PathLike[str] | None = None) -> None:
        import onnxruntime as ort

        if options.device not in DEVICES:
            raise OnnxmemError(f"--device {options.device!r} is not one of {', '.join(DEVICES)}")
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
        self.full = load_with_weights(model, model_path)
        self.feeds = _feeds(self.full, view, options)
        # the caller's state of a training graph (view.outside) is bound like a weight, from the feeds
        self.weights: Any = compute_weights(self.full, view,
                                            {n: self.feeds[n] for n in view.outside if n in self.feeds})
        self.weight_ops = set(weight_ops(view))
        life = true_lifetimes(view, self.order)
        self.plan = plan
        self.nodes: Any = self.full.graph.node
        self.regions = set(view.regions.values())
        self.slots: Any = {}
        for pt in plan.tensors:
            if pt.graph:
                continue  # a body's tensor: its frame binds it (_BodyRun)
            t = view.tensors[pt.name]
            self.slots[pt.name] = _Slot(pt.name, "arena", pt.offset, pt.size, t.elem_type, t.shape, pt.group,
                                        life[pt.name][1])
        for name, (_s, e, _r) in life.items():
            if name not in self.slots:  # io external: the caller's buffers
                t = view.tensors[name]
                buf = np.zeros(max(t.size, 1), dtype=np.uint8)
                self.slots[name] = _Slot(name, "private", 0, t.size, t.elem_type, t.shape, name, e, buf)
        if self.cuda:  # the host mirror first: the smaller failure
            self.mirror: Any = _HostArena(plan.arena_size)
            self.arena: Any = _CudaArena(plan.arena_size)
        else:
            self.arena = self.mirror = _HostArena(plan.arena_size)
        self.session_options = session_options()
        self.providers: list[Any] = ["CPUExecutionProvider"]
        if self.cuda:
            self.session_options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            # one convolution algorithm whatever the session: runs of the same node agree bit for bit
            self.session_options.use_deterministic_compute = True
            self.providers = [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "DEFAULT"})]
        self.findings: list[Finding] = []
        self.saved: dict[str, np.ndarray] = {}  # the bytes each live value must still hold
        self.history: list[_Write] = []
        self.live: dict[str, _Slot] = {}
        self.private: dict[str, Any] = {}  # the reference's values, in onnxruntime's own buffers
        self.notes: list[str] = []
        self.nodes_run = 0
        self.changed = False
        self.private_seconds = 0.0
        self._weight_values: dict[tuple[str, bool], Any] = {}
        self._body_static: dict[str, Any] = {}  # by body path: what every run of the body shares
        self._sessions: dict[tuple[str, int, tuple[tuple[int, ...], ...]], Any] = {}  # body nodes' sessions

    # -------------------------------------------------------------- memory access

    def _memory(self, slot: _Slot) -> Any:
        return self.mirror if slot.home == "host" else self.arena

    def _address(self, slot: _Slot) -> int:
        if slot.private is not None:
            return int(slot.private.ctypes.data)
        return int(self._memory(slot).base) + slot.offset

    def _device(self, slot: _Slot) -> str:
        return "cuda" if self.cuda and slot.home == "arena" else "cpu"

    def _read(self, slot: _Slot) -> np.ndarray:
        if slot.private is not None:
            return np.array(slot.private[: slot.size])
        return cast(np.ndarray, self._memory(slot).read(slot.offset, slot.size))

    def _weight(self, name: str, host: bool) -> Any:
        """The weight ``name`` as an OrtValue on the host or the device, made once."""
        on_host = host or not self.cuda
        key = (name, on_host)
        if key not in self._weight_values:
            # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
            arr = np.require(self.weights[name], requirements="C")
            self._weight_values[key] = self.ort.OrtValue.ortvalue_from_numpy(arr, "cpu" if on_host else "cuda", 0)
        return self._weight_values[key]

    # -------------------------------------------------------------- the procedure

    def run(self) -> Execution:
        """Every step of the procedure, node by node; the findings and output checks."""
        self.load_inputs()
        start_run("the arena run")
        t0 = time.perf_counter()
        try:
            if not self.run_steps():
                return self._stopped(t0)
        finally:
            end_run()
        seconds = time.perf_counter() - t0 - self.private_seconds
        return self.compare_outputs(seconds)

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
                node = self.nodes[op_index]
                sess = self.session(op, node)
                computed = self.run_private(op, sess)
                if not self.check_shapes(op, computed):
                    self.changed = True
                    return False
                binding = self.run_in_arena(op, sess)
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

    def load_inputs(self) -> None:
        """Copy the graph inputs in at their offsets (CUDA: into the host mirror too)."""
        for name, arr in self.feeds.items():
            slot = self.slots.get(name)
            if slot is None:
                continue
            data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            if slot.private is not None:
                slot.private[: data.size] = data
            else:
                self._memory(slot).write(slot.offset, data)
                if self.cuda:
                    self.mirror.write(slot.offset, data)
            self.saved[name] = data.copy()
            self.live[name] = slot
        # the reference's graph inputs stay on the host (the binding copies them)
        self.private = {n: self.ort.OrtValue.ortvalue_from_numpy(np.require(a, requirements="C"), "cpu", 0)
                        for n, a in self.feeds.items()}

    def check_inputs(self, op: Op) -> bool:
        """Step 1: every input still holds its producer's bytes. ``False`` when one does not."""
        ok = True
        for name in op.reads:
            if name in self.weights or name not in self.slots or name not in self.saved:
                continue
            slot = self.slots[name]
            now = self._read(slot)
            if not np.array_equal(now, self.saved[name]):
                self.findings.append(self._clobber(slot, now, self.saved[name], op.name, "before it runs"))
                ok = False
                if not self.opts.keep_going:
                    return False
        return ok

    def session(self, op: Op, node: onnx.NodeProto) -> Any:
        """The node's own session; on CUDA, outputs the provider keeps on the host move to the host mirror."""
        shapes = {n: self.slots[n].shape for n in op.reads if n in self.slots}
        sess = sessions.node_session(self.full, node, op, self.view, shapes, self.session_options, self.providers)
        if self.cuda:
            outs = [o for o in node.output if o]
            for o, meminfo in zip(outs, sess.get_output_memory_infos()):
                if sessions.on_host(meminfo) and self.slots[o].home == "arena":
                    self.slots[o].home = "host"
        return sess

    def _inputs_on_host(self, op: Op, sess: Any) -> list[bool]:
        if not self.cuda:
            return [True] * len(op.reads)
        return [sessions.on_host(m) for m in sess.get_input_memory_infos()]

    def _bind_and_run(self, op: Op, sess: Any, in_arena: bool) -> Any:
        """Bind the node's values and run it: in the arena at the planned addresses and shapes,
        or (``in_arena=False``) on the private values, with outputs onnxruntime allocates."""
        binding = self._binding(op, sess, in_arena)
        sess.run_with_iobinding(binding)
        if self.cuda:
            binding.synchronize_outputs()
        return binding

    def _binding(self, op: Op, sess: Any, in_arena: bool) -> Any:
        """The node's IOBinding for :meth:`_bind_and_run` (in the arena, it can run again and again)."""
        host = self._inputs_on_host(op, sess)
        binding = sess.io_binding()
        for i, name in enumerate(op.reads):
            if name in self.weights:
                binding.bind_ortvalue_input(name, self._weight(name, host[i]))
            elif not in_arena:
                binding.bind_ortvalue_input(name, self.private[name])
            elif self.cuda and host[i] and self.slots[name].home == "arena" and name in self.feeds:
                # a graph input read on the host: its copy in the host mirror
                s = self.slots[name]
                binding.bind_input(name, "cpu", 0, sessions.binding_type(s.elem_type), list(s.shape), self.mirror.base + s.offset)
            else:
                s = self.slots[name]
                binding.bind_input(name, self._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape), self._address(s))
        for o in op.outputs:
            if not o:
                continue
            s = self.slots[o]
            if in_arena:
                binding.bind_output(o, self._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape), self._address(s))
            else:
                binding.bind_output(o, self._device(s), 0)
        return binding

    def run_private(self, op: Op, sess: Any) -> dict[str, tuple[tuple[int, ...], int]]:
        """Step 2: the node on private buffers (the reference); ``{output: (shape, bytes)}`` it computes."""
        t0 = time.perf_counter()
        try:
            binding = self._bind_and_run(op, sess, in_arena=False)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(
                f"onnxruntime failed to run node {op.name!r} ({op.op_type}): {sessions.first_line(exc)}"
            ) from None
        values = binding.get_outputs()
        outs = [o for o in op.outputs if o]
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

    def run_in_arena(self, op: Op, sess: Any) -> Any:
        """Step 4: the node with every value bound in the arena; ``None`` when it fails after a clobber."""
        try:
            return self._bind_and_run(op, sess, in_arena=True)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            if self.findings:
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
        outs = [o for o in op.outputs if o and o not in self.regions]
        written = [self.slots[o] for o in outs]
        for w in written:
            if w.private is not None or w.size == 0:
                continue
            for name, s in list(self.live.items()):
                if name in outs or s.private is not None or s.home != w.home:
                    continue
                if max(s.offset, w.offset) >= min(s.offset + s.size, w.offset + w.size):
                    continue
                if s.group == w.group and s.end <= k + 1 and name in op.reads and name not in self.view.outputs:
                    continue  # in place over an input that dies here
                now = self._read(s)
                if not np.array_equal(now, self.saved[name]):
                    self.findings.append(self._clobber(s, now, self.saved[name], op.name, "", writer_out=w.name))
        self.history.append(_Write(k, op.name, written))
        for s in written:
            self.saved[s.name] = self._read(s)
            self.live[s.name] = s

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
                got[name] = self._read(s).view(onnx.helper.tensor_dtype_to_np_dtype(s.elem_type)).reshape(s.shape)
        t1 = time.perf_counter()
        whole = sessions.run_model(self.full, self.feeds, view.outputs)
        ref_seconds = time.perf_counter() - t1
        checks: list[OutputCheck] = []
        for name in view.outputs:
            if name not in got or name not in mine:
                checks.append(OutputCheck(name, float("inf"), False))
                continue
            c = compare_output(name, got[name], mine[name], opts.rtol, opts.atol)
            wm = compare_output(name, got[name], whole[name], opts.rtol, opts.atol)
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
                         self.changed, tuple(self.notes), self.private_seconds)

    # -------------------------------------------------------------- bodies (If, Loop, Scan)

    def _value(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(the value in the arena, the reference's value)`` of ``name`` as arrays."""
        if name in self.weights:
            w = np.asarray(self.weights[name])
            return w, w
        slot = self.slots[name]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(slot.elem_type)
        arena = self._read(slot).view(dtype).reshape(slot.shape)
        return arena, sessions.host_array(self.private[name])

    def _place(self, op: Op, name: str, arena: np.ndarray, private: np.ndarray) -> bool:
        """Write a value a node with bodies computed into its slot (and the reference's
        value beside it); ``False`` (a finding) when its bytes differ from the plan's."""
        slot = self.slots[name]
        arena = np.require(arena, requirements="C")  # (a 0-d array stays 0-d)
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
        if slot.private is not None:
            slot.private[: arena.nbytes] = arena.reshape(-1).view(np.uint8)
        elif slot.size:
            self._memory(slot).write(slot.offset, arena)
        # an owned copy: the value must outlive whatever array ``private`` views
        self.private[name] = self.ort.OrtValue.ortvalue_from_numpy(np.array(private, order="C", copy=True), "cpu", 0)
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
            branch = "then_branch" if bool(np.asarray(ins[0][0]).reshape(-1)[0]) else "else_branch"  # type: ignore[index]
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
        i = 0
        while (trips is None or i < trips) and cond:
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

    def _stopped(self, t0: float) -> Execution:
        """The run ended early at a finding: no output checks."""
        return Execution(self.opts.device, tuple(self.findings), (), self.nodes_run, time.perf_counter() - t0, 0.0,
                         self.changed, tuple(self.notes))

    def _clobber(self, slot: _Slot, now: np.ndarray, before: np.ndarray, at_node: str, when: str,
                 writer_out: str | None = None) -> Finding:
        diff = np.flatnonzero(now != before)
        lo, hi = slot.offset + int(diff[0]), slot.offset + int(diff[-1]) + 1
        writer = at_node
        if writer_out is None:  # found before a node ran: the last earlier write over these bytes
            writer = "(unknown)"
            for w in reversed(self.history):
                hit = [o for o in w.outputs if o.home == slot.home and o.offset < hi and lo < o.offset + o.size]
                if hit:
                    writer, writer_out = w.node, hit[0].name
                    break
        by = f" (output {writer_out!r})" if writer_out else ""
        where = f"in subgraph {self.view.path!r}: " if self.view.path else ""
        return Finding(
            "clobber",
            slot.name,
            f"{where}tensor {slot.name!r} was overwritten by node {writer!r}{by} at arena bytes [{lo}, {hi}) "
            f"while still live{(' (' + when + ' of ' + repr(at_node) + ')') if when else ''}",
            node=writer,
            other=writer_out,
            byte_range=(lo, hi),
            graph=self.view.path,
        )


class _BodyRun(ArenaRun):
    """One run of a body inside its owner's region: the procedure of :class:`ArenaRun`
    over the body's nodes, in the body's planned order, with the body's own slots.

    Values of enclosing graphs are read through them (their slots, saved bytes,
    reference values and weights), and the body's writes are checked against
    everything live there too: a body write over a live value of any level is a
    clobber. Slots of the body are its plan's tensors (``graph`` = its path).
    """

    def __init__(self, parent: ArenaRun, body: Any, graph: onnx.GraphProto) -> None:  # noqa: D107
        self.ort, self.opts, self.cuda = parent.ort, parent.opts, parent.cuda
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
        slots = {name: _Slot(name, "arena", off, size, et, shape, group, end)
                 for name, off, size, et, shape, group, end in layout}
        self.slots = ChainMap(slots, parent.slots)
        self.regions = set(self.view.regions.values())
        self.arena, self.mirror = parent.arena, parent.mirror
        self.session_options, self.providers = parent.session_options, parent.providers
        self.findings, self.notes = parent.findings, parent.notes
        self.saved: Any = ChainMap({}, parent.saved)
        self.live: Any = ChainMap({}, parent.live)
        self.private: Any = ChainMap({}, parent.private)
        self.history = []
        self.nodes_run = 0
        self.changed = False
        self.private_seconds = 0.0
        self._weight_values = {}
        self._sessions = self.root._sessions
        self._body_static = self.root._body_static

    def session(self, op: Op, node: onnx.NodeProto) -> Any:
        """The node's session, made once for every iteration that binds the same shapes."""
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


def _feeds(model: onnx.ModelProto, view: GraphView, opts: ExecutionOptions) -> dict[str, np.ndarray]:
    """The graph inputs: ``opts.inputs`` where given, seeded random values for the rest."""
    return feeds_for(model, view, opts.inputs, opts.seed)


def compare_output(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> OutputCheck:
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
