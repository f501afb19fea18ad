"""The shape engines of :func:`onnxmem.shapes.infer.infer_shapes`, each a step with one interface.

A step reads and adds to the working state of one inference (:class:`Inference`); a value
keeps the first concrete shape a step gives it, recorded with the step's ``source`` name.
The steps, in their order of trust (:data:`STEPS`):

1. ``onnx``: onnx shape inference with data propagation, on the copy whose inputs carry the
   user's ``--input-shape`` pins and ``--dim`` bindings, with the exporter's intermediate
   ``value_info`` removed and the graph outputs' declared shapes given to it only for the outputs
   it leaves open (neither is trusted blindly: onnxruntime runs a model whose output is
   declared at another shape than it makes, at the shape it makes);
2. ``evaluated``: shape arithmetic evaluated statically (:mod:`onnxmem.shapes.shapeeval`:
   Shape, Gather, Concat, ... on known values), fed back to onnx's inference; with it the
   values the contrib rules read (GroupQueryAttention's ``total_sequence_length``);
   ``loop-bound``: the outputs of Loops whose carried values grow per iteration, sized for
   their trip bound (:mod:`onnxmem.shapes.loops`), and onnx's inference again with them;
3. ``op-rule``: shapes the operator spec fixes where inference leaves them out;
4. ``training-rule``: gradient ops and what follows them (:mod:`onnxmem.shapes.training`);
5. ``contrib-rule``: onnxruntime's fused, blocked-layout (NCHWc) and quantized ops and what
   follows them (:mod:`onnxmem.shapes.contrib`);
6. ``symbolic``: onnxruntime's symbolic shape inference (it knows the ``com.microsoft`` ops and
   does symbolic arithmetic on dims);
7. ``measured``: the shapes of one onnxruntime run that the caller measured and passed in
   (:func:`onnxmem.runtime.ort.infer_measured_shapes`: the only way for data-dependent shapes).
   This layer never runs onnxruntime itself; measured shapes replace inferred ones, with a
   warning where the two differ;
8. ``value_info``: the exporter's own declarations, the last resort, with a warning, each only
   where it agrees with the shape the engines give its value (another rank or another value of a
   dim they fixed: not taken).

Every step but ``onnx`` and ``measured`` runs only while some value still lacks a shape.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto

import onnxmem.shapes.pieces as pieces
import onnxmem.shapes.shapeeval as shapeeval
from onnxmem.core.errors import show_name
from onnxmem.model import BodyKey, Dim, NodeFields, read_nodes, resolve_dim, set_shape
from onnxmem.shapes.contrib import complete_contrib, is_custom_domain
from onnxmem.shapes.contrib_attention import value_inputs
from onnxmem.shapes.engines import (
    collect_types,
    declared_shape,
    fill_shell,
    run_onnx_inference,
    run_symbolic_inference,
    undeclared_outputs,
    with_declared,
)
from onnxmem.shapes.loops import LoopBound, grow_loop, main_loops
from onnxmem.shapes.subgraphs import Grower, ranged_outputs, ranged_values, with_shapes
from onnxmem.shapes.training import complete_shapes

__all__ = ["STEPS", "Inference", "Step", "TypedShape", "top_level_values"]

#: a value's element type and concrete dims
TypedShape = tuple[int, tuple[int, ...]]


@dataclass(slots=True)
class Inference:
    """The working state of one shape inference: what the steps read and what they found.

    Mutable on purpose (each step adds to it); :func:`onnxmem.shapes.infer.infer_shapes`
    turns it into the frozen :class:`onnxmem.shapes.info.ShapeInfo`.
    """

    model: onnx.ModelProto  # the caller's model, never changed
    #: the copy stripped for inference, inputs bound, dims under safe names (the onnx step takes the
    #: graph outputs' declared shapes off, but for outputs it leaves open); where ``full`` is off, a
    #: shell without the main graph's nodes and small initializers (:attr:`work` adds them)
    shell: onnx.ModelProto
    dims: dict[str, int]  # the dim bindings under the safe names
    file_dims: dict[str, int]  # the same bindings under the file's own names (for its value_info)
    wanted: list[str]  # the top-level values that need a shape
    measured: Mapping[str, TypedShape] | None = None  # shapes of one run, given by the caller
    known: dict[str, TypedShape] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # value -> the step that shaped it
    warnings: list[str] = field(default_factory=list)
    inferred: onnx.ModelProto | None = None  # onnx's latest result (the evaluated model once folded)
    evaluated: shapeeval.Evaluated | None = None
    #: what collect_types read of ``inferred`` where the onnx step read it (the evaluation reads it again)
    types: dict[str, tuple[int | None, tuple[Dim, ...] | None]] | None = None
    symbolic: onnx.ModelProto | None = None
    flat: bool = False  # the model holds no subgraph and no local function
    nodes: NodeFields | None = None  # the main graph's node fields (onnxmem.model.read_nodes), where read
    nchwc_block: int | None = None  # the NCHWc block size of the session that built the graph, if known
    max_trips: int | None = None  # the user's bound on a Loop's trip count (--max-trips)
    loops: dict[BodyKey, LoopBound] = field(default_factory=dict)  # Loops sized per iteration
    excluded: frozenset[BodyKey] = frozenset()  # If branches runs are assumed not to take
    full: bool = True  # ``shell`` holds the main graph's nodes and small initializers

    @property
    def work(self) -> onnx.ModelProto:
        """The copy stripped for inference (``shell``), given the main graph's nodes and small
        initializers on first use where it lacks them (:func:`onnxmem.shapes.engines.fill_shell`)."""
        if not self.full:
            fill_shell(self.shell, self.model)
            self.full = True
        return self.shell

    def incomplete(self) -> bool:
        """Whether some wanted value still lacks a shape."""
        return len(self.known) < len(self.wanted)

    def absorb(self, info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]], source: str,
               binding: Mapping[str, int]) -> None:
        """Take each wanted value's shape from ``info`` where it is new and every dim resolves
        under ``binding``."""
        shaped: dict[tuple[Dim, ...], tuple[int, ...] | None] = {}
        known, sources = self.known, self.sources
        for name in self.wanted:
            if name in known:
                continue
            et, sh = info.get(name, (None, None))
            if et is None or sh is None:
                continue
            concrete = shaped[sh] if sh in shaped else _resolved(sh, binding, shaped)
            if concrete is None:
                continue
            known[name] = (et, concrete)
            sources[name] = source


def _resolved(shape: tuple[Dim, ...], binding: Mapping[str, int],
              shaped: dict[tuple[Dim, ...], tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """``shape`` with each dim resolved under ``binding``, ``None`` where one is unknown; each
    distinct shape is resolved once (``shaped``: the shapes resolved so far, added to)."""
    if shape in shaped:
        return shaped[shape]
    resolved = [resolve_dim(d, binding) for d in shape]
    concrete = shaped[shape] = None if None in resolved else tuple(int(r) for r in resolved)  # type: ignore[arg-type]
    return concrete


@dataclass(frozen=True, slots=True)
class Step:
    """One shape engine: ``run`` adds to the state the shapes it finds, as ``source``."""

    source: str
    run: Callable[[Inference], None]
    always: bool = False  # runs even when every wanted value has a shape


def _onnx(state: Inference) -> None:
    declared = undeclared_outputs(state.shell)  # the declarations alone (not the nodes a shell lacks)
    if len(state.model.graph.node) >= pieces.PIECE_NODES and _pieces_complete(state):
        return  # every value shaped without holding the whole graph's inferred copy
    state.inferred = run_onnx_inference(state.work, flat=state.flat)
    if state.inferred is None:
        return
    found = collect_types(state.inferred)
    shaped: dict[tuple[Dim, ...], tuple[int, ...] | None] = {}
    left: dict[str, tuple[Dim, ...]] = {}  # outputs inference leaves open that take their declared shapes
    for vi in state.work.graph.output:
        sh = found.get(vi.name, (None, None))[1]
        if vi.name in declared and _open(sh, state.dims, shaped):
            merged = with_declared(declared[vi.name], sh, lambda d: isinstance(d, int))
            if merged is not None:
                left[vi.name] = merged
    if left:
        for vi in state.work.graph.output:
            if vi.name in left:
                set_shape(vi, declared[vi.name])
        if any(n in left for node in state.work.graph.node for n in node.input):
            again = run_onnx_inference(state.work, flat=state.flat)  # read by nodes: onnx infers again with them
            if again is not None:
                state.inferred, found = again, collect_types(again)
        else:  # read by none: merged in place, dim by dim, as onnx merges them
            for vi in state.inferred.graph.output:
                if vi.name in left:
                    set_shape(vi, left[vi.name])
            found = collect_types(state.inferred)
    state.types = found
    state.absorb(found, "onnx", state.dims)


def _open(shape: tuple[Dim, ...] | None, binding: Mapping[str, int],
          shaped: dict[tuple[Dim, ...], tuple[int, ...] | None]) -> bool:
    """Whether ``shape`` is not concrete under ``binding`` (:func:`_resolved`)."""
    return shape is None or _resolved(shape, binding, shaped) is None


def _pieces_complete(state: Inference) -> bool:
    """onnx's inference in pieces (:mod:`onnxmem.shapes.pieces`), taken only where it gives
    every wanted value a concrete shape; else nothing is taken and the whole graph is inferred."""
    # a shell: the windows read the nodes and small initializers of the model itself
    info = pieces.infer_in_pieces(state.shell, flat=state.flat, nodes=state.nodes,
                                  source=None if state.full else state.model.graph)
    if info is None:
        return False
    found: dict[str, TypedShape] = {}
    shaped: dict[tuple[Dim, ...], tuple[int, ...] | None] = {}  # each distinct shape resolved once
    for name in state.wanted:
        et, sh = info.get(name, (None, None))
        if et is None or sh is None:
            return False
        concrete = _resolved(sh, state.dims, shaped)
        if concrete is None:
            return False
        if name not in state.known:
            found[name] = (et, concrete)
    state.known.update(found)  # what absorb takes: every wanted value, each resolved once
    state.sources.update(dict.fromkeys(found, "onnx"))
    return True


def _evaluated(state: Inference) -> None:
    """Shape arithmetic (Shape -> Gather -> Concat -> Reshape ...) evaluated, folded in, inferred again."""
    if state.inferred is None:
        return
    state.evaluated = shapeeval.evaluate_shapes(
        state.work, state.inferred, infer=functools.partial(run_onnx_inference, flat=state.flat),
        resolve=lambda d: resolve_dim(d, state.dims),
        also=value_inputs(state.work), flat=state.flat, declared=state.types,
    )
    # the values shaped already take nothing from it (absorb keeps a value's first shape)
    found = collect_types(state.evaluated.model, skip=state.known)
    state.absorb({**found, **state.evaluated.shapes}, "evaluated", state.dims)
    state.inferred = state.evaluated.model


def outer_values(state: Inference) -> dict[str, np.ndarray]:
    """The main graph's values known before the run: constants, and the shape arithmetic's."""
    values = shapeeval.graph_constants(state.work)
    if state.evaluated is not None:
        values.update(state.evaluated.values)
    return values


def grow_loops(state: Inference, values: Mapping[str, np.ndarray], only_open: bool) -> None:
    """Size the main graph's Loops whose carried values grow (:func:`onnxmem.shapes.loops.grow_loop`)
    into ``state.loops``; ``only_open``: only those whose outputs lack a shape."""
    graph = state.model.graph
    for index, key in main_loops(state.model):
        node = graph.node[index]
        if key in state.loops or (only_open and all(o in state.known for o in node.output if o)):
            continue
        found = grow_loop(state.model, graph, index, key, state.known, values, state.max_trips, state.excluded,
                          stacks=any(o not in state.known for o in node.output if o))
        if found is not None:
            state.loops[key] = found


def nested_grower(state: Inference) -> Grower:
    """The :data:`onnxmem.shapes.subgraphs.Grower` of Loops nested in bodies: each one that grows
    sized for its bound once, into ``state.loops``."""

    def grow(graph: onnx.GraphProto, index: int, key: BodyKey, outer: Mapping[str, TypedShape],
             values: Mapping[str, np.ndarray]) -> tuple[dict[str, TypedShape], Mapping[BodyKey, dict[str, TypedShape]]] | None:
        found = state.loops.get(key) or grow_loop(state.model, graph, index, key, outer, values, state.max_trips,
                                                  state.excluded, stacks=True)
        if found is None:
            return None
        state.loops[key] = found
        return dict(found.outputs), {k: dict(v) for k, v in found.bodies.items()}

    return grow


def _loop_bounds(state: Inference) -> None:
    """The outputs of Loops whose carried values grow, sized for their trip bound, then onnx's
    inference again with them (for the values after the Loops)."""
    if not main_loops(state.model):
        return
    before = len(state.loops)
    grow_loops(state, outer_values(state), only_open=True)
    if len(state.loops) == before:
        return
    for bound in state.loops.values():
        for name, typed in bound.outputs.items():
            if name in state.wanted and name not in state.known:
                state.known[name] = typed
                state.sources[name] = "loop-bound"
    again = run_onnx_inference(with_shapes(state.inferred if state.inferred is not None else state.work,
                                           state.known))
    if again is not None:
        state.absorb(collect_types(again), "loop-bound", state.dims)


def _op_rules(state: Inference) -> None:
    """Shapes that shape inference leaves out but the operator spec fixes.

    Dropout's optional ``mask`` output has the shape of its input (type T
    before opset 10, bool from 10 on); onnx's inference types only output 0.
    """
    known = state.known
    opset = shapeeval.opset_version(state.model)
    for node in state.model.graph.node:
        if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") and len(node.output) > 1:
            mask = node.output[1]
            src = node.input[0] if node.input else ""
            if mask and mask not in known and src in known:
                et = known[src][0] if opset < 10 else int(TensorProto.BOOL)
                known[mask] = (et, known[src][1])
                state.sources[mask] = "op-rule"


def _training_rules(state: Inference) -> None:
    complete_shapes(state.model, state.known, state.sources, state.wanted)


def _contrib_rules(state: Inference) -> None:
    values = state.evaluated.values if state.evaluated is not None else None
    complete_contrib(state.model, state.known, state.sources, state.wanted, values, nchwc_block=state.nchwc_block)


def _symbolic(state: Inference) -> None:
    # no shape computed from them: values past their dtype's range, outputs of bodies computing such values
    undefined = state.evaluated.undefined if state.evaluated is not None else frozenset()
    if not state.flat:
        typed = state.inferred if state.inferred is not None else state.work
        undefined = undefined | ranged_outputs(state.work, ranged_values(state.work, typed, undefined))
    state.symbolic = run_symbolic_inference(state.inferred if state.inferred is not None else state.work, undefined)
    if state.symbolic is not None:
        state.absorb(collect_types(state.symbolic), "symbolic", state.dims)


def _measured(state: Inference) -> None:
    for name, (et, sh) in (state.measured or {}).items():
        if name in state.wanted:
            if name in state.known and state.known[name][1] != sh:
                state.warnings.append(
                    f"tensor {show_name(name)}: inferred shape {list(state.known[name][1])} but measured "
                    f"{list(sh)}; using the measured one"
                )
            state.known[name] = (et, sh)
            state.sources[name] = "measured"


def _value_info(state: Inference) -> None:
    """The last resort: the exporter's own declarations, for values nothing else could type, where they
    agree with the shape the engines give them and fill what that leaves open
    (:func:`onnxmem.shapes.engines.declared_shape`)."""
    files = collect_types(state.model)
    made = [collect_types(m) for m in (state.inferred, state.symbolic) if m is not None]
    taken: dict[str, tuple[int | None, tuple[Dim, ...] | None]] = {}
    for name in state.wanted:
        if name in state.known or name not in files:
            continue
        partial = next(((et, tuple(resolve_dim(d, state.dims) for d in sh)) for et, sh in
                        (m.get(name, (None, None)) for m in made) if sh is not None), (None, None))
        shape = declared_shape(files[name], partial, state.file_dims)
        if shape is not None:
            taken[name] = shape
    state.absorb(taken, "value_info", {})
    if taken and state.incomplete() and any(is_custom_domain(node.domain) and not taken.keys().isdisjoint(node.output)
                                            for node in state.model.graph.node):  # past a custom op's declared outputs
        values = state.evaluated.values if state.evaluated is not None else None
        complete_contrib(state.model, state.known, state.sources, state.wanted, values,
                         nchwc_block=state.nchwc_block, source="onnx")
    n_vi = sum(1 for s in state.sources.values() if s == "value_info")
    if n_vi:
        state.warnings.append(f"{n_vi} tensor shapes come from the exporter's value_info alone")


#: the engines in their order of trust (module doc)
STEPS: tuple[Step, ...] = (
    Step("onnx", _onnx, always=True),
    Step("evaluated", _evaluated),
    Step("loop-bound", _loop_bounds),
    Step("op-rule", _op_rules),
    Step("training-rule", _training_rules),
    Step("contrib-rule", _contrib_rules),
    Step("symbolic", _symbolic),
    Step("measured", _measured, always=True),
    Step("value_info", _value_info),
)


def top_level_values(model: onnx.ModelProto, nodes: NodeFields | None = None) -> list[str]:
    """The values of the top-level graph that need a shape: its inputs that are not weights,
    then its node outputs, each once, in file order (``nodes``: the graph's node fields, where read)."""
    nodes = read_nodes(model.graph, given=nodes)
    inits = set(nodes.initializers)
    names = list(dict.fromkeys(n for n in nodes.graph_inputs if n not in inits))
    outputs = dict.fromkeys(chain.from_iterable(nodes.outputs))  # each once, in file order
    outputs.pop("", None)
    seen = set(names)
    names.extend((o for o in outputs if o not in seen) if seen else outputs)
    return names
