"""Step 5 of shape arithmetic (:mod:`onnxmem.shapes.shapeeval`): the shapes carried forward between two inferences.

Between two of onnx's inferences, each node's output shapes come from its own rule in onnx
(``onnx.shape_inference.infer_node_outputs``), on its input shapes and the values computed so
far, in one sweep in topological order with the evaluation (:class:`Carrier`). A node like one
asked before (the same op, attributes, and input types and data, by place) takes that answer:
an exporter repeats its blocks. The tensors a pass hands to onnx (the rules' data, the folded
initializers and value_info) are made once per name (:class:`Protos`).
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxmem.model import subgraph_attributes
from onnxmem.shapes.evalbase import SHAPE_ONLY

__all__ = ["MAX_CARRIED_DATA", "Carrier", "Evaluation", "Names", "Protos"]

#: each node's input names and output names, in the order of the nodes
Names = tuple[list[tuple[str, ...]], list[tuple[str, ...]]]


class Evaluation(Protocol):
    """What the sweep asks of the evaluation it carries shapes for (the pass's evaluator)."""

    typed: dict[str, tuple[int, tuple[int, ...]]]  # value -> its element type and shape, where computed
    values: dict[str, np.ndarray]  # the values known

    def done(self) -> bool: ...  # every wanted value is known

    def evaluate(self, shapes: dict[str, tuple[int, ...]]) -> list[str]: ...  # one sweep, without carrying

    def step(self, i: int, shapes: dict[str, tuple[int, ...]]) -> str | None: ...  # node ``i`` evaluated


#: the most elements of a computed value that step 5 hands to onnx's rule of a node that reads it
#: (a shape slot holds a few dozen); a larger one is left out, which can only leave a shape to the
#: next inference, and the copying stays bounded on a graph where many nodes read one large value
MAX_CARRIED_DATA = 4096


class Protos:
    """The initializers and value_info one pass makes, each by name once (a value never changes
    once computed), kept across its rounds; each distinct value and type is built once and copied
    under each name (the same bytes as built for the name alone)."""

    def __init__(self) -> None:
        self.tensors: dict[str, onnx.TensorProto] = {}
        self.infos: dict[str, onnx.ValueInfoProto] = {}
        self.values: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto] = {}
        self.types: dict[tuple[int, tuple[int, ...]], onnx.ValueInfoProto] = {}

    def tensor(self, name: str, value: np.ndarray) -> onnx.TensorProto:
        """``value`` as a tensor named ``name``."""
        found = self.tensors.get(name)
        if found is None:
            key = (value.dtype.str, tuple(value.shape), value.tobytes())
            base = self.values.get(key)
            if base is None:
                base = self.values[key] = numpy_helper.from_array(value)
            found = self.tensors[name] = onnx.TensorProto()
            found.CopyFrom(base)
            found.name = name
        return found

    def info(self, name: str, elem: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
        """The value_info of tensor ``name`` of element type ``elem`` and dims ``shape``."""
        found = self.infos.get(name)
        if found is None:
            base = self.types.get((elem, shape))
            if base is None:
                base = self.types[elem, shape] = helper.make_tensor_value_info("", elem, list(shape))
            found = self.infos[name] = onnx.ValueInfoProto()
            found.CopyFrom(base)
            found.name = name
        return found


class Carrier:
    """Step 5: the shapes carried forward between two inferences, by each node's own rule in onnx.

    One sweep in a stable topological order over the wanted nodes (evaluated) and the nodes a
    wanted ``Shape`` or ``Size`` reads the output of, directly or through other nodes (their
    shapes carried; none with a subgraph, none of another domain): every node comes after all
    the nodes it reads, so one sweep takes each value and shape as far as it goes. ``order``:
    every node in that order (computed once for the pass); ``kinds``: every node's op type and
    domain; ``protos``: the pass's tensors (:class:`Protos`, shared with its folds); ``opset``:
    the model's ai.onnx opset; ``flat``: no node holds a subgraph."""

    def __init__(self, work: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], wanted: Sequence[int],
                 order: Sequence[int], names: Names, kinds: Sequence[tuple[str, str]], protos: Protos, *,
                 opset: int, flat: bool = False) -> None:
        self.nodes, self.opsets, self.ir_version = nodes, list(work.opset_import), int(work.ir_version)
        self.opset = opset
        inputs, outputs = names
        producer = {o: i for i, outs in enumerate(outputs) for o in outs if o}
        stack = [inputs[i][0] for i in wanted if kinds[i][0] in SHAPE_ONLY and inputs[i]]
        reads: set[int] = set()
        while stack:
            p = producer.get(stack.pop())
            if p is None or p in reads:
                continue
            reads.add(p)
            stack.extend(name for name in inputs[p] if name)
        self.shaped = {i for i in reads if kinds[i][1] in ("", "ai.onnx") and (flat or not subgraph_attributes(nodes[i]))}
        self.wanted = set(wanted)
        self.order = [i for i in order if i in self.shaped or i in self.wanted]
        self.inputs, self.outputs = inputs, outputs  # every node's input and output names, the empty ones too
        #: the sweep: each node in order, whether it is wanted, and its named outputs where it is shaped
        self.sweep = [(i, i in self.wanted, _named(outputs[i]) if i in self.shaped else None) for i in self.order]
        #: value -> its shape carried here (never one inference had given when it was carried)
        self.carried: dict[str, tuple[int, ...]] = {}
        self.tried: dict[int, tuple[object, ...]] = {}
        self.protos = protos  # the tensors handed to onnx's rules (the pass's, shared with its folds)
        #: (element type, shape) -> its TypeProto, made once (onnx's rule only reads it)
        self.types: dict[tuple[int, tuple[int, ...]], onnx.TypeProto] = {}
        #: op type -> its schema at the model's opset, found once
        self.schemas: dict[str, onnx.defs.OpSchema] = {}
        #: what onnx's rule gave each distinct node (:meth:`_rule_key`): each output's type, by place
        self.rules: dict[tuple[object, ...], tuple[tuple[int, tuple[int, ...]] | None, ...]] = {}

    def evaluate(self, ev: Evaluation, current: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
                 elems: Mapping[str, int] | None = None) -> list[str]:
        """:meth:`Evaluation.evaluate` with the shapes carried forward in the same sweep: the values
        computed (their shapes added to ``shapes``, as there; the carried ones are kept apart).
        ``elems``: the element types of ``current``'s values, where read already."""
        if not self.shaped:
            return [] if ev.done() else ev.evaluate(shapes)
        step = not ev.done()  # with every wanted value known, the sweep only carries shapes
        elem = _Types(current, ev.typed, elems)
        seen = {**self.carried, **shapes}
        new: list[str] = []
        known = seen.__contains__
        for i, wanted, outs in self.sweep:
            if step and wanted:
                name = ev.step(i, seen)
                if name is not None:
                    new.append(name)
                    elem.add(name, ev.typed[name][0])
            if outs is not None and not all(map(known, outs)):  # a node whose outputs are known carries nothing
                self._carry(i, seen, elem, ev.values)
        shapes.update({k: seen[k] for k in new})
        return new

    def _carry(self, i: int, shapes: dict[str, tuple[int, ...]], types: _Types,
               values: Mapping[str, np.ndarray]) -> None:
        """Node ``i``'s output shapes by onnx's rule, where it gives ones not known yet."""
        ins, outs = _named(self.inputs[i]), _named(self.outputs[i])
        known = shapes.__contains__
        if all(map(known, outs)) or not all(map(known, ins)):
            return
        elem = types.read()
        if not all(map(elem.get, ins)):
            return
        seen = tuple((shapes[name], name in values) for name in ins)
        if self.tried.get(i) == seen:
            return
        self.tried[i] = seen
        for name, (et, shape) in self._outputs(i, ins, shapes, elem, values).items():
            if name in outs and name not in shapes:
                shapes[name] = self.carried[name] = shape
                elem[name] = et

    def _outputs(self, i: int, ins: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
                 elem: Mapping[str, int], values: Mapping[str, np.ndarray]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """onnx's rule of node ``i``: its outputs' element types and concrete shapes (none it leaves
        open). The rule reads the node's op, attributes, and its inputs' types and data by place, never
        their names: a node like one asked before (an exporter repeats its blocks) takes its answer."""
        node, inputs, outputs = self.nodes[i], self.inputs[i], self.outputs[i]
        if len(set(outputs)) < len(outputs):  # an output named twice: no answer by place
            return self._rule(node, ins, shapes, elem, values)
        key = self._rule_key(node, inputs, shapes, elem, values)
        found = self.rules.get(key)
        if found is None:
            got = self._rule(node, ins, shapes, elem, values)
            found = self.rules[key] = tuple(got.get(name) if name else None for name in outputs)
        return {name: t for name, t in zip(outputs, found) if name and t is not None}

    @staticmethod
    def _rule_key(node: onnx.NodeProto, inputs: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
                  elem: Mapping[str, int], values: Mapping[str, np.ndarray]) -> tuple[object, ...]:
        """What onnx's rule of ``node`` reads: its op, attributes, and each input's type and the
        data handed to the rule (:meth:`_rule`), by place."""
        data = [values.get(name) if name else None for name in inputs]
        return (node.op_type, tuple(a.SerializeToString() for a in node.attribute), len(node.output),
                tuple((elem[name], shapes[name]) if name else None for name in inputs),
                tuple((v.dtype.str, v.shape, v.tobytes()) if v is not None and v.size <= MAX_CARRIED_DATA else None
                      for v in data))

    def _rule(self, node: onnx.NodeProto, ins: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
              elem: Mapping[str, int], values: Mapping[str, np.ndarray]) -> dict[str, tuple[int, tuple[int, ...]]]:
        """onnx's rule of ``node`` (``ins``: its named inputs) asked."""
        types = {name: self._type(elem[name], shapes[name]) for name in ins}
        data = {name: self.protos.tensor(name, values[name]) for name in ins
                if name in values and values[name].size <= MAX_CARRIED_DATA}
        try:
            if node.op_type not in self.schemas:
                self.schemas[node.op_type] = onnx.defs.get_schema(node.op_type, self.opset, "")
            got = onnx.shape_inference.infer_node_outputs(self.schemas[node.op_type], node, types, data, opset_imports=self.opsets,
                                                          ir_version=self.ir_version)
        except Exception:  # noqa: BLE001 - no rule, or a rule that refuses: the shape stays unknown
            return {}
        out: dict[str, tuple[int, tuple[int, ...]]] = {}
        for name, t in got.items():
            tt = t.tensor_type
            if (t.HasField("tensor_type") and tt.elem_type and tt.HasField("shape")
                    and all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim)):
                out[name] = (int(tt.elem_type), tuple(int(d.dim_value) for d in tt.shape.dim))
        return out

    def _type(self, elem: int, shape: tuple[int, ...]) -> onnx.TypeProto:
        found = self.types.get((elem, shape))
        if found is None:
            found = self.types[elem, shape] = helper.make_tensor_type_proto(elem, list(shape))
        return found

    def confirmed(self, final: Mapping[str, tuple[int, ...]]) -> bool:
        """Whether the last inference gave every carried shape, each the same."""
        return all(final.get(name) == shape for name, shape in self.carried.items())


def _named(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` less the empty ones (an input or output left out)."""
    return tuple(filter(None, names)) if "" in names else names


class _Types:
    """The element type of each value one sweep of :class:`Carrier` knows: the typed values and
    initializers of the inference ``model`` (``read``: those, where read already), and the values
    computed (``typed``, and those added in the sweep). ``model`` is read when first asked: a sweep
    that carries nothing never reads it."""

    __slots__ = ("model", "typed", "given", "found")

    def __init__(self, model: onnx.ModelProto, typed: Mapping[str, tuple[int, tuple[int, ...]]],
                 read: Mapping[str, int] | None = None) -> None:
        self.model, self.typed, self.given = model, typed, read
        self.found: dict[str, int] | None = None

    def read(self) -> dict[str, int]:
        """The element types, by value name (the values computed so far included)."""
        if self.found is None:
            self.found = dict(self.given) if self.given is not None else _elem_types(self.model)
            self.found.update({k: v[0] for k, v in self.typed.items()})
        return self.found

    def add(self, name: str, elem: int) -> None:
        """A value computed in the sweep, of element type ``elem``."""
        if self.found is not None:
            self.found[name] = elem


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """The element type of each typed value and initializer of ``model``'s graph."""
    g = model.graph
    out = {init.name: int(init.data_type) for init in g.initializer}
    read: dict[bytes, int] = {}  # each distinct type read once
    for vi in (*g.input, *g.value_info, *g.output):
        t = vi.type
        key = t.SerializeToString()
        if key not in read:
            read[key] = int(t.tensor_type.elem_type) if t.HasField("tensor_type") else 0
        if read[key]:
            out.setdefault(vi.name, read[key])
    return out
