"""Recomputation under a budget against hostile models and flags: the rewrite computes what the
original computes, bit for bit in onnxruntime, or the command fails in one line and writes nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.core.sizes import parse_size
from onnxmem.planning.pipeline import PlanOptions
from onnxmem.remat.budget import arena_limit, parse_budget, plan_with_budget

from .helpers import make_model, vi

W = 4096  # floats in the value recomputed


def gap_model(tail=(), inits=(), outputs=(), opset: int = 17, a: str = "a") -> onnx.ModelProto:
    """``a = Tile(x)`` (4x the input) read by the first node and by the last: the middle's peak
    (``d = Tile(Sigmoid(a))``, 4x ``a``) holds ``a`` unless it is recomputed from ``x`` before
    the last read. ``tail``: more nodes after ``y``."""
    nodes = [helper.make_node("Tile", ["x", "rep"], [a], name="A"),
             helper.make_node("Sigmoid", [a], ["c"], name="C"),
             helper.make_node("Tile", ["c", "rep"], ["d"], name="D"),
             helper.make_node("Tanh", ["d"], ["e"], name="E"),
             helper.make_node("ReduceMax", ["e"], ["f"], name="F", keepdims=1),
             helper.make_node("Mul", ["f", a], ["y"], name="Y"), *tail]
    rep = numpy_helper.from_array(np.array([1, 4], np.int64), "rep")
    return make_model(nodes, [vi("x", [1, W // 4])], [vi("y", [1, W]), *outputs], [rep, *inits], opset=opset)


def batch_norm_tail(**attrs) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``z = BatchNormalization(Reshape(x))`` writing its statistics too, which nothing reads."""
    c = 4
    arrays = {"sc": [1.5, 0.5, 2.0, 1.0], "bi": [0.1, -0.2, 0.3, 0.0], "mu": [5.0, -3.0, 1.0, 2.0], "va": [9.0, 4.0, 0.25, 1.0]}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in arrays.items()]
    inits.append(numpy_helper.from_array(np.array([1, c, W // 4 // c], np.int64), "shp"))
    outs = ["z", "rm", "rv"] if attrs.get("training_mode") else ["z", "rm", "rv", "sm", "sv"]
    return [helper.make_node("Reshape", ["x", "shp"], ["x3"], name="R"),
            helper.make_node("BatchNormalization", ["x3", "sc", "bi", "mu", "va"], outs, name="BN", **attrs)], inits


def run(model: onnx.ModelProto, feeds):
    from onnxmem.runtime.ort import make_session

    return dict(zip([o.name for o in model.graph.output], make_session(model).run(None, feeds)))


def rewrite_and_compare(tmp_path, model: onnx.ModelProto, keep: str = "onnxruntime") -> onnx.ModelProto:
    """The 0.9x rewrite of ``model``, whose every output onnxruntime computes bit for bit as the original's."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    got = plan_with_budget(model, path, PlanOptions(), factor=0.9, algorithm="greedy", keep=keep)
    assert got.rewritten is not None
    assert any(n.name.endswith("__remat") for n in got.rewritten.graph.node)
    x = np.random.default_rng(0).standard_normal((1, W // 4)).astype(np.float32)
    want, have = run(model, {"x": x}), run(got.rewritten, {"x": x})
    assert want.keys() == have.keys()
    for k in want:
        assert want[k].tobytes() == have[k].tobytes(), k
    return got.rewritten


def test_a_batch_norm_below_opset_14_keeps_the_outputs_that_select_its_training_mode(tmp_path):
    # onnxruntime runs BatchNormalization-9 with batch statistics when it names more than one
    # output: dropping the unread statistics would change z
    nodes, inits = batch_norm_tail()
    model = gap_model(nodes, inits, [vi("z", [1, 4, W // 16])], opset=9)
    rewritten = rewrite_and_compare(tmp_path, model, keep="planner")  # no pins below opset 15
    bn = next(n for n in rewritten.graph.node if n.op_type == "BatchNormalization")
    assert len(bn.output) == 5


def test_a_training_mode_batch_norm_keeps_the_three_outputs_onnxruntime_requires(tmp_path):
    nodes, inits = batch_norm_tail(training_mode=1)
    model = gap_model(nodes, inits, [vi("z", [1, 4, W // 16])], opset=15)
    rewritten = rewrite_and_compare(tmp_path, model)  # onnxruntime refuses one with fewer outputs
    bn = next(n for n in rewritten.graph.node if n.op_type == "BatchNormalization")
    assert list(bn.output) == ["z", "rm", "rv"]


@pytest.mark.parametrize("taken", ["output", "initializer", "value_info", "node"])
def test_names_the_rewrite_would_write_are_never_reused(tmp_path, taken):
    model = gap_model()
    if taken == "output":  # a value already called a__remat, which the model returns
        model.graph.node.insert(0, helper.make_node("Tile", ["x", "rep"], ["a__remat"], name="P"))
        model.graph.output.append(vi("a__remat", [1, W]))
    elif taken == "initializer":
        model.graph.initializer.append(numpy_helper.from_array(np.full((1, W), 7, np.float32), "a__remat"))
    elif taken == "value_info":  # a stale value info of another shape under that name
        model.graph.value_info.append(vi("a__remat", [1, 3]))
    else:
        model.graph.node.insert(0, helper.make_node("Relu", ["x"], ["q"], name="A__remat"))
        model.graph.output.append(vi("q", [1, W // 4]))
    rewritten = rewrite_and_compare(tmp_path, model)
    writes = [o for n in rewritten.graph.node for o in n.output if o]
    assert len(writes) == len(set(writes))
    assert not {i.name for i in rewritten.graph.initializer} & set(writes)
    names = [n.name for n in rewritten.graph.node]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("text", ["9" * 400, "9" * 400 + "x", "inf", "nan", "-1", "0.0x", "1e30"])
def test_a_budget_too_large_or_not_a_number_is_a_one_line_error(text):
    with pytest.raises(OnnxmemError, match="--budget") as e:
        limit = arena_limit(98_304, *parse_budget(text))
        assert limit  # not reached: every text above is refused
    assert "\n" not in str(e.value)


def test_a_factor_that_overflows_2_62_bytes_is_refused():
    size, factor = parse_budget("1" + "0" * 30 + "x")
    with pytest.raises(OnnxmemError, match="over 2\\^62"):
        arena_limit(98_304, size, factor)
    with pytest.raises(OnnxmemError, match="over 2\\^62"):
        parse_size("9" * 25, "--runtime-overhead")
    with pytest.raises(OnnxmemError, match="is not a size"):  # more digits than any size: not read at all
        parse_size("9" * 400, "--runtime-overhead")


@pytest.mark.parametrize("flags", [["--budget", "9" * 400 + "x"], ["--budget", "9" * 400],
                                   ["--budget", "0.5x", "--runtime-overhead", "9" * 400],
                                   ["--budget", "1" + "0" * 25 + "x"],
                                   ["--budget", "10MiB", "--runtime-overhead", "20MiB"]])
def test_cli_hostile_budgets_fail_in_one_line_and_write_nothing(tmp_path, flags):
    src, out = tmp_path / "m.onnx", tmp_path / "r.onnx"
    onnx.save(gap_model(), src)
    r = CliRunner().invoke(main, ["plan", str(src), *flags, "--rewrite-out", str(out)])
    assert r.exit_code == 1, r.output
    assert r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()


def test_cli_rewrite_out_over_the_model_or_its_external_data_is_refused(tmp_path):
    model = gap_model(tail=[helper.make_node("Add", ["y", "wb"], ["y2"], name="Y2")],
                      inits=[numpy_helper.from_array(np.ones((1, W), np.float32), "wb")], outputs=[vi("y2", [1, W])])
    src = tmp_path / "m.onnx"
    onnx.save(model, src, save_as_external_data=True, location="m.data", size_threshold=1024)
    before = (src.read_bytes(), (tmp_path / "m.data").read_bytes())
    for target in (src, tmp_path / "m.data"):
        r = CliRunner().invoke(main, ["plan", str(src), "--budget", "0.9x", "--rewrite-out", str(target)])
        assert r.exit_code == 1 and "would destroy the input" in r.output, r.output
    assert (src.read_bytes(), (tmp_path / "m.data").read_bytes()) == before


@pytest.mark.parametrize("op_type", ["If", "Loop", "Scan", "SequenceMap", "Dropout", "RandomNormalLike", "Multinomial"])
def test_an_op_with_a_body_or_a_random_draw_is_never_recomputed(op_type):
    # a body without captures can still draw random numbers (SequenceMap's body: RandomUniformLike)
    from onnxmem.graph import Op
    from onnxmem.remat.problem import recomputable

    assert not recomputable(Op(0, "n", op_type, "", ("s",), ("o",)))
    assert recomputable(Op(0, "n", "Relu", "", ("s",), ("o",)))


@pytest.mark.parametrize("local", ["a__remat", "x__pin", "f_empty__pin"])
def test_a_name_an_if_branch_writes_is_not_taken_by_the_rewrite(tmp_path, local):
    # a graph and its bodies share one namespace: an outer a__remat beside a branch's own would
    # break single assignment (onnx.checker refused the annotated model)
    then = helper.make_graph([helper.make_node("Neg", ["y"], [local]), helper.make_node("Abs", [local], ["o1"])],
                             "th", [], [vi("o1", [1, W])])
    other = helper.make_graph([helper.make_node("Identity", ["y"], ["o2"])], "el", [], [vi("o2", [1, W])])
    tail = [helper.make_node("ReduceSum", ["y"], ["s"], name="S", keepdims=0),
            helper.make_node("Greater", ["s", "low"], ["cond"], name="G"),
            helper.make_node("If", ["cond"], ["z"], name="I", then_branch=then, else_branch=other)]
    model = gap_model(tail, [numpy_helper.from_array(np.array(-1e30, np.float32), "low")], [vi("z", [1, W])])
    rewritten = rewrite_and_compare(tmp_path, model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert local not in {o for n in rewritten.graph.node for o in n.output}


@pytest.mark.parametrize("flags", [["-o", "p.json"], ["--annotate", "a.onnx"], ["--budget", "0.9x", "--rewrite-out", "r.onnx"],
                                   ["--runtime-overhead", "1KiB"]])
def test_cli_budget_sweep_refuses_the_flags_of_one_budget_and_writes_nothing(tmp_path, flags):
    # -o and --annotate ended in a traceback (outputs without data); --budget and --rewrite-out
    # were ignored without a word
    src = tmp_path / "m.onnx"
    onnx.save(gap_model(), src)
    flags = [str(tmp_path / f) if f.endswith((".json", ".onnx")) else f for f in flags]
    r = CliRunner().invoke(main, ["plan", str(src), "--budget-sweep", str(tmp_path / "s.png"), *flags])
    assert r.exit_code == 2, r.output
    assert "--budget-sweep plans many and writes only its drawing" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_rewrite_planned_at_one_shape_computes_the_original_at_every_other(tmp_path):
    # the pin reshaped x to the planned dims: fed (2, 512) instead of the planned (1, 1024), the
    # rewrite returned y of shape (1, 4096) where the original returns (2, 2048), without an error
    model = gap_model()
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", "M"]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", None]))
    src, out = tmp_path / "m.onnx", tmp_path / "r.onnx"
    onnx.save(model, src)
    r = CliRunner().invoke(main, ["plan", str(src), "--dim", "N=1", "--dim", f"M={W // 4}", "--budget", "0.9x",
                                  "--rewrite-out", str(out)])
    assert r.exit_code == 0 and "recompute    1 values" in r.output, r.output
    rewritten = onnx.load(out)
    assert any(n.name.endswith("__pin_reshape__pin") for n in rewritten.graph.node)
    for shape in [(1, W // 4), (2, W // 8), (4, 64)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        want, have = run(model, {"x": x})["y"], run(rewritten, {"x": x})["y"]
        assert want.shape == have.shape and want.tobytes() == have.tobytes(), shape
