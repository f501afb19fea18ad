"""The annotated model: the plan in ``metadata_props``, nodes in planned order.

Keys written (all strings, as ONNX requires):

* ``onnxmem.plan``: the whole plan JSON;
* ``onnxmem.schema_version``, ``onnxmem.arena_size``, ``onnxmem.lower_bound``,
  ``onnxmem.alignment``: the headline numbers, for tools that read one key.

Nodes get the unique names the plan refers to and are written in the plan's
order, so a runtime that executes nodes in file order follows the plan; a plan
made in the ``onnxruntime`` order keeps the file's order instead, from which
onnxruntime derives the plan's order (:mod:`onnxmem.scheduling.onnxruntime`). The
model still passes ``onnx.checker`` and runs in onnxruntime. External weights
stay where they are: the annotated model must live in the same folder as the
original so its data references still resolve.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from onnxmem.core.errors import OnnxmemError, PlanError, cut_words, show_name
from onnxmem.core.fileio import MAX_PLAN_BYTES, check_output_path, write_bytes_atomic
from onnxmem.graph import node_names
from onnxmem.plans.point import MemoryPlan, parse_plan_json, plan_from_dict

__all__ = ["PREFIX", "annotate_model", "plan_from_model", "render_annotated", "write_annotated"]

PREFIX = "onnxmem."


def annotate_model(model: onnx.ModelProto, plan: MemoryPlan) -> onnx.ModelProto:
    """A copy of ``model`` with nodes named and ordered as in ``plan``, plan attached."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    names = node_names(g)
    by_name = dict(zip(names, g.node))
    if set(by_name) != set(plan.order):
        raise PlanError("the plan's node order does not name this model's nodes; re-plan the model")
    nodes = []
    # onnxruntime derives its order from the file's: written in that order, it would run another
    for name in names if plan.order_strategy == "onnxruntime" else plan.order:
        node = onnx.NodeProto()
        node.CopyFrom(by_name[name])
        node.name = name
        nodes.append(node)
    del g.node[:]
    g.node.extend(nodes)
    keep = [p for p in out.metadata_props if not p.key.startswith(PREFIX)]
    del out.metadata_props[:]
    out.metadata_props.extend(keep)
    props = {
        "plan": plan.to_json(),
        "schema_version": str(plan.schema_version),
        "arena_size": str(plan.arena_size),
        "lower_bound": str(plan.lower_bound),
        "alignment": str(plan.alignment),
    }
    for k, v in props.items():
        p = out.metadata_props.add()
        p.key, p.value = PREFIX + k, v
    return out


#: how onnx.checker starts an error on an op it has no schema for (at the model's opset)
UNKNOWN_SCHEMA = "No Op registered for "


def _source_check_error(source: str | os.PathLike[str]) -> str | None:
    """onnx.checker's error on the model file ``source`` as it is (``None``: it passes or cannot be read)."""
    try:
        onnx.checker.check_model(onnx.load(os.fspath(source), load_external_data=False))
    except onnx.checker.ValidationError as exc:
        return str(exc)
    except (OSError, ValueError):
        return None
    return None


def render_annotated(
    model: onnx.ModelProto, plan: MemoryPlan, source: str | os.PathLike[str], path: str | os.PathLike[str],
    flag: str = "--annotate",
) -> bytes:
    """The annotated model's bytes, for writing to ``path``; checks it with ``onnx.checker`` first.

    A model with external weights must be written into ``source``'s folder, where
    its data references resolve. ``flag``: the option that named ``path``, for errors.
    """
    dest = Path(os.path.realpath(path))
    has_external = any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    if has_external and dest.parent != Path(os.path.realpath(source)).parent:
        raise OnnxmemError(
            f"{flag} {show_name(os.fspath(path))}: the model keeps its weights in external files, "
            f"whose references only resolve next to it; write the annotated model into "
            f"{show_name(str(Path(source).parent))}"
        )
    out = annotate_model(model, plan)
    here = os.getcwd()
    source = os.path.realpath(source)
    try:
        if has_external:
            # the checker finds external data relative to the working folder
            os.chdir(dest.parent)
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        if not (str(exc).startswith(UNKNOWN_SCHEMA) and str(exc) == _source_check_error(source)):
            first = cut_words(str(exc), 300)
            raise OnnxmemError(f"the annotated model fails onnx.checker: {first}") from None
        # the model given fails the checker with the same first error, an op onnx has no schema for
        # at that opset (onnxruntime registers its own: LayerNormalization below opset 17 in its
        # training graphs); every other error is refused
    finally:
        os.chdir(here)
    try:
        return out.SerializeToString()  # type: ignore[no-any-return]
    except ValueError as exc:  # past protobuf's 2 GiB
        raise OnnxmemError(f"the annotated model cannot be serialized: {exc}") from None


def write_annotated(
    model: onnx.ModelProto, plan: MemoryPlan, source: str | os.PathLike[str], path: str | os.PathLike[str]
) -> None:
    """Write the annotated model atomically (see :func:`render_annotated`); never over ``source``."""
    check_output_path(path, "--annotate")
    write_bytes_atomic(path, render_annotated(model, plan, source, path), "--annotate", inputs=[source])


def plan_from_model(model: onnx.ModelProto, where: str = "model") -> MemoryPlan | None:
    """The plan an annotated model carries, or ``None``."""
    for p in model.metadata_props:
        if p.key == PREFIX + "plan":
            label = f"{where} ({PREFIX}plan)"
            data = p.value.encode("utf-8") if isinstance(p.value, str) else bytes(p.value)
            if len(data) > MAX_PLAN_BYTES:
                raise PlanError(f"{label} has {len(data):,} bytes, more than the {MAX_PLAN_BYTES:,} of a "
                                "plan onnxmem reads; re-annotate the model")
            return plan_from_dict(parse_plan_json(data, label), label)
    return None
