"""The whole-model reference of an arena run, in pieces (:class:`PieceReference`).

The reference of a CPU arena run without bodies or random ops is every value of the graph as
onnxruntime computes it outside the arena, with the kernels each node's own session runs
(:mod:`onnxmem.runtime.arena`). One whole-model run with every value an output
(:func:`onnxmem.runtime.sessions.run_values`) holds all of them at once, each in fresh memory
(nasnetalarge's 879 values: 1.27 CPU s and 338,637 minor page faults in one run, 0.90 s and
24,421 in pieces, in one process, median of three). Here the plan's order is cut into pieces
of about :data:`onnxmem.runtime.arena_records.PIECE_BYTES` of values each
(``ExecutionOptions.piece_bytes``); a piece is one onnxruntime
session of its nodes (optimizations and prepacking off, one thread, like the whole run), and it
runs when the arena run first asks for one of its values (:meth:`PieceReference.pop`). A value
read by a later piece is kept until that piece has run; the others are handed to the arena run,
which drops each once it has checked it. Every value read from outside a piece (a graph input,
a weight, a value of an earlier piece) is an input of the piece's model, bound as it is, as it
is in each node's own session (:func:`onnxmem.runtime.sessions.node_session`): each node runs the
same kernel on the same bytes, so each value has the same bits as in the whole run
(``tests/test_verify_pieces.py`` compares every value of squeezenet both ways).

Beside the arena run (:meth:`onnxmem.runtime.arena.ArenaRun.run`) a thread of its own runs every
piece in turn (:meth:`PieceReference.run_all`), keeping the graph outputs' values and the shapes
alone of the others, and handing the arena run, as each piece ends, the values of the shape
arithmetic it writes from the reference (:meth:`PieceReference.handed_value`,
:func:`onnxmem.runtime.arena_buffers.handed`). What it does not do: run a piece ahead of a
step-by-step arena run (there the pieces run on the thread that asks for their values).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from onnxmem.core.errors import RuntimeBackendError, show_name
from onnxmem.graph import Op, draws_random
from onnxmem.runtime.arena_records import PIECE_BYTES
from onnxmem.runtime.isolation import TimeLimitExceeded
from onnxmem.runtime.ort import make_session, ort_values, run_bounded
from onnxmem.runtime.sessions import RANDOM_OPS, model_like

__all__ = ["PieceReference", "draws", "random_functions"]


@dataclass(frozen=True, slots=True)
class _Piece:
    """Consecutive nodes of the plan's order run as one session: what it reads from outside
    (``inputs``, each with its element type) and the values it gives (``outputs``)."""

    nodes: tuple[onnx.NodeProto, ...]
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[str, ...]
    names: tuple[str, ...] = ()  # the nodes' names (the view's), for messages


class PieceReference:
    """The reference's values (name -> OrtValue), each computed by the piece that holds its node
    when first asked for (:meth:`pop`); see the module docstring.

    ``model``: the model with its weights (its IR version, opsets and functions); ``nodes``: the
    nodes whose outputs are the reference's values, in the plan's order; ``values``: those values'
    element types; ``feeds``: the graph inputs; ``weights``: initializers and the outputs of the
    nodes folded into weights; ``names``: the nodes' names for messages (the view's). ``ValueError``
    where a node reads a value none of them gives.

    A piece that onnxruntime fails to run is cut into pieces of one node each, so that the values
    of its nodes before the one that fails are given all the same (the arena run finds what they
    hold before it reaches that node); a piece of one node that fails names it.
    """

    def __init__(self, model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], values: Mapping[str, int],
                 feeds: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray],
                 piece_bytes: int = PIECE_BYTES, sizes: Mapping[str, int] | None = None,
                 pieces: tuple[_Piece, ...] | None = None, names: Sequence[str] = ()) -> None:
        self.model = model
        self.values = dict(values)
        self.outside = {**weights, **feeds}
        self.pieces = pieces if pieces is not None else _cut(nodes, sizes or {}, piece_bytes, self.values, self.outside,
                                                             names)
        self._index()
        self.ran = 0  # pieces run so far
        self.kept: dict[str, Any] = {}  # values of run pieces a later piece reads
        self.given: dict[str, Any] = {}  # values of run pieces not yet taken
        self.bound: dict[str, Any] = {}  # OrtValues of the inputs and weights, made once
        self.shapes: dict[str, tuple[int, ...]] = {}  # of the values dropped by run_all
        self.handed: dict[str, np.ndarray] = {}  # values run_all hands over, not yet taken
        self.finished = False  # run_all has ended, its pieces run or one failed
        self.progress = threading.Condition()  # a piece of run_all ended
        self._every: tuple[_Piece, ...] | None = None  # the pieces as cut, before run_all gave fewer values
        self.seconds = 0.0

    def _index(self) -> None:
        self.piece_of = {o: k for k, p in enumerate(self.pieces) for o in p.outputs}
        #: the last piece that reads each value of a piece (kept until it has run)
        self.last_read = {name: k for k, p in enumerate(self.pieces) for name, _ in p.inputs}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.given or self.piece_of.get(name, -1) >= self.ran)

    def pop(self, name: str) -> Any:
        """The value ``name``, running the pieces up to the one that gives it; it is not kept here
        (unless a later piece reads it). ``KeyError`` for a value taken already or not given."""
        while self.ran <= self.piece_of[name]:
            self._run(self.pieces[self.ran])
        return self.given.pop(name)

    def run_all(self, keep: set[str], hand: frozenset[str] = frozenset()) -> PieceReference:
        """Every piece left, in order, keeping the values named in ``keep`` and the shape alone of
        the others that a piece gives (:meth:`shape`); this reference. A piece gives only the
        values of ``keep``, of ``hand`` and those a later piece reads: onnxruntime reuses the memory
        of the others within the piece, where each value a piece gives takes memory of its own
        (nasnetalarge: 120 of its 879 values given; ``verify``'s peak resident memory 557 MiB
        where it was 675). Each value of ``hand`` is handed over (:meth:`handed_value`) as its
        piece ends. :meth:`again` has every value again."""
        if self._every is None:
            self._every = self.pieces
            read = {name for p in self.pieces for name, _ in p.inputs}
            self.pieces = (*self.pieces[:self.ran],
                           *(_Piece(p.nodes, p.inputs, tuple(o for o in p.outputs if o in keep or o in read or o in hand),
                                    p.names)
                             for p in self.pieces[self.ran:]))
            self._index()
        try:
            while self.ran < len(self.pieces):
                self._run(self.pieces[self.ran])
                handed: dict[str, np.ndarray] = {}
                for name in [n for n in self.given if n not in keep]:
                    value = self.given.pop(name)
                    self.shapes[name] = tuple(int(d) for d in value.shape())
                    if name in hand:
                        handed[name] = value.numpy()
                with self.progress:
                    self.handed.update(handed)
                    self.progress.notify_all()
        finally:
            with self.progress:
                self.finished = True
                self.progress.notify_all()
        return self

    def handed_value(self, name: str) -> np.ndarray | None:
        """The value ``name`` of :meth:`run_all`'s ``hand`` (taken: asked once), waiting for its
        piece to run on run_all's thread; ``None`` where run_all ended without it (a piece failed)."""
        with self.progress:
            while name not in self.handed and not self.finished:
                self.progress.wait()
            return self.handed.pop(name, None)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of a value a piece that has run gave; ``None`` for one it did not give
        (:meth:`run_all`)."""
        if name in self.given:
            return tuple(int(d) for d in self.given[name].shape())
        return self.shapes.get(name)

    def again(self) -> PieceReference:
        """A reference with the same pieces, each giving all its values, none of them run yet."""
        return PieceReference(self.model, (), self.values, {}, self.outside,
                              pieces=self._every if self._every is not None else self.pieces)

    def _run(self, piece: _Piece) -> None:
        t0 = time.perf_counter()
        g = onnx.GraphProto(name="reference_piece", node=piece.nodes)
        g.input.extend(onnx.helper.make_tensor_value_info(n, et, None) for n, et in piece.inputs)
        g.output.extend(onnx.helper.make_tensor_value_info(n, self.values[n], None) for n in piece.outputs)
        feeds = {n: self.kept[n] if n in self.kept else self._bound(n) for n, _ in piece.inputs}
        why = "as a whole (the reference)"
        if len(piece.nodes) == 1 and piece.names:
            why += f", at node {show_name(piece.names[0])} ({piece.nodes[0].op_type})"
        try:
            sess = make_session(model_like(self.model, g), prepacking=False, shared=True)
            got = run_bounded(sess, list(piece.outputs), feeds, why, as_ort_values=True)
        except TimeLimitExceeded:
            raise
        except RuntimeBackendError:
            if len(piece.nodes) == 1:
                raise
            self._split(self.ran)  # the nodes before the one that fails give their values all the same
            return
        finally:
            self.seconds += time.perf_counter() - t0
        del sess, feeds
        k = self.ran
        self.ran += 1
        for name, value in zip(piece.outputs, got):
            self.given[name] = value
            if self.last_read.get(name, -1) >= self.ran:
                self.kept[name] = value
        for name in [n for n in self.kept if self.last_read[n] <= k]:
            del self.kept[name]

    def _split(self, k: int) -> None:
        """Piece ``k`` (not run) made pieces of one node each."""
        piece = self.pieces[k]
        types = dict(piece.inputs)
        names = piece.names or ("",) * len(piece.nodes)
        alone = tuple(_Piece((node,), tuple((i, types.get(i) or self.values[i]) for i in dict.fromkeys(node.input) if i),
                             tuple(o for o in node.output if o), (name,) if piece.names else ())
                      for node, name in zip(piece.nodes, names))
        self.pieces = (*self.pieces[:k], *alone, *self.pieces[k + 1:])
        self._index()

    def _bound(self, name: str) -> Any:
        if name not in self.bound:
            self.bound.update(ort_values({name: self.outside[name]}))
        return self.bound[name]


def _cut(nodes: Sequence[onnx.NodeProto], sizes: Mapping[str, int], piece_bytes: int, values: Mapping[str, int],
         outside: Mapping[str, np.ndarray], names: Sequence[str] = ()) -> tuple[_Piece, ...]:
    """``nodes`` (named ``names``, where given) in consecutive pieces of about ``piece_bytes`` of
    outputs (``sizes``: each value's bytes)."""
    groups: list[list[onnx.NodeProto]] = [[]]
    labels: list[list[str]] = [[]]
    held = 0
    for k, node in enumerate(nodes):
        if held >= piece_bytes:
            groups.append([])
            labels.append([])
            held = 0
        groups[-1].append(node)
        if names:
            labels[-1].append(names[k])
        held += sum(sizes.get(o, 0) for o in node.output if o)
    pieces = []
    made: set[str] = set()
    for group, label in zip(groups, labels):
        outputs = tuple(o for node in group for o in node.output if o)
        inputs: dict[str, int] = {}
        mine: set[str] = set()
        for node in group:
            for name in node.input:
                if name and name not in mine and name not in inputs:
                    inputs[name] = _elem_type(name, values, outside, made)
            mine.update(o for o in node.output if o)
        made.update(outputs)
        pieces.append(_Piece(tuple(group), tuple(inputs.items()), outputs, tuple(label)))
    return tuple(p for p in pieces if p.nodes)


def _elem_type(name: str, values: Mapping[str, int], outside: Mapping[str, np.ndarray], made: set[str]) -> int:
    if name in made:
        return values[name]
    if name in outside:
        return onnx.helper.np_dtype_to_tensor_dtype(np.asarray(outside[name]).dtype)
    raise ValueError(f"the reference in pieces: value {show_name(name)} is read before any piece gives it")


def random_functions(model: onnx.ModelProto) -> frozenset[tuple[str, str]]:
    """``(domain, name)`` of the model's local functions whose bodies draw random numbers: a node
    of :data:`onnxmem.runtime.sessions.RANDOM_OPS` (a Dropout whatever its inputs), or a call of
    another such function."""
    found: set[tuple[str, str]] = set()
    grew = True
    while grew:
        grew = False
        for f in model.functions:
            if (f.domain, f.name) not in found and any(n.op_type in RANDOM_OPS or (n.domain, n.op_type) in found
                                                        for n in f.node):
                found.add((f.domain, f.name))
                grew = True
    return frozenset(found)


def draws(node: onnx.NodeProto, op: Op, calls: frozenset[tuple[str, str]] = frozenset()) -> bool:
    """Whether ``node`` draws random numbers (:func:`onnxmem.graph.draws_random`, and an old
    opset's Dropout with ``is_test`` 0); an op of another domain by its name alone
    (:data:`onnxmem.runtime.sessions.RANDOM_OPS`), or as a call of one of ``calls``, the local
    functions that draw (:func:`random_functions`)."""
    if (node.domain, node.op_type) in calls:
        return True
    if node.domain not in ("", "ai.onnx"):
        return node.op_type in RANDOM_OPS
    return draws_random(op) or (node.op_type == "Dropout" and any(a.name == "is_test" and a.i == 0
                                                                   for a in node.attribute))
