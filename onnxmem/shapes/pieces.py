"""onnx's shape inference of a large graph in pieces, to bound its memory.

``onnx.shape_inference.infer_shapes`` serializes the whole model, parses it in C++, infers it
and hands back an inferred copy: on a 100,000-node graph that holds three copies of the model
at once. :func:`infer_in_pieces` infers the main graph a window of ``window`` nodes at a time:

1. the nodes are taken in file order, which must be topological (else: ``None``);
2. each window becomes a small model: the window's nodes, the small initializers they read
   (their values, for data propagation), and as typed graph inputs the values they read from
   earlier windows (the types inferred there) or from the graph's inputs; the graph outputs
   the window produces keep their declared types, which onnx merges with what it infers (the
   merged type is the one taken, as from the whole graph's inference);
3. onnx infers that model (with data propagation, as on the whole graph) and the window's
   value types are kept for the next windows; the inferred piece is dropped at once;
4. a window that repeats an earlier one (the layers of a deep network) is not inferred again:
   its values take the types onnx inferred for the values at the same places there. Two
   windows repeat each other when their models are the same but for the values' names
   (:func:`_signature`): each node's op, domain and attributes, and which value it reads by
   its place (made by which earlier node of the window, or the window's n-th outer value);
   each outer value's type; the value of every integer initializer (onnx's data propagation
   reads those), and of every other initializer a node reads whose op is not one of
   :data:`VALUE_BLIND` (whose inference reads only its inputs' types: a MatMul's weight
   matters by its shape alone); the declared graph outputs the window makes. onnx's inference
   reads names only to wire the nodes, so it infers the same types at the same places.

What it does not do: graphs with subgraph bodies (If, Loop, Scan) or model-local functions
are not cut (``None``: the caller infers the whole graph), and values that onnx's data
propagation carries from one window to the next (``Shape`` feeding a ``Reshape`` in a later
window) lose their value at the cut, so the caller must check that every value it needs got
a concrete shape and infer the whole graph where one did not. Given the same input types,
each window infers what the whole-graph inference infers for its nodes.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import onnx

from onnxmem.model import Dim, NodeFields, read_nodes, subgraph_attributes
from onnxmem.shapes.engines import (
    collect_graph_types,
    collect_value_types,
    run_onnx_inference,
    small_initializers,
)

__all__ = ["PIECE_NODES", "PIECE_WINDOW", "VALUE_BLIND", "infer_in_pieces"]

#: graphs with at least this many nodes are inferred in pieces
PIECE_NODES = 20_000
#: nodes per piece
PIECE_WINDOW = 2_000

#: ai.onnx ops whose shape inference never reads an input's value (onnx's ``getInputData``), and
#: whose data propagation reads only integer ones: a floating-point initializer they read
#: matters to the inferred types by its type alone
VALUE_BLIND = frozenset({"Add", "BatchNormalization", "Conv", "Div", "Erf", "Gemm", "LayerNormalization", "MatMul",
                         "Mul", "Pow", "PRelu", "Relu", "Sigmoid", "Softmax", "Sqrt", "Sub", "Tanh"})
#: initializer types onnx's data propagation reads the values of (:data:`VALUE_BLIND`)
_PROPAGATED = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)

Types = dict[str, tuple[int | None, tuple[Dim, ...] | None]]


def infer_in_pieces(
    work: onnx.ModelProto,
    window: int | None = None,
    infer: Callable[[onnx.ModelProto], onnx.ModelProto | None] = run_onnx_inference,
    *, flat: bool = False, nodes: NodeFields | None = None, source: onnx.GraphProto | None = None,
) -> Types | None:
    """``{name: (elem type, dims)}`` of the main graph's values as onnx infers them, window
    by window (module doc; ``window`` defaults to :data:`PIECE_WINDOW`); ``None`` where the
    graph cannot be cut or a piece fails. ``flat``: the caller knows the model holds no
    subgraph and no local function (it is not walked for them). ``nodes``: the
    :class:`~onnxmem.model.NodeFields` of the graph whose nodes the windows read (``source``,
    else ``work``'s), where read (the windows take each node's op type, domain, inputs and
    outputs from them). ``source`` (with ``flat``): the graph ``work`` is a shell of
    (:func:`~onnxmem.shapes.engines.strip_for_inference` with ``shell``), whose nodes and small
    initializers the windows read."""
    window = window or PIECE_WINDOW
    g = work.graph
    if not flat and (work.functions or any(subgraph_attributes(n) for n in g.node)):
        return None
    body = g if source is None or not flat else source  # where the nodes and small initializers are
    small = list(g.initializer) if body is g else small_initializers(body)
    inits = {t.name: t for t in small}
    types: dict[str, onnx.TypeProto] = {vi.name: vi.type for vi in g.input}
    declared_out = {vi.name: vi for vi in g.output}
    out: Types = collect_graph_types(g, value_info=False, initializers=small)  # the declared types
    nodes = read_nodes(body, given=nodes)
    reads = nodes.inputs  # read from the messages once, for both passes
    last = _last_window(reads, window)
    seen: dict[bytes, _Inferred] = {}  # each window inferred, by its signature
    feeds: dict[str, _Feed] = {}
    for w, start in enumerate(range(0, len(body.node), window)):
        window_nodes = list(body.node[start:start + window])
        signed = _signature(window_nodes, (nodes, start), inits, types, declared_out, feeds, (last, w))
        base = seen.get(signed[0]) if signed is not None else None
        if signed is not None and base is not None:
            _repeat(base, signed[1], w, last, types, out, declared_out)
            continue
        piece = _piece(work, window_nodes, reads[start:start + window], inits, types, declared_out)
        if piece is None:
            return None
        inferred = infer(piece)
        if inferred is None:
            return None
        # the piece's inputs and initializers are values of earlier windows or of the header,
        # already in ``out``: only the values it makes are read
        made = (*inferred.graph.value_info, *inferred.graph.output)
        first: dict[str, onnx.TypeProto] = {}  # each value's first declaration, copied once per distinct type
        copies: dict[bytes, onnx.TypeProto] = {}
        for vi in made:
            if vi.name not in first:
                text = vi.type.SerializeToString()
                kept = copies.get(text)
                if kept is None:
                    kept = copies[text] = onnx.TypeProto()
                    kept.CopyFrom(vi.type)  # a copy: a reference would keep the whole piece alive
                first[vi.name] = kept  # shared: the types kept are only ever copied from
        for name, kept in first.items():
            if name not in types and last.get(name, -1) > w:
                types[name] = kept
        typed = collect_value_types(made)
        for name, value in typed.items():
            _take(out, name, value, declared_out)
        if signed is not None and first.keys() <= set(signed[1]):
            seen[signed[0]] = _Inferred(tuple(first.get(n) for n in signed[1]), tuple(typed.get(n) for n in signed[1]))
        del inferred, piece
    return out


@dataclass(frozen=True, slots=True)
class _Inferred:
    """What onnx inferred for a window's values, by their places (:func:`_signature`'s order)."""

    types: tuple[onnx.TypeProto | None, ...]
    typed: tuple[tuple[int | None, tuple[Dim, ...] | None] | None, ...]


def _take(out: Types, name: str, typed: tuple[int | None, tuple[Dim, ...] | None],
          declared_out: Mapping[str, onnx.ValueInfoProto]) -> None:
    """Record the type a window inferred for ``name``: a graph output's replaces its declared
    type (onnx merged the two, as in the whole graph's inference), a value typed before keeps it."""
    if name in declared_out or name not in out:
        out[name] = typed


def _repeat(base: _Inferred, names: Sequence[str], w: int, last: Mapping[str, int],
            types: dict[str, onnx.TypeProto], out: Types, declared_out: Mapping[str, onnx.ValueInfoProto]) -> None:
    """Window ``w``'s values ``names`` take the types ``base`` has at their places, as
    :func:`infer_in_pieces` takes those of a window it infers."""
    for name, kept, typed in zip(names, base.types, base.typed):
        if kept is not None and name not in types and last.get(name, -1) > w:
            types[name] = kept
        if typed is not None:
            _take(out, name, typed, declared_out)


@dataclass(slots=True)
class _Feed:
    """An outer value of a window without its name: ``kind``, its type; for an initializer,
    ``tensor`` and whether its value always counts (``always``: an integer one) or only where
    a node of an op not in :data:`VALUE_BLIND` reads it; ``value``: a digest of the tensor
    without its name, made on first use."""

    kind: tuple[object, ...]
    tensor: onnx.TensorProto | None = None
    always: bool = False
    value: bytes | None = None

    def digest(self) -> bytes:
        if self.value is None:
            t = onnx.TensorProto()
            t.CopyFrom(self.tensor)
            t.name = ""
            self.value = hashlib.blake2b(t.SerializeToString(), digest_size=32).digest()
        return self.value


def _feed(name: str, inits: Mapping[str, onnx.TensorProto], types: Mapping[str, onnx.TypeProto]) -> _Feed | None:
    """:class:`_Feed` of outer value ``name``: an initializer or a typed value (``None``: neither,
    where :func:`_piece` refuses the window)."""
    init = inits.get(name)
    if init is not None:
        return _Feed(("i", init.data_type, tuple(init.dims)), init, init.data_type in _PROPAGATED)
    typed = types.get(name)
    return None if typed is None else _Feed(("t", typed.SerializeToString()))


def _signature(
    nodes: Sequence[onnx.NodeProto],
    fields: tuple[NodeFields, int],
    inits: Mapping[str, onnx.TensorProto],
    types: Mapping[str, onnx.TypeProto],
    declared_out: Mapping[str, onnx.ValueInfoProto],
    feeds: dict[str, _Feed],
    window: tuple[Mapping[str, int], int],
) -> tuple[bytes, list[str]] | None:
    """A digest of the model :func:`_piece` makes of ``nodes`` less its values' names (module
    doc, step 4), and the names of the values the window makes, in order; ``None`` where a value
    is made twice, or read before anything makes or types it. ``fields``: the graph's node
    fields and the index of the window's first node there (each node's op type, domain, inputs
    and outputs, read from the messages once; its attributes are read from ``nodes``);
    ``feeds``: the feeds of outer values that later windows read too, kept for them;
    ``window``: the last window that reads each value (:func:`_last_window`) and this window's
    number."""
    last, w = window
    table, start = fields
    end = start + len(nodes)
    made: dict[str, int] = {}
    outer: dict[str, int] = {}
    parts: list[object] = []
    place = made.get
    for node, op, domain, names, outs in zip(nodes, table.op_types[start:end], table.domains[start:end],
                                             table.inputs[start:end], table.outputs[start:end]):
        blind = op in VALUE_BLIND and domain in ("", "ai.onnx")
        reads: list[object] = []
        for name in names:
            at = place(name)
            if at is not None:
                reads.append(at)
                continue
            if not name:
                reads.append(-1)
                continue
            feed = feeds.get(name)
            if feed is None:
                feed = _feed(name, inits, types)
                if feed is None:
                    return None
                if last.get(name, -1) > w:
                    feeds[name] = feed
            slot = outer.get(name)
            if slot is None:
                slot = outer[name] = -2 - len(outer)
                parts.append(feed.kind)
            reads.append((slot, feed.digest()) if feed.tensor is not None and (feed.always or not blind) else slot)
        for name in outs:
            if name:
                if name in made or name in outer:
                    return None
                made[name] = len(made)
        attrs = node.attribute
        parts.append((op, domain, [a.SerializeToString() for a in attrs] if attrs else None, reads,
                      len(outs) if all(outs) else [bool(o) for o in outs]))
    parts.append(sorted((made[n], vi.type.SerializeToString()) for n, vi in declared_out.items() if n in made))
    return hashlib.blake2b(_canonical_bytes(parts), digest_size=32).digest(), list(made)


def _canonical_bytes(parts: list[object]) -> bytes:
    """``parts`` (lists and tuples of ints, strings, bytes and ``None``) as bytes that equal
    parts alike give: pickled without its memo (``fast``), so that two equal strings are
    written alike whether or not they are one object."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.fast = True  # no memo: the bytes depend on the values alone (parts hold no cycle)
    pickler.dump(parts)
    return out.getvalue()


def _last_window(reads: Sequence[tuple[str, ...]], window: int) -> dict[str, int]:
    """The last window that reads each value, from each node's inputs ``reads`` (the types of
    values read no later are dropped)."""
    last: dict[str, int] = {}
    for i, names in enumerate(reads):
        w = i // window
        for name in names:
            last[name] = w
    return last


def _piece(
    work: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    inputs: Sequence[tuple[str, ...]],
    inits: Mapping[str, onnx.TensorProto],
    types: Mapping[str, onnx.TypeProto],
    declared_out: Mapping[str, onnx.ValueInfoProto],
) -> onnx.ModelProto | None:
    """The window ``nodes`` (``inputs``: each one's inputs) as a model of its own, its inputs
    typed from ``types``; ``None`` where a node reads a value neither typed nor made earlier in
    the window."""
    m = onnx.ModelProto()
    m.ir_version = work.ir_version
    m.opset_import.extend(work.opset_import)
    pg = m.graph
    pg.name = "piece"
    made: set[str] = set()
    taken: set[str] = set()
    for node, names in zip(nodes, inputs):
        for name in names:
            if not name or name in made or name in taken:
                continue
            taken.add(name)
            if name in inits:
                pg.initializer.append(inits[name])
            elif name in types:
                vi = pg.input.add()
                vi.name = name
                vi.type.CopyFrom(types[name])
            else:
                return None  # not topological, or a value nothing types
        made.update(o for o in node.output if o)
    pg.node.extend(nodes)
    pg.output.extend(declared_out[o] for o in sorted(made) if o in declared_out)
    return m
