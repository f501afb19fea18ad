"""The reference of an arena run on the CPU: the whole model run once outside the arena with the
kernels each node runs alone, where it can be; each node run again where it cannot."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.sessions import host_array, run_values
from onnxmem.verify.run import VerifyOptions, execute_plan, verify_plan

from .conftest import MODELS
from .helpers import diamond_model, make_model, vi

GREEDY = PlanOptions(solver="greedy", order="file")


def _planned(tmp_path, nodes, inputs, outputs, inits=(), name="m.onnx"):
    path = tmp_path / name
    onnx.save(make_model(nodes, inputs, outputs, list(inits)), path)
    return path, plan_model(path, GREEDY)


@pytest.fixture()
def diamond(tmp_path):
    """x -> sig=Sigmoid(x) -> tan=Tanh(sig) -> sum=Add(sig, tan) -> y=MatMul(sum, W)."""
    path = tmp_path / "diamond.onnx"
    onnx.save(diamond_model(64, 8), path)
    return path, plan_model(path, GREEDY)


@pytest.mark.parametrize("beside", [True, False], ids=["beside", "in line"])
def test_the_reference_is_one_whole_model_run_with_the_same_bits(diamond, beside):
    """On the CPU the arena's values are held to one whole-model run: no node runs a second time
    (the only time spent off the arena run is the reference's own, run beside it or, in pieces,
    as the arena run asks for them), and the outputs are those of each node run again outside
    the arena, bit for bit."""
    path, p = diamond
    whole = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(beside=beside))
    nodes = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert whole.reference == "whole" and whole.reference_seconds > 0
    assert whole.private_seconds == (0.0 if beside else whole.reference_seconds)
    assert nodes.reference == "nodes" and nodes.private_seconds > 0
    assert whole.findings == nodes.findings == () and whole.nodes_run == nodes.nodes_run == 4
    (c,) = whole.outputs
    assert c.ok and c.identical and c.max_abs_diff == 0.0 and c.whole_model_diff == 0.0


def test_whole_model_values_are_every_node_alone(diamond):
    """Every value of the whole-model reference (prepacking off, one thread, no optimization) has
    the bits of the ordinary run's nodes run one by one: here the MatMul over a constant weight,
    which a prepacking session computes otherwise."""
    import onnxruntime as ort

    from onnxmem.runtime.folding import compute_weights

    path, p = diamond
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    weights = compute_weights(p.model, p.view)
    got = run_values(p.model, {"x": x}, {"sum": onnx.TensorProto.FLOAT, "y": onnx.TensorProto.FLOAT}, weights)
    assert set(got) == {"sum", "y"}
    alone = ort.InferenceSession(make_model([helper.make_node("MatMul", ["s", "w"], ["y"])],
                                            [vi("s", [8, 64]), vi("w", [64, 64])], [vi("y", [8, 64])])
                                 .SerializeToString(), providers=["CPUExecutionProvider"])
    want = alone.run(None, {"s": host_array(got["sum"]), "w": weights["W"]})[0]
    assert np.array_equal(host_array(got["y"]), want)


def test_a_corrupted_plan_is_caught_through_the_whole_model_reference(diamond):
    """tan moved onto sig, which add still reads: the clobber is found, and, running on, the
    output check against the whole-model reference sees the changed result."""
    path, p = diamond
    sig = p.plan.tensor("sig")
    tensors = tuple(dataclasses.replace(t, offset=sig.offset) if t.name == "tan" else t for t in p.plan.tensors)
    bad = dataclasses.replace(p.plan, tensors=tensors)
    ex = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(keep_going=True))
    assert ex.reference == "whole"
    kinds = [f.kind for f in ex.findings]
    assert kinds[0] == "clobber" and "output" in kinds and ex.changed_result
    (c,) = ex.outputs
    assert not c.ok and c.max_abs_diff > c.tolerance > 0
    first = execute_plan(bad, p.model, p.view, model_path=path)
    assert first.findings[0].kind == "clobber" and first.findings[0].tensor == "sig"


def test_a_random_op_keeps_each_node_again(tmp_path):
    """A random op draws other numbers in a second kernel: each node runs again instead. A Dropout
    without training_mode is the identity and keeps the whole-model reference."""
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["n"], name="draw", seed=1.0),
             helper.make_node("Add", ["x", "n"], ["y"], name="add")]
    path, p = _planned(tmp_path, nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], name="random.onnx")
    assert execute_plan(p.plan, p.model, p.view, model_path=path).reference == "nodes"
    nodes = [helper.make_node("Dropout", ["x"], ["d"], name="drop"), helper.make_node("Relu", ["d"], ["y"])]
    path, p = _planned(tmp_path, nodes, [vi("x", [4, 8])], [vi("y", [4, 8])], name="dropout.onnx")
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.reference == "whole" and ex.findings == () and ex.outputs[0].identical


def test_bodies_keep_each_node_again():
    """control_flow.onnx (If, Loop, Scan): each node, and each body's node, runs again outside
    the arena; every output identical."""
    path = MODELS / "control_flow.onnx"
    p = plan_model(path, PlanOptions(solver="greedy"))
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first
    ex = report.execution
    assert ex.reference == "nodes" and ex.private_seconds > 0 and all(c.identical for c in ex.outputs)


def test_float16_keeps_each_node_again(tmp_path):
    """A float16 Sigmoid has no float16 kernel on the CPU: onnxruntime runs it in float between
    casts, and a whole model drops the casts between two such kernels, so its values are not each
    node's alone (held to them, this right plan failed). Each node runs again instead: verified,
    every output identical."""
    nodes = [helper.make_node("Cast", ["x"], ["h0"], to=onnx.TensorProto.FLOAT16, name="in"),
             *(helper.make_node("Sigmoid", [f"h{i}"], [f"h{i + 1}"], name=f"sig{i}") for i in range(3)),
             helper.make_node("Cast", ["h3"], ["y"], to=onnx.TensorProto.FLOAT, name="out")]
    path, p = _planned(tmp_path, nodes, [vi("x", [16, 64])], [vi("y", [16, 64])], name="half.onnx")
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first
    ex = report.execution
    assert ex.reference == "nodes" and ex.nodes_run == 5 and all(c.identical for c in ex.outputs)


def test_an_unknown_reference_is_one_line(diamond):
    path, p = diamond
    with pytest.raises(OnnxmemError, match="reference 'other' is not one of whole, nodes"):
        execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="other"))


def test_cli_names_the_reference(diamond):
    path, _ = diamond
    got = CliRunner().invoke(main, ["verify", str(path)])
    assert got.exit_code == 0, got.output
    assert "reference: the whole model once outside the arena, same kernels" in got.output
    assert "  output  y: ok, against the reference: identical" in got.output


def test_external_weights_are_read_once_into_arrays():
    """external_data.onnx: its float weights go from the data file straight into numpy arrays
    (the model keeps them as in-memory references without bytes, the small one that onnxruntime
    gets in the graph inline), equal to onnx's own reading; the arena run over them verifies."""
    from onnx import numpy_helper

    from onnxmem.model import load_model
    from onnxmem.runtime.ort import IN_MEMORY, load_weights

    path = MODELS / "external_data.onnx"
    model = load_model(path)
    full, arrays = load_weights(model, path)
    want = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    assert set(arrays) == set(want) and all(np.array_equal(arrays[n], want[n]) for n in want)
    kept = {t.name: t for t in full.graph.initializer}
    assert kept["w_1"].external_data[0].value == IN_MEMORY and not kept["w_1"].raw_data
    assert kept["w_14"].data_location == onnx.TensorProto.DEFAULT and len(kept["w_14"].raw_data) == 512
    p = plan_model(path, PlanOptions(solver="greedy"))
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and ex.reference == "whole" and all(c.identical for c in ex.outputs)


def test_verify_loads_neither_numpy_nor_onnx_in_its_own_process(diamond, tmp_path):
    """``verify MODEL`` works in its onnxruntime child; the command's process prints the child's
    lines (stdout and stderr) and loads none of numpy, onnx, onnxruntime."""
    import subprocess
    import sys

    path, _ = diamond
    code = ("import sys\n"
            "from onnxmem.cli.main import main\n"
            "try:\n"
            f"    main(['verify', {str(path)!r}], standalone_mode=False)\n"
            "finally:\n"
            "    print('loaded:', sorted(m for m in ('numpy', 'onnx', 'onnxruntime') if m in sys.modules))\n")
    root = str(MODELS.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[-2:] == ["verified", "loaded: []"], got.stdout
    assert any(ln.startswith("executed  4 nodes in one cpu arena") for ln in lines)


def test_nodes_alike_of_other_shapes_share_one_session(tmp_path):
    """A node session declares its inputs with symbolic dims: the Relus over [4, 8] and over
    [8, 4] share one session, the one over [2, 4, 4] (another rank) has its own, and the
    arena run is the reference's, bit for bit, with either reference."""
    from onnxmem.runtime.sessions import node_session
    from onnxmem.runtime.settings import session_options

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Transpose", ["a"], ["t"], name="t", perm=[1, 0]),
             helper.make_node("Relu", ["t"], ["b"], name="r2"),
             helper.make_node("Reshape", ["b", "shape"], ["c"], name="reshape"),
             helper.make_node("Relu", ["c"], ["y"], name="r3")]
    shape = onnx.numpy_helper.from_array(np.array([2, 4, 4], np.int64), "shape")
    path, p = _planned(tmp_path, nodes, [vi("x", [4, 8])], [vi("y", [2, 4, 4])], [shape], name="shapes.onnx")
    ops = {op.name: op for op in p.view.ops}
    cache: dict = {}
    made = {name: node_session(p.model, p.model.graph.node[op.index], op, p.view, {}, session_options(),
                               ["CPUExecutionProvider"], cache=cache) for name, op in ops.items()}
    assert p.view.tensors["a"].shape != p.view.tensors["t"].shape
    assert made["r1"] is made["r2"] and made["r3"] is not made["r1"]
    for reference in ("whole", "nodes"):
        ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference=reference))
        assert ex.findings == () and ex.reference == reference and ex.outputs[0].identical


def test_nodes_that_differ_in_an_attribute_or_a_type_keep_their_own_sessions(tmp_path):
    """Nodes alike share a session by the node and its declared values: two Transposes with
    other perms, two LeakyRelus with other alphas and a Cast to another type each keep their own;
    the same LeakyRelu again gets the first one's. The arena run verifies, bit for bit."""
    from onnxmem.runtime.sessions import node_session
    from onnxmem.runtime.settings import session_options

    nodes = [helper.make_node("Transpose", ["x"], ["a"], name="t1", perm=[1, 0, 2]),
             helper.make_node("Transpose", ["a"], ["b"], name="t2", perm=[0, 2, 1]),
             helper.make_node("LeakyRelu", ["b"], ["c"], name="l1", alpha=0.1),
             helper.make_node("LeakyRelu", ["c"], ["d"], name="l2", alpha=0.2),
             helper.make_node("LeakyRelu", ["d"], ["e"], name="l3", alpha=0.1),
             helper.make_node("Cast", ["e"], ["f"], name="c1", to=onnx.TensorProto.DOUBLE),
             helper.make_node("Cast", ["f"], ["y"], name="c2", to=onnx.TensorProto.FLOAT)]
    path, p = _planned(tmp_path, nodes, [vi("x", [2, 3, 4])], [vi("y", [3, 4, 2])], name="alike.onnx")
    cache: dict = {}
    made = {op.name: node_session(p.model, p.model.graph.node[op.index], op, p.view, {}, session_options(),
                                  ["CPUExecutionProvider"], cache=cache) for op in p.view.ops}
    assert made["t1"] is not made["t2"] and made["l1"] is not made["l2"] and made["c1"] is not made["c2"]
    assert made["l3"] is made["l1"] and len(cache) == 6
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and ex.outputs[0].identical


def _external(tmp_path, offsets):
    """x -> MatMul(x, W0) -> MatMul(., W1) -> y, each W a [16, 16] float weight in w.data at ``offsets``."""
    from onnxmem.model import load_model

    rng = np.random.default_rng(3)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) for _ in offsets]
    data = bytearray(max(offsets) + ws[0].nbytes)
    inits = []
    for k, (w, off) in enumerate(zip(ws, offsets)):
        data[off:off + w.nbytes] = w.tobytes()
        t = onnx.numpy_helper.from_array(w, f"W{k}")
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", "w.data"), ("offset", str(off)), ("length", str(w.nbytes))):
            t.external_data.add(key=key, value=value)
        inits.append(t)
    (tmp_path / "w.data").write_bytes(bytes(data))
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"], name="m0"),
             helper.make_node("MatMul", ["h", "W1"], ["y"], name="m1")]
    path = tmp_path / "ext.onnx"
    onnx.save(make_model(nodes, [vi("x", [4, 16])], [vi("y", [4, 16])], inits), path)
    return path, load_model(path), ws


def test_aligned_external_weights_are_mapped_copy_on_write(tmp_path):
    """A weight at an offset that is a multiple of its element's size in its data file is an
    array over a copy-on-write map of the file (its bytes not read, writes never reaching the
    file); one at another offset (a float two bytes past a multiple of 4) is read into memory
    of its own. Both equal the file's; verify holds."""
    import mmap

    from onnxmem.runtime.ort import load_weights

    path, model, ws = _external(tmp_path, [64, 1026 + 64])
    before = (tmp_path / "w.data").read_bytes()
    _, arrays = load_weights(model, path)
    assert all(np.array_equal(arrays[f"W{k}"], w) for k, w in enumerate(ws))
    base = arrays["W0"]
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) and arrays["W1"].base.flags.owndata
    arrays["W0"][0, 0] = 123.0
    assert (tmp_path / "w.data").read_bytes() == before
    got = CliRunner().invoke(main, ["verify", str(path)])
    assert got.exit_code == 0 and "  output  y: ok, against the reference: identical" in got.output, got.output


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_an_identical_output_has_no_difference_and_the_tolerance_of_its_largest_finite_value(dtype):
    """compare_output on the same bytes (NaN and infinities among them): no difference, ok,
    identical, the tolerance ``atol + rtol * max |finite|``; one element one step off: not
    identical, that step the difference; a NaN against a number: an infinite difference."""
    from onnxmem.runtime.arena_records import compare_output

    ref = np.array([[1.5, -40.0, np.nan], [np.inf, -np.inf, 3.0]] * 700, dtype)
    c = compare_output("v", ref.copy(), ref, 1e-4, 1e-5)
    assert (c.max_abs_diff, c.ok, c.identical) == (0.0, True, True)
    assert c.tolerance == 1e-5 + 1e-4 * 40.0
    off = ref.copy()
    off[4, 1] = np.nextafter(off[4, 1], dtype(0))
    d = compare_output("v", off, ref, 0.0, 0.0)
    assert not d.identical and not d.ok and d.max_abs_diff == float(np.float64(off[4, 1]) - np.float64(ref[4, 1]))
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert compare_output("v", nan, ref, 1e-4, 1e-5).max_abs_diff == float("inf")


def read_after_cutting(path: str) -> float:
    """Test entry point for the child: map the weights of ``path``, cut its data file short, read them."""
    from onnxmem.model import load_model
    from onnxmem.runtime.ort import load_weights

    _, arrays = load_weights(load_model(path), path)
    os.truncate(os.path.join(os.path.dirname(path), "w.data"), 0)
    return float(arrays["W0"].sum())


def test_a_data_file_cut_short_while_mapped_is_one_line(tmp_path):
    """The child that reads a mapped weight whose file was cut short dies of SIGBUS: one line
    that names it and the fix, and the next call works."""
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime.isolation import run_isolated, run_limits

    path, _, _ = _external(tmp_path, [4096, 8192])
    with run_limits(seconds=30):
        with pytest.raises(RuntimeBackendError) as caught:
            run_isolated(read_after_cutting, str(path))
        msg = str(caught.value)
        assert msg.startswith("onnxruntime crashed (SIGBUS) during ") and "\n" not in msg
        assert "leave the model's files as they are" in msg and caught.value.exit_code == 1
        assert run_isolated(os.getpid) != os.getpid()
