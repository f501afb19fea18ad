"""Loading, dtypes and sizes, and shape inference on real files."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.errors import ModelError, ShapeError
from onnxmem.graph import build_view
from onnxmem.model import (
    check_external_data,
    load_model,
    load_model_data,
    parse_input_shape,
    tensor_bytes,
)
from onnxmem.runtime.ort import infer_measured_shapes
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi


@pytest.mark.parametrize(
    "dtype,shape,size",
    [
        (TensorProto.FLOAT, (2, 3), 24),
        (TensorProto.BOOL, (7,), 7),
        (TensorProto.FLOAT16, (5,), 10),
        (TensorProto.BFLOAT16, (5,), 10),
        (TensorProto.DOUBLE, (3,), 24),
        (TensorProto.COMPLEX64, (3,), 24),
        (TensorProto.COMPLEX128, (3,), 48),
        (TensorProto.FLOAT8E4M3FN, (9,), 9),
        (TensorProto.FLOAT8E5M2FNUZ, (9,), 9),
        (TensorProto.INT4, (3, 3), 5),  # ceil(4 * 9 / 8)
        (TensorProto.UINT4, (1,), 1),
        (TensorProto.FLOAT4E2M1, (5,), 3),
        (TensorProto.INT64, (), 8),
        (TensorProto.FLOAT, (0, 4), 0),
    ],
)
def test_tensor_bytes(dtype, shape, size):
    assert tensor_bytes(dtype, shape) == size


def test_sizes_refuse_strings_negative_dims_and_overflow():
    with pytest.raises(ShapeError, match="dtype string"):
        tensor_bytes(TensorProto.STRING, (2,), "names")
    with pytest.raises(ShapeError, match="negative dim -1 on axis 1"):
        tensor_bytes(TensorProto.FLOAT, (2, -1), "x")
    with pytest.raises(ShapeError, match="above onnxmem.s limit of 2\\^62"):
        tensor_bytes(TensorProto.FLOAT, (2**40, 2**30), "huge")
    with pytest.raises(ShapeError, match="unknown tensor element type 999"):
        tensor_bytes(999, (1,), "x")


def test_load_errors(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "nope.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01not a model at all" * 10)
    with pytest.raises(ModelError, match="not a readable ONNX model|holds no ONNX graph"):
        load_model(junk)
    good = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])])
    data = good.SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="truncated"):
        load_model(cut)


def test_external_data_outside_folder_is_refused(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key, e.value = "location", "../secret.bin"
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])], [w])
    sub = tmp_path / "sub"
    sub.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    path = sub / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(path)


def test_external_data_is_not_read(models_dir, tmp_path):
    # planning reads shapes only: the model planned without its data file beside it
    import shutil

    shutil.copy(models_dir / "external_data.onnx", tmp_path / "external_data.onnx")
    model = load_model(tmp_path / "external_data.onnx")
    shapes = infer_shapes(model)
    view = build_view(model, shapes)
    assert view.weights_size == 4 * (256 * 512 + 512 + 512 * 512 + 512 + 512 * 128 + 128)


def test_the_loader_gives_the_weight_files_it_checked(tmp_path):
    """``load_model_data``: the model as ``load_model`` reads it, and the external weights'
    references its checks found, the same as a walk of the loaded model finds."""
    ws = [numpy_helper.from_array(np.full((4, 4), i, np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["b"]),
             helper.make_node("Add", ["b", "w2"], ["y"])]
    m = make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], ws)
    inline = tmp_path / "inline.onnx"
    onnx.save(m, inline)
    onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    model, refs = load_model_data(tmp_path / "m.onnx")
    assert model == load_model(tmp_path / "m.onnx")
    assert [(r.tensor, r.offset, r.length) for r in refs] == [(f"w{i}", 64 * i, 64) for i in range(3)]
    assert {r.path for r in refs} == {(tmp_path / "m.data").resolve()}
    assert refs == check_external_data(model, tmp_path, need_files=False)
    assert load_model_data(inline)[1] == []


def test_symbolic_dims_need_binding(models_dir):
    model = load_model(models_dir / "transformer_block.onnx")
    with pytest.raises(ShapeError, match=r"'hidden' \[batch, seq, 64\]: pass --input-shape "
                       r"hidden=N0xN1x64 \(or --dim batch=N --dim seq=N\)"):
        infer_shapes(model)
    shapes = infer_shapes(model, dims={"batch": 2, "seq": 8})
    assert shapes.shapes["output"] == (2, 8, 64)
    pinned = infer_shapes(model, input_shapes={"hidden": (3, 5, 64)})
    assert pinned.shapes["output"] == (3, 5, 64)


def test_input_shape_errors(models_dir):
    model = load_model(models_dir / "transformer_block.onnx")
    with pytest.raises(ShapeError, match="not a graph input"):
        infer_shapes(model, input_shapes={"nope": (1,)})
    with pytest.raises(ShapeError, match="rank 2 but input 'hidden' has rank 3"):
        infer_shapes(model, input_shapes={"hidden": (1, 64)})
    assert parse_input_shape("x=1x3x224x224") == ("x", (1, 3, 224, 224))
    with pytest.raises(ShapeError, match="not NAME="):
        parse_input_shape("1x3")


def test_data_dependent_shapes_need_measuring():
    # NonZero's output length depends on the data
    m = make_model(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)],
        [vi("x", [3, 4])],
        [vi("y", None)],
    )
    with pytest.raises(ShapeError, match="--measure-shapes"):
        infer_shapes(m)
    shapes = infer_measured_shapes(m)
    assert shapes.shapes["nz"][0] == 2
    assert shapes.sources["nz"] == "measured"


def test_exporter_value_info_is_not_trusted():
    # the file claims a wrong shape for t; inference recomputes it
    m = make_model(
        [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
        [vi("x", [2, 8])],
        [vi("y", [2, 8])],
        value_info=[vi("t", [1, 1])],
    )
    assert infer_shapes(m).shapes["t"] == (2, 8)


def test_constants_from_weights_are_weights(light_models):
    model = load_model(light_models[0])  # alexnet: ConstantOfShape over initializers
    view = build_view(model, infer_shapes(model))
    assert view.tensors["conv1_w_0"].kind == "weight"
    assert all(t.kind != "weight" or t.producer is None or view.ops[t.producer].op_type == "ConstantOfShape"
               for t in view.tensors.values())


def test_subgraph_captures_are_reads(models_dir):
    model = load_model(models_dir / "control_flow.onnx")
    view = build_view(model, infer_shapes(model))
    if_op = next(op for op in view.ops if op.op_type == "If")
    loop_op = next(op for op in view.ops if op.op_type == "Loop")
    assert if_op.captures and all(c in view.tensors for c in if_op.captures)
    assert loop_op.captures


def test_undefined_input_and_cycle_are_errors():
    from onnxmem.scheduling import reorder

    m = make_model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])])
    with pytest.raises(ModelError, match="value 'ghost' read by node 'r' \\(Relu\\) is produced by no node"):
        build_view(m, _shapes(m))
    cyc = make_model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")],
        [vi("x", [2])],
        [vi("a", [2])],
    )
    view = build_view(cyc, _shapes(cyc))
    with pytest.raises(ModelError, match="cycle through nodes 'n1', 'n2'"):
        reorder(view, "file")


def _shapes(m: onnx.ModelProto):
    from onnxmem.shapes import ShapeInfo

    names = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}
    return ShapeInfo({n: TensorProto.FLOAT for n in names}, {n: (2,) for n in names})


def _domains_model(with_inverse: bool) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="r"),
        helper.make_node("Gelu", ["r"], ["g"], domain="com.microsoft", name="gelu"),
        helper.make_node("Binarizer", ["g"], ["y"], domain="ai.onnx.ml", name="bin", threshold=0.5),
    ]
    if with_inverse:
        nodes[1] = helper.make_node("Inverse", ["r"], ["g"], domain="com.microsoft", name="inv")
    g = helper.make_graph(nodes, "t", [vi("x", [4, 4])], [vi("y", [4, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 10
    return m


def test_other_domains(tmp_path, monkeypatch):
    # com.microsoft Gelu: a rule of onnxmem.shapes.training; ai.onnx.ml Binarizer: onnx knows it
    monkeypatch.chdir(tmp_path)
    shapes = infer_shapes(_domains_model(False))
    assert shapes.shapes["g"] == (4, 4) and shapes.sources["g"] == "training-rule"
    assert shapes.shapes["y"] == (4, 4)
    # com.microsoft Inverse is known to no inference: measured by running it once
    inverse = _domains_model(True)
    with pytest.raises(ShapeError, match="--measure-shapes"):
        infer_shapes(inverse)
    assert infer_measured_shapes(inverse).shapes["g"] == (4, 4)
    assert list(tmp_path.iterdir()) == []  # nothing written to the working folder


# ---------------------------------------------------------------- local functions


def test_inlined_size_and_depth_of_local_functions_without_expanding_them():
    """F0 = Relu; F{k} calls F{k-1} twice: the graph calling F9 inlines to 2^9 Relus, 9 calls deep;
    an If around the call adds its level."""
    from onnxmem.model.functions import inlined_size

    from .test_hostile import chain_of_functions

    m = chain_of_functions(10, calls=2)
    found = inlined_size(m, 10_000_000, 24)
    assert (found.nodes, found.depth, found.deepest) == (512, 10, ("local", "F9", ""))
    branch = helper.make_graph([helper.make_node("F9", ["x"], ["z"], domain="local")], "b", [], [vi("z", [1, 4])])
    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))
    m.graph.node.extend([cond, helper.make_node("If", ["c"], ["w"], then_branch=branch, else_branch=branch)])
    found = inlined_size(m, 10_000_000, 24)
    assert (found.nodes, found.depth) == (512 + 2 + 2 * 512, 11)
    with pytest.raises(ModelError, match="'F7' expands to more than 100 nodes"):
        inlined_size(m, 100, 24)
    with pytest.raises(ModelError, match="'F5' nests calls and subgraphs 5 deep"):
        inlined_size(m, 10_000_000, 4)


def test_functions_value_info_dims_never_reach_inference_as_file_text():
    """A dim name in a local function's value_info is renamed for inference like the graph's."""
    from onnxmem.model import rename_dims

    from .test_hostile import chain_of_functions

    m = chain_of_functions(2)
    m.functions[0].value_info.append(vi("b", ["__import__('os')", 4]))
    assert rename_dims(m) == {"__import__('os')": "onnxmem_dim_0"}
    assert m.functions[0].value_info[0].type.tensor_type.shape.dim[0].dim_param == "onnxmem_dim_0"


def test_copy_without_leaves_out_the_fields_named(tmp_path):
    from onnxmem.model import copy_without
    from onnxmem.model.generate import transformer

    m = transformer(2, 0)
    m.metadata_props.add(key="k", value="v")
    m.graph.value_info.append(vi("x_declared", [1]))
    path = tmp_path / "t.onnx"
    onnx.save(m, path)
    model = load_model(path)
    got = copy_without(model, ("initializer", "value_info"))
    want = onnx.ModelProto()
    want.CopyFrom(model)
    del want.graph.initializer[:]
    del want.graph.value_info[:]
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert len(model.graph.initializer) > 0 and len(model.graph.value_info) == 1  # the model as it was


def test_inference_copy_keeps_small_weights_and_types_large_ones_as_inputs(tmp_path):
    from onnxmem.shapes.engines import strip_for_inference

    big = numpy_helper.from_array(np.ones((40, 40), np.float32), "big")
    small = numpy_helper.from_array(np.array([1, 40, 40], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "big"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])],
        "g", [vi("x", [40, 40])], [vi("z", [1, 40, 40])],
        initializer=[big, small], value_info=[vi("y", [40, 40])])
    m = helper.make_model(graph)
    m.ir_version = 10
    work = strip_for_inference(m)
    assert [i.name for i in work.graph.initializer] == ["shape"]
    assert [i.name for i in work.graph.input] == ["x", "big"]
    assert list(work.graph.input[1].type.tensor_type.shape.dim) == list(
        vi("big", [40, 40]).type.tensor_type.shape.dim)
    assert not work.graph.value_info and [n.op_type for n in work.graph.node] == ["Add", "Reshape"]
    assert len(m.graph.initializer) == 2 and len(m.graph.value_info) == 1  # the model as it was


@pytest.mark.parametrize("inputs, captures, reads", [
    (("a", "b"), (), ("a", "b")),
    (("a", "a", "b"), (), ("a", "b")),
    (("a", "", "b"), (), ("a", "b")),
    ((), ("c",), ("c",)),
    (("a", "b"), ("b", "c", ""), ("a", "b", "c")),
    (("",), (), ()),
], ids=["plain", "repeated", "omitted", "captures only", "captures", "omitted only"])
def test_op_reads_each_value_once_in_first_use_order(inputs, captures, reads):
    from onnxmem.graph import Op

    op = Op(0, "n", "Add", "", inputs, ("y",), captures)
    assert op.reads == reads
    assert (op.reads is op.inputs) == (inputs == reads)


def test_view_holds_one_str_per_value_name():
    from onnxmem.model.generate import transformer

    m = transformer(3, 0)
    shapes = infer_shapes(m)
    view = build_view(m, shapes)
    key = {k: k for k in view.tensors}
    for op in view.ops:
        for name in (*op.inputs, *op.outputs):
            if name:
                assert name is key[name]
        assert op.reads is op.inputs  # no repeated or omitted input: one tuple for both
    assert all(t.name is k for k, t in view.tensors.items())
    shown = {k: k for k in shapes.shapes}
    assert all(k is shown[k] for k in view.tensors if k in shown)
    # equal shapes are one tuple
    assert len({id(s) for s in shapes.shapes.values()}) == len(set(shapes.shapes.values()))


def test_every_stored_tensor_is_found_with_its_escaped_label(tmp_path):
    # the checks walk the tensors with their places and make a label only for an error: the labels
    # are the ones a message shows, escaped, for every kind of place a tensor can have
    from onnxmem.model.tensors import graph_tensors, site_label, stored_tensors, tensor_sites

    sparse = helper.make_sparse_tensor(helper.make_tensor("v\x1b[31m", TensorProto.FLOAT, [1], [1.0]),
                                       helper.make_tensor("i", TensorProto.INT64, [1], [0]), [3])
    body = helper.make_graph([helper.make_node("Constant", [], ["b"], name="bn",
                                               value=helper.make_tensor("bt", TensorProto.FLOAT, [1], [1.0]))],
                             "body", [], [vi("b", [1])])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c\n"], value=helper.make_tensor("t", TensorProto.FLOAT, [1], [2.0])),
         helper.make_node("If", ["cond"], ["o"], name="if", then_branch=body, else_branch=body)],
        "g", [vi("cond", [], TensorProto.BOOL)], [vi("o", [1])],
        initializer=[helper.make_tensor("w'", TensorProto.FLOAT, [1], [1.0])], sparse_initializer=[sparse])
    fn = helper.make_function("dom", "fn", [], ["y"], [helper.make_node(
        "Constant", [], ["y"], value=helper.make_tensor("ft", TensorProto.FLOAT, [1], [1.0]))],
        [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, functions=[fn])
    assert [label for label, _ in tensor_sites(model)] == [
        "tensor \"w'\"",
        "sparse tensor 'v\\x1b[31m' (values)",
        "sparse tensor 'v\\x1b[31m' (indices)",
        "attribute 'value' of node 'c\\n' ('Constant')",
        "attribute 'value' of node 'bn' ('Constant')",
        "attribute 'value' of node 'bn' ('Constant')",
        "attribute 'value' of node 'y' ('Constant') in local function 'dom'::'fn'",
    ]
    assert [t.name for t in graph_tensors(model)] == ["w'", "v\x1b[31m", "i", "t", "bt", "bt", "ft"]
    assert [site_label(site, t) for site, t in stored_tensors(model)] == [label for label, _ in tensor_sites(model)]
    # and a damaged one is named by it (the loader refuses sparse weights first: none here)
    graph.initializer[0].dims[0] = -1
    del graph.sparse_initializer[:]
    model = helper.make_model(graph, functions=[fn])
    model.ir_version = 10
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match=r"tensor \"w'\" has negative dim -1 on axis 0"):
        load_model(path)


def test_every_stored_tensor_is_labelled_by_where_it_sits():
    """Initializers, sparse ones, tensor attributes, in bodies and local functions: each with its
    escaped label (made for messages only), in the order the loader's checks read them."""
    from onnx import helper, numpy_helper

    from onnxmem.model import tensor_sites

    def one(name: str = "") -> onnx.TensorProto:
        return numpy_helper.from_array(np.ones(1, np.float32), name)

    sparse = helper.make_sparse_tensor(one("s"), numpy_helper.from_array(np.zeros(1, np.int64), "s_idx"), [4])
    branch = helper.make_graph([helper.make_node("Identity", ["iw"], ["o"])], "then", [],
                               [helper.make_tensor_value_info("o", onnx.TensorProto.FLOAT, [1])], [one("iw")])
    nodes = [helper.make_node("Constant", [], ["c"], name="k\n", value=one()),
             helper.make_node("Constant", [], ["d"], value=one()),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch)]
    f = helper.make_function("dom", "F", ["x"], ["z"], [helper.make_node("Constant", [], ["z"], name="fk", value=one())],
                             [helper.make_opsetid("", 17)])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])], [one("w")],
                          sparse_initializer=[sparse])
    m = helper.make_model(g, functions=[f], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dom", 1)])
    assert [(label, t.name) for label, t in tensor_sites(m)] == [
        ("tensor 'w'", "w"),
        ("sparse tensor 's' (values)", "s"),
        ("sparse tensor 's' (indices)", "s_idx"),
        ("attribute 'value' of node 'k\\n' ('Constant')", ""),
        ("attribute 'value' of node 'd' ('Constant')", ""),
        ("tensor 'iw'", "iw"),
        ("tensor 'iw'", "iw"),
        ("attribute 'value' of node 'fk' ('Constant') in local function 'dom'::'F'", ""),
    ]


def test_loader_names_a_damaged_attribute_tensor(tmp_path):
    from onnx import helper

    bad = onnx.TensorProto(name="", data_type=onnx.TensorProto.FLOAT, dims=[4], raw_data=b"\0" * 12)
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], name="k", value=bad)], "g", [],
                          [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(ModelError, match=r"^attribute 'value' of node 'k' \('Constant'\) of dtype float32 and shape "
                                         r"\[4\] holds 12 bytes of data where it needs 16"):
        load_model(path)


@pytest.mark.parametrize("axis", [[0.5], "x", [1, 2]])
def test_a_rule_reading_a_hostile_attribute_leaves_the_value_unknown(axis):
    """A LayerNormalization whose ``axis`` is a list or a string (a hostile file): the training
    rules leave its statistics unknown, where ``int()`` of the attribute was a traceback."""
    from onnxmem.shapes.training import complete_shapes

    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], axis=axis)
    m = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(3, np.float32), "g"), numpy_helper.from_array(np.zeros(3, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 17)])
    known = {"x": (TensorProto.FLOAT, (2, 3))}
    complete_shapes(m, known, rules=None)
    assert "mean" not in known and "inv" not in known
