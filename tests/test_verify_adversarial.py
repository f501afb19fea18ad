"""verify against cases meant to break it: random ops run twice (the reference, then the arena),
the whole-model reference in pieces, and weights mapped from their data files."""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import make_model, vi

GREEDY = PlanOptions(solver="greedy", order="file")


def _planned(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path, plan_model(path, GREEDY)


def _moved(plan, moved, onto):
    """``plan`` with tensor ``moved`` put at the offset of tensor ``onto``."""
    at = plan.tensor(onto).offset
    return dataclasses.replace(plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == moved else t
                                                   for t in plan.tensors))


def _draws(seeded: bool) -> list[onnx.NodeProto]:
    seed = {"seed": 3.0} if seeded else {}
    return [helper.make_node("RandomNormalLike", ["x"], ["n1"], name="n1", **seed),
            helper.make_node("RandomUniformLike", ["x"], ["n2"], name="n2", **seed),
            helper.make_node("Add", ["n1", "n2"], ["s"], name="sum"),
            helper.make_node("Dropout", ["s", "ratio", "train"], ["y"], name="drop", **({"seed": 3} if seeded else {}))]


@pytest.mark.parametrize("seeded", [True, False], ids=["seeded", "unseeded"])
def test_a_random_op_verifies_and_a_clobber_of_its_draws_is_caught(tmp_path, seeded):
    """Each random node runs twice (its reference run, then in the arena): a right plan passes,
    each output identical to the reference; n2 moved onto n1, which sum still reads, is caught."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    model = make_model(_draws(seeded), [vi("x", [4, 8])], [vi("y", [4, 8])], inits)
    path, p = _planned(tmp_path, model)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.reference == "nodes" and ex.findings == (), ex.findings
    assert ex.nodes_run == 4 and all(c.identical for c in ex.outputs)
    bad = execute_plan(_moved(p.plan, "n2", "n1"), p.model, p.view, model_path=path)
    assert bad.findings and bad.findings[0].kind == "clobber" and bad.findings[0].tensor == "n1"


def test_a_random_op_in_a_loop_body_verifies(tmp_path):
    """A Loop whose body draws each iteration: every iteration's draw is checked against its own
    reference run, and the plan passes."""
    body = helper.make_graph(
        [helper.make_node("RandomNormalLike", ["a_in"], ["n"], name="draw", seed=1.0),
         helper.make_node("Add", ["a_in", "n"], ["a_out"], name="add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("a_in", [2, 8])],
        [vi("cond_out", [], TensorProto.BOOL), vi("a_out", [2, 8])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "yes")]
    model = make_model([helper.make_node("Relu", ["x"], ["a0"], name="start"),
                        helper.make_node("Loop", ["trips", "yes", "a0"], ["a_n"], name="loop", body=body),
                        helper.make_node("Relu", ["a_n"], ["y"], name="end")],
                       [vi("x", [2, 8])], [vi("y", [2, 8])], inits)
    path, p = _planned(tmp_path, model)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and all(c.identical for c in ex.outputs), ex.findings


def _skips() -> onnx.ModelProto:
    """A graph input and a weight that are graph outputs too; a value read far later (a, by add);
    a graph output read by a later node (e); a constant node's weight (c); the input read last."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32), "W")
    nodes = [helper.make_node("Constant", [], ["c"], name="const",
                              value=numpy_helper.from_array(np.full((4, 8), 0.5, np.float32))),
             helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Sigmoid", ["a"], ["b"], name="sigmoid"),
             helper.make_node("Tanh", ["b"], ["t"], name="tanh"),
             helper.make_node("Mul", ["t", "c"], ["d"], name="mul"),
             helper.make_node("Add", ["d", "a"], ["e"], name="add"),
             helper.make_node("MatMul", ["e", "W"], ["f"], name="matmul"),
             helper.make_node("Add", ["f", "x"], ["g"], name="late"),
             helper.make_node("Relu", ["g"], ["y"], name="last")]
    outs = [vi("y", [4, 8]), vi("e", [4, 8]), vi("x", [4, 8]), vi("W", [8, 8])]
    return make_model(nodes, [vi("x", [4, 8])], outs, [w])


@pytest.mark.parametrize("piece_bytes", [1, 200, 1 << 40], ids=["a node a piece", "some nodes", "one piece"])
def test_pieces_of_any_size_give_the_whole_runs_bits(tmp_path, piece_bytes):
    """Every value, each piece size: the whole run's bits; the pieces verify the plan, beside
    and in line, every output identical (the graph input and the weight among them)."""
    from onnxmem.runtime.arena import ArenaRun
    from onnxmem.runtime.sessions import host_array, run_values

    path, p = _planned(tmp_path, _skips())
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(piece_bytes=piece_bytes), path)
    run.load_inputs()
    values = run.reference_values()
    pieces = run.reference_pieces(values)
    whole = run_values(run.full, run.feeds, values, run.weights)
    assert set(values) == {"a", "b", "t", "d", "e", "f", "g", "y"}
    for name in values:
        got, want = host_array(pieces.pop(name)), host_array(whole[name])
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), name
    assert not pieces.kept and not pieces.given
    for beside in (True, False):
        ex = execute_plan(p.plan, p.model, p.view, model_path=path,
                          options=VerifyOptions(beside=beside, piece_bytes=piece_bytes))
        assert ex.reference == "whole" and ex.findings == (), ex.findings
        assert [c.name for c in ex.outputs] == ["y", "e", "x", "W"] and all(c.identical for c in ex.outputs)


@pytest.mark.parametrize("moved, onto", [("b", "a"), ("f", "e"), ("g", "e"), ("b", "x")])
def test_pieces_find_what_each_node_again_finds(tmp_path, moved, onto):
    """A value moved onto one a later piece reads (a, the long skip; e, a graph output read
    later; x, the graph input read last): in one-node pieces, beside and in line, the first finding is the run of each
    node again's."""
    path, p = _planned(tmp_path, _skips())
    bad = _moved(p.plan, moved, onto)
    nodes = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert nodes.findings, f"{moved} onto {onto} was not caught"
    for beside in (True, False):
        ex = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(beside=beside, piece_bytes=1))
        assert ex.reference == "whole" and ex.findings[0] == nodes.findings[0] and ex.nodes_run == nodes.nodes_run


@pytest.mark.parametrize("reference", ["nodes", "whole"])
def test_a_tensor_past_the_arena_is_refused_before_any_node_runs(tmp_path, reference):
    """The largest value moved to the arena's last aligned offset: its kernel, bound there, would
    write past the arena's memory (a heap overflow, a crash or worse). The run refuses the plan
    before it binds anything, naming the tensor and its bytes, as the static proof finds it."""
    from onnxmem.core.errors import PlanInvalid
    from onnxmem.proof.plan import prove_plan

    path, p = _planned(tmp_path, _skips())
    big = max(p.plan.tensors, key=lambda t: t.size)
    at = p.plan.arena_size - p.plan.alignment
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == big.name else t
                                                    for t in p.plan.tensors))
    assert big.size > p.plan.alignment and any(f.kind == "arena" for f in prove_plan(bad, p.view))
    want = (f"tensor '{big.name}' would take bytes [{at}, {at + big.size}) of an arena of {p.plan.arena_size} B, "
            "outside it")
    with pytest.raises(PlanInvalid, match=re.escape(want)):
        execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(reference=reference))


def _fails_late() -> onnx.ModelProto:
    """a, b, c, then a Gather whose indices (an input) may fall outside c: the node fails to run."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Sigmoid", ["a"], ["b"], name="sigmoid"),
             helper.make_node("Add", ["b", "a"], ["c"], name="add"),
             helper.make_node("Gather", ["c", "i"], ["g"], name="gather"),
             helper.make_node("Relu", ["g"], ["y"], name="last")]
    return make_model(nodes, [vi("x", [4, 8]), vi("i", [2], TensorProto.INT64)], [vi("y", [2, 8])])


@pytest.mark.parametrize("beside", [True, False], ids=["beside", "in line"])
def test_a_node_that_fails_in_a_piece_comes_after_the_findings_before_it(tmp_path, beside):
    """gather fails on these inputs, inside the one piece of the reference: a plan that clobbers
    a before it gets the first finding of the run of each node again, not the piece's failure;
    a right plan gets the failure, naming the node."""
    from onnxmem.core.errors import RuntimeBackendError

    path, p = _planned(tmp_path, _fails_late())
    inputs = {"i": np.array([1, 9], np.int64)}
    bad = _moved(p.plan, "b", "a")
    nodes = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes", inputs=inputs))
    assert nodes.findings[0].kind == "clobber" and nodes.findings[0].tensor == "a"
    opts = VerifyOptions(beside=beside, inputs=inputs)
    ex = execute_plan(bad, p.model, p.view, model_path=path, options=opts)
    assert ex.reference == "whole" and ex.findings[0] == nodes.findings[0] and ex.nodes_run == nodes.nodes_run
    with pytest.raises(RuntimeBackendError, match=r"the reference\), at node 'gather' \(Gather\): .*out of data bounds"):
        execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)


def _external_model(folder, weights, opset=21):
    """x[2, 8] plus each weight (name -> (TensorProto, x's op)) kept in w.data, in order, each at
    an offset 16 bytes apart from the last one's end plus ``pad`` (a misaligned one at 16k + 4)."""
    data, inits, nodes, prev = bytearray(), [], [], "x"
    for k, (name, (t, pad, build)) in enumerate(weights.items()):
        data += bytes(-len(data) % 16 + pad)
        raw = t.raw_data
        off = len(data)
        data += raw
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "w.data"), ("offset", str(off)), ("length", str(len(raw)))):
            t.external_data.add(key=key, value=value)
        inits.append(t)
        out = "y" if k == len(weights) - 1 else f"h{k}"
        nodes += build(prev, name, out)
        prev = out
    (folder / "w.data").write_bytes(bytes(data))
    path = folder / "ext.onnx"
    onnx.save(make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], inits, opset=opset), path)
    return path


def _add(prev, name, out):
    return [helper.make_node("Add", [prev, name], [out], name=f"add_{name}")]


def _cast_add(prev, name, out):
    return [helper.make_node("Cast", [name], [f"{name}_f"], name=f"cast_{name}", to=TensorProto.FLOAT),
            helper.make_node("Add", [prev, f"{name}_f"], [out], name=f"add_{name}")]


def _dequantize_add(prev, name, out):
    scale = f"{name}_scale"
    return [helper.make_node("Constant", [], [scale], name=f"s_{name}", value=numpy_helper.from_array(
                np.array(0.25, np.float32))),
            helper.make_node("DequantizeLinear", [name, scale], [f"{name}_f"], name=f"dq_{name}"),
            helper.make_node("Add", [prev, f"{name}_f"], [out], name=f"add_{name}")]


def test_external_weights_of_every_kind_verify_and_the_files_stay(tmp_path):
    """float32 mapped and misaligned, float16 and float64 mapped, bool, bfloat16 and packed int4 /
    uint4 read (weights of types numpy lacks, handed to onnxruntime in ONNX's layout): verify
    passes, its outputs those of an ordinary run, the data file is as it was, and a second verify
    of the same files passes too."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    rng = np.random.default_rng(5)
    f32 = rng.standard_normal((2, 8)).astype(np.float32)
    weights = {
        "a": (numpy_helper.from_array(f32, "a"), 0, _add),
        "b": (numpy_helper.from_array(f32 * 2, "b"), 4, _add),  # misaligned: read
        "c": (numpy_helper.from_array(f32.astype(np.float16), "c"), 0, _cast_add),
        "d": (numpy_helper.from_array(f32.astype(np.float64), "d"), 0, _cast_add),
        "e": (numpy_helper.from_array(f32 > 0, "e"), 0, _cast_add),
        "f": (helper.make_tensor("f", TensorProto.BFLOAT16, [2, 8], (f32 * 3).reshape(-1).tolist()), 0, _cast_add),
        "g": (helper.make_tensor("g", TensorProto.INT4, [2, 8], rng.integers(-8, 8, 16).tolist()), 0,
              _dequantize_add),
        "h": (helper.make_tensor("h", TensorProto.UINT4, [2, 8], rng.integers(0, 16, 16).tolist()), 4,
              _dequantize_add),
    }
    for name, (t, _, _) in weights.items():  # every kind in raw_data, as the data file holds it
        if not t.raw_data:
            arr = onnx.numpy_helper.to_array(t)
            weights[name] = (onnx.numpy_helper.from_array(arr, name), *weights[name][1:])
    path = _external_model(tmp_path, weights)
    before = (tmp_path / "w.data").read_bytes()
    p = plan_model(path, GREEDY)  # an ordinary whole-model run from the files agrees bit for bit
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert ex.findings == () and ex.outputs[0].identical and ex.outputs[0].whole_model_diff == 0.0
    for _ in range(2):
        got = CliRunner().invoke(main, ["verify", str(path)])
        assert got.exit_code == 0 and "  output  y: ok, against the reference: identical" in got.output, got.output
        assert (tmp_path / "w.data").read_bytes() == before


def _checked_weight(folder):
    """The checked external-data reference of a [4, 4] float weight in ``folder``/w.bin."""
    from onnxmem.model.external import check_external_data

    folder.mkdir()
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    (folder / "w.bin").write_bytes(w.tobytes())
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="w.bin")
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", [1, 4])],
                       [vi("y", [1, 4])], [t])
    (ref,) = check_external_data(model, folder)
    return ref


def test_a_data_file_cut_short_after_the_checks_is_read_and_refused(tmp_path):
    """The data file cut short after the checks, before the map: not mapped (past its end), and
    the plain read stops at the end in one line."""
    from onnxmem.core.errors import ModelError
    from onnxmem.model.external import _mapped, _read

    ref = _checked_weight(tmp_path / "model")
    os.truncate(tmp_path / "model" / "w.bin", 16)
    assert _mapped(ref, {}) is None
    with pytest.raises(ModelError, match="ended after 16 of 64 bytes") as caught:
        _read(ref)
    assert "\n" not in str(caught.value)


def test_a_link_out_of_the_folder_swapped_in_after_the_checks_is_not_followed(tmp_path):
    """The data file replaced by a link to a file outside the model's folder after the loader
    checked it: neither the mapped read nor the plain one reads through it; one line says so."""
    from onnxmem.core.errors import ModelError
    from onnxmem.model.external import _mapped, _read

    folder, outside = tmp_path / "model", tmp_path / "secret.bin"
    outside.write_bytes(bytes(range(64)))
    ref = _checked_weight(folder)
    (folder / "w.bin").unlink()
    (folder / "w.bin").symlink_to(outside)
    assert _mapped(ref, {}) is None
    with pytest.raises(ModelError, match="is a link") as caught:
        _read(ref)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("elem_type", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2],
                         ids=["bfloat16", "float8e4m3fn", "float8e5m2"])
def test_values_of_types_numpy_lacks_verify(tmp_path, elem_type):
    """A value of a type numpy lacks, in the arena and a graph output: the reference's value is
    read in ONNX's layout, and the plan verifies, each output identical (each reference)."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="to", to=elem_type),
             helper.make_node("Cast", ["h"], ["y"], name="back", to=TensorProto.FLOAT),
             helper.make_node("Identity", ["h"], ["z"], name="keep")]
    model = make_model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8]), vi("z", [4, 8], elem_type)], opset=21)
    path, p = _planned(tmp_path, model)
    for opts in (VerifyOptions(reference="nodes"), VerifyOptions(beside=False), VerifyOptions(beside=True)):
        ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
        assert ex.findings == () and [(c.name, c.identical) for c in ex.outputs] == [("y", True), ("z", True)]


@pytest.mark.parametrize("elem_type", [TensorProto.INT4, TensorProto.UINT4], ids=["int4", "uint4"])
def test_packed_values_verify(tmp_path, elem_type):
    """int4 / uint4 values, packed two to a byte (7 columns: a half-used last byte), as a graph
    input, in the arena and as a graph output: the plan verifies, each output identical."""
    zp = helper.make_tensor("zp", elem_type, [], [1])
    nodes = [helper.make_node("DequantizeLinear", ["xq", "sc", "zp"], ["x"], name="dq_in"),
             helper.make_node("QuantizeLinear", ["x", "sc", "zp"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["y"], name="dq")]
    model = make_model(nodes, [vi("xq", [4, 7], elem_type)], [vi("y", [4, 7]), vi("q", [4, 7], elem_type)],
                       [numpy_helper.from_array(np.array(0.5, np.float32), "sc"), zp], opset=21)
    path, p = _planned(tmp_path, model)
    assert p.plan.tensor("q").size == 14
    xq = np.random.default_rng(7).integers(-8 if elem_type == TensorProto.INT4 else 0, 8, (4, 7))
    given = {"xq": xq.astype(helper.tensor_dtype_to_np_dtype(elem_type))}
    for opts in (VerifyOptions(reference="nodes", inputs=given), VerifyOptions(beside=False, inputs=given),
                 VerifyOptions(beside=True, inputs=given)):
        ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
        assert ex.findings == () and [(c.name, c.identical) for c in ex.outputs] == [("y", True), ("q", True)]


def test_nodes_alike_but_for_an_omitted_input_a_repeated_one_or_a_value_type_keep_their_own_sessions(tmp_path):
    """Clip with its min omitted (max given) against Clip with min alone; Add of one value twice
    against Add of two; ConstantOfShape of a float against one of an int64: each its own session,
    and the run verifies, its output the ordinary run's bit for bit."""
    from onnxmem.runtime.sessions import node_session
    from onnxmem.runtime.settings import session_options

    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["a"], name="at_most"),
             helper.make_node("Clip", ["a", "lo"], ["b"], name="at_least"),
             helper.make_node("Add", ["b", "b"], ["c"], name="twice"),
             helper.make_node("Add", ["c", "a"], ["d"], name="two"),
             helper.make_node("Shape", ["d"], ["s"], name="shape"),
             helper.make_node("ConstantOfShape", ["s"], ["f"], name="floats",
                              value=numpy_helper.from_array(np.array([2.0], np.float32))),
             helper.make_node("ConstantOfShape", ["s"], ["i"], name="ints",
                              value=numpy_helper.from_array(np.array([3], np.int64))),
             helper.make_node("Cast", ["i"], ["g"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Sum", ["d", "f", "g"], ["y"], name="sum")]
    path, p = _planned(tmp_path, make_model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], inits))
    cache: dict = {}
    made = {op.name: node_session(p.model, p.model.graph.node[op.index], op, p.view, {}, session_options(),
                                  ["CPUExecutionProvider"], cache=cache) for op in p.view.ops}
    assert made["at_most"] is not made["at_least"] and made["twice"] is not made["two"]
    assert made["floats"] is not made["ints"]
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert ex.findings == () and ex.outputs[0].identical and ex.outputs[0].whole_model_diff == 0.0


@pytest.mark.parametrize("draw", ["RandomNormalLike", "Dropout"])
def test_a_local_function_that_draws_is_a_random_op(tmp_path, draw):
    """A call of a model-local function whose body draws (an unseeded RandomNormalLike, a Dropout
    in training mode) runs as a random op does: each node runs again, and the call draws in the
    arena what it drew outside it; the plan verifies."""
    const = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    body = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(v)) for n, v in const.items()]
    body += ([helper.make_node("RandomNormalLike", ["a"], ["n"]), helper.make_node("Add", ["a", "n"], ["b"])]
             if draw == "RandomNormalLike" else [helper.make_node("Dropout", ["a", "r", "t"], ["b"])])
    noisy = helper.make_function("local", "Noisy", ["a"], ["b"], body, opset_imports=[helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Noisy", ["a"], ["b"], name="noisy", domain="local"),
             helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid")]
    model = make_model(nodes, [vi("x", [4, 8])], [vi("y", [4, 8])])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(noisy)
    path, p = _planned(tmp_path, model)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.reference == "nodes" and ex.findings == () and ex.outputs[0].identical, ex.findings


def _symbolic_pair(tmp_path):
    """``y = -relu(x)`` over ``x[n, 4]``, planned at n=2 into ``p.json``."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [vi("x", ["n", 4])], [vi("y", ["n", 4])]), path)
    r = CliRunner().invoke(main, ["plan", str(path), "--dim", "n=2", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    return str(path), str(tmp_path / "p.json")


@pytest.mark.parametrize("command", ["verify", "compare"])
@pytest.mark.parametrize("flags, says", [
    (["--dim", "n=3"], "the plan (p.json) was made at n=2, not --dim n=3;"),
    (["--dim", "q=2"], "the plan (p.json) binds n=2, not --dim q=2;"),
    (["--input-shape", "x=3x4"], "the plan (p.json) was made with 'x' of shape 2x4, not --input-shape x=3x4;"),
])
def test_a_point_the_plan_was_not_made_at_is_refused(tmp_path, monkeypatch, command, flags, says):
    """``--dim`` and ``--input-shape`` beside a plan that is not a range plan were left unused:
    ``verify --plan p.json --dim n=3`` of a plan made at n=2 verified it at n=2, exit 0."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    model, plan = _symbolic_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, [command, model, "--plan", "p.json", *flags])
    assert r.exit_code == 1 and says in r.output and "Traceback" not in r.output, r.output


def test_the_plans_own_point_and_plan_making_flags_verify_with_a_warning(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    model, plan = _symbolic_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["verify", model, "--plan", "p.json", "--dim", "n=2", "--input-shape", "x=2x4"])
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    r = CliRunner().invoke(main, ["verify", model, "--plan", "p.json", "--solver", "greedy", "--alignment", "128"])
    assert r.exit_code == 0, r.output
    assert ("warning: --solver, --alignment say how to make a plan; the plan given (p.json) is checked as it "
            "was made (leave them out)") in r.output


@pytest.mark.parametrize("command", ["verify", "compare"])
def test_plan_making_flags_with_a_plan_that_cannot_be_read_leave_one_line(tmp_path, monkeypatch, command):
    """The warning that --max-trips (a flag that makes plans) leaves the plan given as it was came
    before the plan was read: with a plan file that cannot be read the command failed with two
    lines on stderr (fuzz family flags, seed 0, flags:479). It now comes once the plan is read."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    model, _ = _symbolic_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    for plan in ("missing.json", model):
        r = CliRunner().invoke(main, [command, model, "--plan", plan, "--dim", "n=2", "--max-trips", "4"])
        assert r.exit_code == 1 and r.output.count("\n") == 1 and r.output.startswith("error: "), r.output
