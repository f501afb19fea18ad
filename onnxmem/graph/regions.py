"""Regions: the space a node's planned bodies run in, as a tensor of the parent view.

:func:`with_regions` adds to a view a *region* tensor for each node whose bodies are planned
(see :mod:`onnxmem.planning.bodies`); :func:`bound_outputs` says when an If branch writes its
outputs straight into the If's own, :func:`inside_outputs` which of a body's outputs may be its
owner's outputs inside the region.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import onnx

from onnxmem.graph.paths import child_path
from onnxmem.graph.view import Body, GraphView, Op, Tensor

__all__ = ["bound_outputs", "inside_outputs", "with_regions"]


def bound_outputs(parent: GraphView, body: Body, io: str = "internal") -> dict[str, str] | None:
    """``{branch output: If output}`` when an If branch can write its outputs straight into
    the If's own outputs (which ``parent`` plans), else ``None``.

    It can when every output the branch computes (not a value it passes through from
    outside or a weight) appears once among its outputs and its If output is an arena
    tensor of ``parent`` of the same size (``io``: the main graph's ``--io``; with
    ``external`` the main graph's outputs are the runtime's; ignored when ``parent``
    is a body). Such a branch plans no bytes for its outputs: they live at the If's
    outputs, which are live during the If's step and apart from its region.
    """
    if body.kind != "if":
        return None
    owner = parent.ops[body.owner]
    outs = body.view.outputs
    mapping: dict[str, str] = {}
    for k, o in enumerate(outs):
        t = body.view.tensors.get(o)
        if t is None or t.kind == "weight" or t.producer is None:
            continue
        y = owner.outputs[k] if k < len(owner.outputs) else ""
        ty = parent.tensors.get(y) if y else None
        if outs.count(o) > 1 or ty is None or ty.kind in ("weight", "region") or ty.size != t.size:
            return None
        if not parent.path and io == "external" and y in parent.outputs:
            return None
        mapping[o] = y
    return mapping or None


def inside_outputs(parent: GraphView, body: Body, io: str = "internal") -> dict[str, str] | None:
    """``{body output: owner output}`` that ``body`` writes at its owner's outputs when they sit
    inside its region (``outputs: inside``), else ``None``.

    An If branch: every output, when it computes each (:func:`bound_outputs` maps them all).
    A Loop or Scan body: its carried (state) outputs, ``[1, 1 + state)`` of a Loop's body,
    ``[0, state)`` of a Scan's, which after the last iteration are the owner's first
    ``state`` outputs; each must be computed in the body (not a formal input, a weight or an
    outer value), appear once among the body's outputs, and its owner output be an arena
    tensor of ``parent`` of the same size (not a main-graph output the runtime owns with
    ``io="external"``). The body keeps its outputs live to its end, so after the last
    iteration they hold the final values at exactly those bytes: no copy. Scan outputs and a
    Loop's condition stay where they are (copied out, beside the region).
    """
    if body.kind == "if":
        mapped = bound_outputs(parent, body, io)
        return mapped if mapped and len(mapped) == len(body.view.outputs) else None
    first = 1 if body.kind == "loop" else 0
    owner = parent.ops[body.owner]
    outs = body.view.outputs
    mapping: dict[str, str] = {}
    for k in range(body.state):
        if first + k >= len(outs) or k >= len(owner.outputs):
            return None
        o, y = outs[first + k], owner.outputs[k]
        t = body.view.tensors.get(o)
        ty = parent.tensors.get(y) if y else None
        if t is None or t.kind in ("weight", "region") or t.producer is None or outs.count(o) > 1:
            return None
        if ty is None or ty.kind in ("weight", "region") or ty.size != t.size:
            return None
        if not parent.path and io == "external" and y in parent.outputs:
            return None
        mapping[o] = y
    return mapping or None


def with_regions(view: GraphView, sizes: Mapping[str, int], *, recursive: bool = True,
                 inside: Mapping[str, Mapping[str, int]] | None = None) -> GraphView:
    """``view`` (and its bodies, recursively) with a *region* for each node whose bodies
    are planned: a tensor of kind ``region`` written by that node and read by none, so
    it is live during the node's step only, of ``sizes[owner path]`` bytes (the space its
    bodies run in). A node whose size is missing or 0 gets none. The region's name is
    ``<node name>:region`` (primes added while that names a value of the graph).
    ``recursive=False`` leaves the bodies' views as they are. ``inside``: ``{owner path:
    {If output: offset}}`` for Ifs whose branches write their outputs inside the region
    (:attr:`GraphView.region_outputs`; the liveness puts them in the region's group)."""
    ops = list(view.ops)
    tensors = dict(view.tensors)
    regions: dict[int, str] = {}
    region_outputs: dict[str, Mapping[str, int]] = {}
    bodies: dict[int, tuple[Body, ...]] = {}
    for index, bs in view.bodies.items():
        bodies[index] = tuple(replace(b, view=with_regions(b.view, sizes)) for b in bs) if recursive else bs
        op = view.ops[index]
        size = sizes.get(child_path(view.path, op.name), 0)
        if size <= 0:
            continue
        name = f"{op.name}:region"
        while name in tensors:
            name += "'"
        regions[index] = name
        placed = (inside or {}).get(child_path(view.path, op.name))
        if placed:
            region_outputs[name] = dict(placed)
        tensors[name] = Tensor(name, onnx.TensorProto.UINT8, "uint8", (size,), size, "region", index)
        ops[index] = Op(op.index, op.name, op.op_type, op.domain, op.inputs, op.outputs + (name,), op.captures)
    return GraphView(tuple(ops), tensors, view.inputs, view.outputs, view.consumers, weight_ops=view.weight_ops,
                     outside=view.outside, path=view.path, outer=view.outer, bodies=bodies, regions=regions,
                     region_outputs=region_outputs, kernels=view.kernels, nested=view.nested)
