"""Graph inputs whose given values size tensors (a Reshape's target, a Range's limit): ``plan
--inputs`` reads the small ones as known where inference needs them, records those it needs,
and ``verify`` and ``compare`` feed them and refuse others (:mod:`onnxmem.planning.given`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.planning.given import sizing_candidates
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans.schema import check_schema
from onnxmem.proof.plan import prove_plan

from .helpers import make_model, vi

TARGET = np.array([3, 8], dtype=np.int64)


def _reshape(tmp_path: Path) -> Path:
    """``y = Sigmoid(Reshape(Relu(x), shape)) * Cast(k)``: ``shape`` sizes ``h`` and ``y``; the
    scalar ``k`` reaches values alone."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["h"], name="reshape"),
             helper.make_node("Sigmoid", ["h"], ["s"], name="sigmoid"),
             helper.make_node("Cast", ["k"], ["kf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["s", "kf"], ["y"], name="mul")]
    model = make_model(nodes, [vi("x", [4, 6]), vi("shape", [2], TensorProto.INT64), vi("k", [], TensorProto.INT64)],
                       [vi("y", [None, None])])
    path = tmp_path / "reshape.onnx"
    onnx.save(model, path)
    return path


def _given(shape: np.ndarray = TARGET, k: int = 3) -> dict[str, np.ndarray]:
    return {"shape": shape, "k": np.array(k, dtype=np.int64)}


def _npz(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return str(path)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_reshape_target_given_by_value_is_planned_as_a_run_measures_it(tmp_path: Path) -> None:
    path = _reshape(tmp_path)
    planned = plan_model(path, PlanOptions(inputs=_given()))
    plan = planned.plan
    assert plan.tensor("h").shape == (3, 8) and plan.tensor("y").shape == (3, 8)
    assert planned.shapes.sources["h"] != "measured"
    assert prove_plan(plan, planned.view) == [] and check_schema(json.loads(plan.to_json())) is None
    # the same inputs measured by a real onnxruntime run: the same sizes and the same arena
    measured = plan_model(path, PlanOptions(inputs=_given(), measure_shapes=True)).plan
    assert {t.name: t.shape for t in measured.tensors} == {t.name: t.shape for t in plan.tensors}
    assert measured.arena_size == plan.arena_size
    # only the value inference needs is recorded; k reaches values alone
    assert plan.extra["sizing_inputs"] == {"shape": {"dtype": "int64", "shape": [2], "values": [3, 8]}}
    assert [w for w in plan.warnings if "sizes tensors" in w] == [
        "graph input 'shape': its --inputs value [3, 8] sizes tensors inference cannot size without it; the plan "
        "holds at that value alone (extra.sizing_inputs), verify feeds it and refuses another"]
    assert "assumed_inputs" not in plan.extra  # no If decided


def test_without_the_value_the_error_says_what_sizes_them(tmp_path: Path) -> None:
    path = _reshape(tmp_path)
    with pytest.raises(ShapeError, match=r"depend on data; pass --measure-shapes .*\(--inputs FILE\.npz"):
        plan_model(path)


def test_only_small_finite_values_of_inputs_without_a_default_are_read() -> None:
    model = make_model([helper.make_node("Identity", ["a"], ["y"])],
                       [vi("a", [2], TensorProto.INT64), vi("b", [65], TensorProto.INT64), vi("c", [1]),
                        vi("d", [1], TensorProto.INT64), vi("e", [1], TensorProto.INT64)],
                       [vi("y", [2], TensorProto.INT64)], [helper.make_tensor("d", TensorProto.INT64, [1], [7])])
    given = {"a": np.array([1, 2]), "b": np.zeros(65, dtype=np.int64), "c": np.array([np.nan], dtype=np.float32),
             "d": np.array([1]), "e": np.array([4]), "z": np.array([1])}
    # b: 65 elements; c: not finite; d: an initializer's default; e: known already; z: no graph input
    assert list(sizing_candidates(model, given, {"e": np.array([4])})) == ["a"]


def test_a_range_limit_given_by_value_sizes_its_output(tmp_path: Path) -> None:
    zero, one = (helper.make_tensor(n, TensorProto.INT64, [], [v]) for n, v in (("zero", 0), ("one", 1)))
    nodes = [helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range"),
             helper.make_node("Cast", ["r"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["f"], ["y"], name="relu")]
    model = make_model(nodes, [vi("n", [], TensorProto.INT64)], [vi("y", [None])], [zero, one])
    path = tmp_path / "range.onnx"
    onnx.save(model, path)
    plan = plan_model(path, PlanOptions(inputs={"n": np.array(1000, dtype=np.int64)})).plan
    assert plan.tensor("r").shape == (1000,) and plan.tensor("r").size == 8000
    assert plan.tensor("f").size == plan.tensor("y").size == 4000
    assert plan.extra["sizing_inputs"]["n"]["values"] == [1000]


def test_verify_feeds_the_recorded_value_and_refuses_another(tmp_path: Path) -> None:
    path, out = _reshape(tmp_path), str(tmp_path / "plan.json")
    r = run("plan", str(path), "--inputs", _npz(tmp_path / "v.npz", **_given()), "-o", out)
    assert r.exit_code == 0, r.output
    r = run("verify", str(path), "--plan", out, "--inputs", _npz(tmp_path / "k.npz", k=np.array(5, dtype=np.int64)))
    assert r.exit_code == 0 and r.output.rstrip().endswith("verified"), r.output
    r = run("verify", str(path), "--plan", out, "--inputs", _npz(tmp_path / "v2.npz", **_given(np.array([2, 12]))))
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert r.output == ("error: --inputs gives 'shape' = [2, 12]; the plan's sizes hold at 'shape' = [3, 8], the "
                        "value it was planned with: give that value, or plan again with this one (plan --inputs)\n")
    r = run("compare", str(path), "--plan", out)  # onnxruntime runs on the recorded value
    assert r.exit_code == 0 and "measured     default session" in r.output, r.output


def test_a_plan_whose_recorded_value_was_edited_is_caught(tmp_path: Path) -> None:
    """The plan's view is inferred at its recorded value: edited, the sizes it holds no longer match."""
    path, out = _reshape(tmp_path), tmp_path / "plan.json"
    assert run("plan", str(path), "--inputs", _npz(tmp_path / "v.npz", **_given()), "-o", str(out)).exit_code == 0
    data = json.loads(out.read_text())
    data["extra"]["sizing_inputs"]["shape"]["values"] = [2, 12]
    out.write_text(json.dumps(data))
    r = run("verify", str(path), "--plan", str(out))
    assert r.exit_code == 3, r.output
    assert "tensor 'h' (written by node 'reshape') is float32[2, 12] (96 B) in the model but float32[3, 8]" in r.output


def test_a_value_that_cannot_size_the_reshape_is_refused_in_one_line(tmp_path: Path) -> None:
    path, out = _reshape(tmp_path), tmp_path / "plan.json"
    r = run("plan", str(path), "--inputs", _npz(tmp_path / "bad.npz", **_given(np.array([5, 5]))), "-o", str(out))
    assert r.exit_code == 1 and r.output.count("\n") == 1 and not out.exists(), r.output
    assert "into [5, 5] (25), which onnxruntime refuses; check the value of its target 'shape'" in r.output


@pytest.mark.parametrize(("name", "record", "said"), [
    ("shape", {"dtype": "int64", "shape": [3], "values": [1, 2]}, "holds 'shape' as no value onnxmem records"),
    ("shape", {"dtype": "int64", "shape": [2], "values": [1e300, 2]}, "holds 'shape' as no value onnxmem records"),
    ("x", {"dtype": "float32", "shape": [1], "values": [1.5]}, "holds 'x' as float32 [1], which the model's graph"),
    ("shape", {"dtype": "int32", "shape": [2], "values": [3, 8]}, "holds 'shape' as int32 [2], which the model's"),
    ("zz\x1b[31m", {"dtype": "int64", "shape": [1], "values": [3]}, "names 'zz\\x1b[31m', which is no graph input"),
    ("shape", {"dtype": "int64", "shape": [2], "values": [-1, -1]},
     "extra.sizing_inputs ('shape') size no tensors here (sizes of 3 tensors are unknown ('h', 's', 'y')"),
])
def test_a_damaged_or_foreign_sizing_record_is_refused_in_one_line(tmp_path: Path, name: str,
                                                                   record: dict[str, object], said: str) -> None:
    """The schema checks each field of a record alone; whether they agree, and whether the model has
    such an input, is checked before anything runs (and the name is shown escaped)."""
    _refused(tmp_path, [], "sizing_inputs", name, record, said)


def _refused(tmp_path: Path, flags: list[str], key: str, name: str, record: dict[str, object], said: str) -> None:
    """A plan made with ``flags --inputs``, its ``extra[key][name]`` set to ``record``: ``verify``
    and ``compare`` refuse it in one line that says ``said``."""
    path, out = _reshape(tmp_path), tmp_path / "plan.json"
    given = _npz(tmp_path / "v.npz", **_given())
    assert run("plan", str(path), *flags, "--inputs", given, "-o", str(out)).exit_code == 0
    data = json.loads(out.read_text())
    data["extra"][key][name] = record
    out.write_text(json.dumps(data))
    for command in ("verify", "compare"):
        r = run(command, str(path), "--plan", str(out))
        assert r.exit_code == 1 and r.output.count("\n") == 1 and said in r.output, (command, r.output)


def test_a_measured_plan_records_the_small_values_its_run_read_and_verify_feeds_them(tmp_path: Path) -> None:
    """``plan --measure-shapes --inputs``: the run measured at the given target; the plan records
    the small values it read (``measured_inputs``: the three, each of at most 64 elements), and
    ``verify`` and ``compare`` measure at them where given none (random ones would make the
    Reshape refuse). Another value may be given: the run measures at it, and the proof holds the
    plan to the sizes found."""
    path, out = _reshape(tmp_path), tmp_path / "plan.json"
    given = {**_given(), "x": np.ones((4, 6), np.float32)}
    r = run("plan", str(path), "--measure-shapes", "--inputs", _npz(tmp_path / "v.npz", **given), "-o", str(out))
    assert r.exit_code == 0, r.output
    extra = json.loads(out.read_text())["extra"]
    assert sorted(extra["measured_inputs"]) == ["k", "shape", "x"]
    assert extra["measured_inputs"]["shape"] == {"dtype": "int64", "shape": [2], "values": [3, 8]}
    assert extra["measured_inputs"]["x"]["values"] == [1.0] * 24
    assert "sizing_inputs" not in extra
    check_schema(json.loads(out.read_text()))
    for command in ("verify", "compare"):
        r = run(command, str(path), "--plan", str(out))
        assert r.exit_code == 0, (command, r.output)
    r = run("verify", str(path), "--plan", str(out))
    assert r.output.rstrip().endswith("verified"), r.output
    r = run("verify", str(path), "--plan", str(out), "--inputs", _npz(tmp_path / "w.npz", **_given(np.array([3, -1]))))
    assert r.exit_code == 0 and r.output.rstrip().endswith("verified"), r.output  # another value, the same shapes
    r = run("verify", str(path), "--plan", str(out), "--inputs", _npz(tmp_path / "t.npz", **_given(np.array([8, 3]))))
    assert r.exit_code == 3, r.output  # measured at it: sizes the plan does not have
    assert "tensor 'h' (written by node 'reshape') is float32[8, 3] (96 B) in the model but float32[3, 8]" in r.output
    data = json.loads(out.read_text())
    del data["extra"]["measured_inputs"]
    out.write_text(json.dumps(data))
    r = run("verify", str(path), "--plan", str(out))  # no record: random values, which the Reshape refuses
    assert r.exit_code == 1 and "give them with --inputs FILE.npz" in r.output, r.output


@pytest.mark.parametrize(("name", "record", "said"), [
    ("shape", {"dtype": "int64", "shape": [3], "values": [1, 2]},
     "extra.measured_inputs holds 'shape' as no value onnxmem records"),
    ("zz", {"dtype": "int64", "shape": [1], "values": [3]}, "extra.measured_inputs names 'zz', which is no graph"),
])
def test_a_damaged_measured_record_is_refused_in_one_line(tmp_path: Path, name: str, record: dict[str, object],
                                                          said: str) -> None:
    _refused(tmp_path, ["--measure-shapes"], "measured_inputs", name, record, said)
