"""onnx's shape inference of a large graph in pieces, to bound its memory.

``onnx.shape_inference.infer_shapes`` serializes the whole model, parses it in C++, infers it
and hands back an inferred copy: on a 100,000-node graph that holds three copies of the model
at once. :func:`infer_in_pieces` infers the main graph a window of ``window`` nodes at a time:

1. the nodes are taken in file order, which must be topological (else: ``None``);
2. each window becomes a small model: the window's nodes, the small initializers they read
   (their values, for data propagation), and as typed graph inputs the values they read from
   earlier windows (the types inferred there) or from the graph's inputs; the graph outputs
   the window produces keep their declared types;
3. onnx infers that model (with data propagation, as on the whole graph) and the window's
   value types are kept for the next windows; the inferred piece is dropped at once.

What it does not do: graphs with subgraph bodies (If, Loop, Scan) or model-local functions
are not cut (``None``: the caller infers the whole graph), and values that onnx's data
propagation carries from one window to the next (``Shape`` feeding a ``Reshape`` in a later
window) lose their value at the cut, so the caller must check that every value it needs got
a concrete shape and infer the whole graph where one did not. Given the same input types,
each window infers what the whole-graph inference infers for its nodes.
"""

from __future__ import annotations

from typing import Callable, Mapping

import onnx

from onnxmem.model import Dim, subgraph_attributes
from onnxmem.shapes.engines import collect_graph_types, collect_value_types, run_onnx_inference

__all__ = ["PIECE_NODES", "PIECE_WINDOW", "infer_in_pieces"]

#: graphs with at least this many nodes are inferred in pieces
PIECE_NODES = 20_000
#: nodes per piece
PIECE_WINDOW = 2_000

Types = dict[str, tuple[int | None, tuple[Dim, ...] | None]]


def infer_in_pieces(
    work: onnx.ModelProto,
    window: int | None = None,
    infer: Callable[[onnx.ModelProto], onnx.ModelProto | None] = run_onnx_inference,
) -> Types | None:
    """``{name: (elem type, dims)}`` of the main graph's values as onnx infers them, window
    by window (module doc; ``window`` defaults to :data:`PIECE_WINDOW`); ``None`` where the
    graph cannot be cut or a piece fails."""
    window = window or PIECE_WINDOW
    g = work.graph
    if work.functions or any(subgraph_attributes(n) for n in g.node):
        return None
    inits = {t.name: t for t in g.initializer}
    types: dict[str, onnx.TypeProto] = {vi.name: vi.type for vi in g.input}
    declared_out = {vi.name: vi for vi in g.output}
    out: Types = collect_graph_types(_header(work, g))
    last = _last_window(g, window)
    for w, start in enumerate(range(0, len(g.node), window)):
        piece = _piece(work, list(g.node[start:start + window]), inits, types, declared_out)
        if piece is None:
            return None
        inferred = infer(piece)
        if inferred is None:
            return None
        # the piece's inputs and initializers are values of earlier windows or of the header,
        # already in ``out``: only the values it makes are read
        made = (*inferred.graph.value_info, *inferred.graph.output)
        copies: dict[bytes, onnx.TypeProto] = {}  # one copy per distinct type, shared: only ever copied from
        for vi in made:
            if vi.name not in types and last.get(vi.name, -1) > w:
                text = vi.type.SerializeToString()
                kept = copies.get(text)
                if kept is None:
                    kept = copies[text] = onnx.TypeProto()
                    kept.CopyFrom(vi.type)  # a copy: a reference would keep the whole piece alive
                types[vi.name] = kept
        for name, typed in collect_value_types(made).items():
            out.setdefault(name, typed)
        del inferred, piece
    return out


def _last_window(g: onnx.GraphProto, window: int) -> dict[str, int]:
    """The last window that reads each value (the types of values read no later are dropped)."""
    last: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for name in node.input:
            last[name] = i // window
    return last


def _header(work: onnx.ModelProto, g: onnx.GraphProto) -> onnx.GraphProto:
    """The graph's inputs, outputs and initializers alone (their declared types)."""
    head = onnx.GraphProto()
    head.input.extend(g.input)
    head.output.extend(g.output)
    head.initializer.extend(g.initializer)
    return head


def _piece(
    work: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    inits: Mapping[str, onnx.TensorProto],
    types: Mapping[str, onnx.TypeProto],
    declared_out: Mapping[str, onnx.ValueInfoProto],
) -> onnx.ModelProto | None:
    """The window ``nodes`` as a model of its own, its inputs typed from ``types``; ``None``
    where a node reads a value neither typed nor made earlier in the window."""
    m = onnx.ModelProto()
    m.ir_version = work.ir_version
    m.opset_import.extend(work.opset_import)
    pg = m.graph
    pg.name = "piece"
    made: set[str] = set()
    taken: set[str] = set()
    for node in nodes:
        for name in node.input:
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
