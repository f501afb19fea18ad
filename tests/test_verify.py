"""The static proof on literal plans, and execution in one arena with onnxruntime."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans.point import SharedObject, write_plan
from onnxmem.verify.run import VerifyOptions, cuda_available, execute_plan, prove_plan, verify_plan

from .conftest import LIGHT, SHIPPED, SHIPPED_DIMS
from .helpers import make_model, vi

GREEDY = PlanOptions(solver="greedy")


def diamond(tmp_path: Path) -> Path:
    """x -> sig=Sigmoid(x) -> tan=Tanh(sig) -> sum=Add(sig, tan) -> y=Relu(sum); 256 B each."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["sig"], name="sigmoid"),
        helper.make_node("Tanh", ["sig"], ["tan"], name="tanh"),
        helper.make_node("Add", ["sig", "tan"], ["sum"], name="add"),
        helper.make_node("Relu", ["sum"], ["y"], name="relu"),
    ]
    path = tmp_path / "diamond.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 64])], [vi("y", [1, 64])]), path)
    return path


def replace(plan, **offsets):
    """``plan`` with the named tensors moved to new offsets (and the arena grown to fit)."""
    tensors = tuple(dataclasses.replace(t, offset=offsets.get(t.name, t.offset)) for t in plan.tensors)
    arena = max([plan.arena_size] + [t.offset + t.size for t in tensors])
    return dataclasses.replace(plan, tensors=tensors, arena_size=arena)


@pytest.fixture()
def planned(tmp_path):
    path = diamond(tmp_path)
    return path, plan_model(path, PlanOptions(solver="greedy", order="file"))


# ------------------------------------------------------------------ static proof


def test_planner_output_is_proven(planned):
    _, p = planned
    assert prove_plan(p.plan, p.view) == []


def test_overlap_names_both_tensors_the_writer_and_the_bytes(planned):
    _, p = planned
    sig = p.plan.tensor("sig")
    bad = replace(p.plan, tan=sig.offset)  # tan is written while sig is still read by add
    found = prove_plan(bad, p.view)
    assert {f.kind for f in found} == {"overlap"}
    f = next(f for f in found if {f.tensor, f.other} == {"sig", "tan"})
    assert f.tensor == "tan" and f.other == "sig" and f.node == "tanh"
    assert f.byte_range == (sig.offset, sig.offset + 256)
    assert "'sig'" in str(f) and "'tan'" in str(f) and "tanh" in str(f)


def test_misaligned_offset_and_small_arena(planned):
    _, p = planned
    bad = replace(p.plan, y=p.plan.tensor("y").offset + 4)
    assert "alignment" in {f.kind for f in prove_plan(bad, p.view)}
    small = dataclasses.replace(p.plan, arena_size=p.plan.arena_size - 1)
    found = prove_plan(small, p.view)
    assert found and found[0].kind == "arena"


def test_plan_must_match_the_model(planned):
    _, p = planned
    resized = tuple(dataclasses.replace(t, size=t.size * 2) if t.name == "tan" else t for t in p.plan.tensors)
    found = prove_plan(dataclasses.replace(p.plan, tensors=resized), p.view)
    assert found[0].kind == "mismatch" and found[0].tensor == "tan"
    missing = tuple(t for t in p.plan.tensors if t.name != "sum")
    found = prove_plan(dataclasses.replace(p.plan, tensors=missing), p.view)
    assert found[0].kind == "mismatch" and found[0].tensor == "sum"


def test_order_must_be_topological(planned):
    _, p = planned
    order = list(p.plan.order)
    order[1], order[2] = order[2], order[1]  # add before tanh
    found = prove_plan(dataclasses.replace(p.plan, order=tuple(order)), p.view)
    assert found[0].kind == "order" and found[0].tensor == "tan" and found[0].node == "add"
    found = prove_plan(dataclasses.replace(p.plan, order=tuple(order[:-1])), p.view)
    assert found[0].kind == "order" and "relu" in str(found[0])


def test_lifetime_cut_short_is_caught(planned):
    _, p = planned
    cut = tuple(dataclasses.replace(t, end=t.end - 1) if t.name == "sig" else t for t in p.plan.tensors)
    found = prove_plan(dataclasses.replace(p.plan, tensors=cut), p.view)
    assert found[0].kind == "lifetime" and found[0].tensor == "sig" and found[0].node == "add"


def _grouped(plan, member: str, into: str):
    off = plan.tensor(into).offset
    tensors = tuple(
        dataclasses.replace(t, group=plan.tensor(into).group, offset=off) if t.name == member else t
        for t in plan.tensors
    )
    return dataclasses.replace(plan, tensors=tensors)


def test_in_place_over_a_dying_input_is_legal(planned):
    _, p = planned
    # y = Relu(sum) written over sum, which dies at relu (Relu is in the in-place table)
    assert prove_plan(_grouped(p.plan, "y", "sum"), p.view) == []


def test_in_place_over_a_live_input_is_not(planned):
    _, p = planned
    # tan = Tanh(sig) written over sig, which add still reads
    found = prove_plan(_grouped(p.plan, "tan", "sig"), p.view)
    assert found and found[0].kind == "alias" and found[0].tensor == "sig" and found[0].node == "tanh"


def test_shared_objects_never_hold_two_live_tensors(planned):
    _, p = planned
    groups = sorted({t.group for t in p.plan.tensors})
    tensors = []
    for t in p.plan.tensors:
        i = groups.index(t.group)
        tensors.append(dataclasses.replace(t, object=i, offset=256 * i))
    objects = tuple(SharedObject(i, 256, 256 * i) for i in range(len(groups)))
    plan = dataclasses.replace(p.plan, form="shared-objects", tensors=tuple(tensors), objects=objects,
                               arena_size=256 * len(groups))
    assert prove_plan(plan, p.view) == []
    sig, tan = plan.tensor("sig"), plan.tensor("tan")
    tensors = [dataclasses.replace(t, object=sig.object, offset=sig.offset) if t.name == "tan" else t
               for t in plan.tensors]
    found = prove_plan(dataclasses.replace(plan, tensors=tuple(tensors)), p.view)
    assert {"overlap", "object"} <= {f.kind for f in found}
    assert tan.name in {f.tensor for f in found if f.kind == "object"}


# ------------------------------------------------------------------ execution


def test_execution_in_one_arena(planned):
    path, p = planned
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and ex.nodes_run == 4
    assert [c.name for c in ex.outputs] == ["y"] and ex.outputs[0].ok and ex.outputs[0].max_abs_diff == 0.0


def test_execution_names_the_clobbered_tensor_the_node_and_the_bytes(planned):
    path, p = planned
    sig = p.plan.tensor("sig")
    bad = replace(p.plan, tan=sig.offset)
    ex = execute_plan(bad, p.model, p.view, model_path=path)
    f = ex.findings[0]
    assert f.kind == "clobber" and f.tensor == "sig" and f.node == "tanh" and f.other == "tan"
    lo, hi = f.byte_range
    assert sig.offset <= lo < hi <= sig.offset + sig.size
    assert "tanh" in str(f) and f"[{lo}, {hi})" in str(f)


def test_execution_accepts_in_place_over_a_dying_input(planned):
    path, p = planned
    ex = execute_plan(_grouped(p.plan, "y", "sum"), p.model, p.view, model_path=path)
    assert ex.findings == ()


def test_execution_reads_given_inputs(planned):
    path, p = planned
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(1, 64)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(inputs={"x": x}))
    assert ex.findings == ()


def test_external_io_is_bound_outside_the_arena(tmp_path):
    path = diamond(tmp_path)
    p = plan_model(path, PlanOptions(solver="greedy", io="external"))
    assert {t.name for t in p.plan.tensors} == {"sig", "tan", "sum"}
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first


def _light(name: str) -> Path:
    return LIGHT / f"light_{name}.onnx"


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_onnx_wheel_models_verify(name):
    path = _light(name)
    p = plan_model(path, GREEDY)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first
    assert report.execution is not None and report.execution.nodes_run > 50


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(LIGHT.glob("light_*.onnx")), ids=lambda p: p.stem)
def test_all_nine_onnx_wheel_models_verify(path):
    p = plan_model(path, PlanOptions())
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_models_verify(path):
    opts = PlanOptions(solver="greedy", dims=SHIPPED_DIMS.get(path.name, {}))
    p = plan_model(path, opts)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first


# ------------------------------------------------------------------ CLI


def test_cli_verify_annotated_model(tmp_path):
    path = diamond(tmp_path)
    annotated = tmp_path / "annotated.onnx"
    r = CliRunner().invoke(main, ["plan", str(path), "--solver", "greedy", "--annotate", str(annotated)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["verify", str(annotated)])
    assert r.exit_code == 0, r.output
    assert "carried by the annotated model" in r.output and "verified" in r.output


def test_cli_wrong_plan_exits_3_naming_the_tensor(tmp_path, planned):
    path, p = planned
    plan_file = tmp_path / "bad.json"
    write_plan(replace(p.plan, tan=p.plan.tensor("sig").offset), plan_file)
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan_file)])
    assert r.exit_code == 3, r.output
    assert "'tan'" in r.stderr and "'sig'" in r.stderr and r.stderr.count("\n") == 1


def test_cli_good_plan_exits_0(tmp_path, planned):
    path, p = planned
    plan_file = tmp_path / "good.json"
    write_plan(p.plan, plan_file)
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan_file), "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert "executed  4 nodes" in r.output


def test_cli_inputs_npz(tmp_path, planned):
    path, _ = planned
    good = tmp_path / "in.npz"
    np.savez(good, x=np.ones((1, 64), np.float32))
    assert CliRunner().invoke(main, ["verify", str(path), "--solver", "greedy", "--inputs", str(good)]).exit_code == 0
    bad = tmp_path / "bad.npz"
    np.savez(bad, z=np.ones((1, 64), np.float32))
    r = CliRunner().invoke(main, ["verify", str(path), "--solver", "greedy", "--inputs", str(bad)])
    assert r.exit_code == 1 and "'x'" in r.stderr


def test_cli_other_errors_exit_1_and_usage_2(tmp_path):
    r = CliRunner().invoke(main, ["verify", str(tmp_path / "missing.onnx")])
    assert r.exit_code == 1 and r.stderr.startswith("error:")
    r = CliRunner().invoke(main, ["verify", str(tmp_path / "m.onnx"), "--device", "tpu"])
    assert r.exit_code == 2


def test_cli_cuda_without_a_gpu_is_one_line(tmp_path):
    if cuda_available():
        pytest.skip("a CUDA device is present")
    r = CliRunner().invoke(main, ["verify", str(diamond(tmp_path)), "--device", "cuda"])
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1 and "--device cpu" in r.stderr


def test_the_cuda_runtimes_copies_answer_with_an_error_where_no_gpu_runs():
    """``cuda_copies``: typed for ctypes, a copy and a synchronization where no GPU can run answer
    with the runtime's error code (the device arena then keeps to its session; on a GPU
    tests/test_cuda.py checks the copies themselves); without a runtime library there are none."""
    from onnxmem.runtime.arena_buffers import cuda_copies

    if cuda_available():
        pytest.skip("a CUDA device is present")
    copies = cuda_copies()
    if copies is None:
        pytest.skip("no CUDA runtime library loads here")
    copy, sync = copies
    src, dst = np.arange(16, dtype=np.uint8), np.zeros(16, dtype=np.uint8)
    assert copy(int(dst.ctypes.data), int(src.ctypes.data), 16, 2) != 0 and sync() != 0
    assert not dst.any()


@pytest.mark.cuda
def test_cuda_arena(tmp_path):
    if not cuda_available():
        pytest.skip("onnxruntime's CUDA provider cannot run here")
    for path in [diamond(tmp_path), *SHIPPED[:2]]:
        p = plan_model(path, PlanOptions(solver="greedy", alignment=256, dims=SHIPPED_DIMS.get(path.name, {})))
        report = verify_plan(p.model, p.plan, model_path=path, view=p.view, options=VerifyOptions(device="cuda"))
        assert report.ok, report.first
    p = plan_model(diamond(tmp_path), PlanOptions(solver="greedy", alignment=256))
    bad = replace(p.plan, tan=p.plan.tensor("sig").offset)
    ex = execute_plan(bad, p.model, p.view, options=VerifyOptions(device="cuda"))
    assert ex.findings and ex.findings[0].kind == "clobber"


def test_dtype_bool_and_int_tensors(tmp_path):
    nodes = [
        helper.make_node("Greater", ["x", "z"], ["g"], name="gt"),
        helper.make_node("Cast", ["g"], ["i"], to=TensorProto.INT64, name="cast"),
        helper.make_node("Not", ["g"], ["n"], name="not"),
    ]
    model = make_model(nodes, [vi("x", [3, 5]), vi("z", [3, 5])],
                       [vi("i", [3, 5], TensorProto.INT64), vi("n", [3, 5], TensorProto.BOOL)])
    path = tmp_path / "types.onnx"
    onnx.save(model, path)
    p = plan_model(path, GREEDY)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first


# ------------------------------------------------------------------ regressions


def test_gather_with_a_0d_index_keeps_its_rank(tmp_path):
    """A 0-d int64 index (an initializer, or a Constant node's output) is bound 0-d, not 1-d."""
    idx = onnx.numpy_helper.from_array(np.array(2, np.int64), "idx")
    nodes = [
        helper.make_node("Constant", [], ["idx_c"], value=onnx.numpy_helper.from_array(np.array(1, np.int64)), name="c"),
        helper.make_node("Gather", ["data", "idx"], ["row"], axis=0, name="select"),
        helper.make_node("Gather", ["row", "idx_c"], ["one"], axis=0, name="select_one"),
        helper.make_node("Relu", ["row"], ["y"], name="relu"),
    ]
    model = make_model(nodes, [vi("data", [4, 8])], [vi("y", [8]), vi("one", [])], inits=[idx])
    path = tmp_path / "gather0d.onnx"
    onnx.save(model, path)
    p = plan_model(path, GREEDY)
    assert p.view.tensors["row"].shape == (8,) and p.view.tensors["one"].shape == ()
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first
    assert all(c.identical for c in report.execution.outputs)


@pytest.mark.parametrize(
    ("got", "ref", "ok"),
    [
        # logits of 8e11 that differ in their last bits: fine on the output's scale
        ([8e11, -3e11, 1.0], [8e11 + 3.9e5, -3e11, 1.0], True),
        ([1.0, 2.0], [1.0, 2.0 + 1e-3], False),  # 5e-4 of the largest value
        ([1.0, np.nan], [1.0, 2.0], False),  # the sentinel reads as NaN
        ([np.nan, np.inf], [np.nan, np.inf], True),
        ([np.inf, 1.0], [-np.inf, 1.0], False),
        ([0.0, 0.0], [0.0, 2e-5], False),  # an all-zero reference leaves atol alone
    ],
)
def test_output_check_is_on_the_scale_of_the_output(got, ref, ok):
    from onnxmem.runtime.arena import compare_output

    c = compare_output("y", np.array(got, np.float32), np.array(ref, np.float32), rtol=1e-4, atol=1e-5)
    assert c.ok is ok, c
    assert compare_output("i", np.array([1, 2]), np.array([1, 3]), 1e-4, 1e-5).ok is False


def test_scale_aware_check_still_catches_a_corrupted_plan(planned):
    path, p = planned
    bad = replace(p.plan, tan=p.plan.tensor("sig").offset)  # add reads tan where sig was
    ex = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(keep_going=True))
    kinds = [f.kind for f in ex.findings]
    assert kinds[0] == "clobber" and "output" in kinds and ex.changed_result
    # sig's bytes as they must stay, kept apart from tan's write: its reader finds them changed too
    assert [(f.kind, f.tensor) for f in ex.findings[:2]] == [("clobber", "sig")] * 2
    assert "before it runs of 'add'" in ex.findings[1].message
    (c,) = ex.outputs
    assert not c.ok and not c.identical and c.max_abs_diff > c.tolerance > 0


def weighted(tmp_path: Path, legacy: bool = False) -> Path:
    """y = Reshape(MatMul(x, W) + b, shape): a 64 KiB float weight, a 4 B bias (kept in the
    graph: under 1 KiB) and an int64 shape that onnxruntime's shape inference reads. ``legacy``:
    IR version 3, where every initializer is a graph input too."""
    rng = np.random.default_rng(1)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "W"),
             onnx.numpy_helper.from_array(rng.standard_normal(1).astype(np.float32), "b"),
             onnx.numpy_helper.from_array(np.array([4, 64], dtype=np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["s"], name="add"),
             helper.make_node("Reshape", ["s", "shape"], ["y"], name="reshape")]
    extra = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits] if legacy else []
    model = make_model(nodes, [vi("x", [1, 64]), *extra], [vi("y", [4, 64])], inits)
    if legacy:
        model.ir_version = 3
        model.opset_import[0].version = 9
    path = tmp_path / "weighted.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("legacy", [False, True])
def test_whole_model_run_takes_the_weights_without_serializing_them(tmp_path, legacy):
    """The whole-model run gets the large float weights as OrtValues: the model it serializes
    holds none of their bytes, the shape stays in the graph, and the outputs are those of the
    model serialized whole."""
    from onnxmem.runtime.folding import compute_weights
    from onnxmem.runtime.ort import IN_MEMORY, apart_from_weights, make_session
    from onnxmem.runtime.sessions import run_model

    path = weighted(tmp_path, legacy)
    p = plan_model(path, GREEDY)
    weights = compute_weights(p.model, p.view)
    stubbed, taken = apart_from_weights(p.model, weights)
    assert set(taken) == {"W"}
    assert stubbed.ByteSize() < 4096 < p.model.ByteSize()
    (w,) = [t for t in stubbed.graph.initializer if t.name == "W"]
    assert w.data_location == TensorProto.EXTERNAL and w.external_data[0].value == IN_MEMORY and not w.raw_data
    assert [t.name for t in stubbed.graph.initializer] == [t.name for t in p.model.graph.initializer]
    assert stubbed.graph.node == p.model.graph.node and stubbed.opset_import == p.model.opset_import
    x = {"x": np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)}
    whole = make_session(p.model).run(["y"], x)[0]
    got = run_model(p.model, x, ["y"], weights=weights)["y"]
    assert got.shape == (4, 64) and np.array_equal(got, whole)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and ex.outputs[0].identical and ex.outputs[0].whole_model_ok


def test_a_large_weight_only_a_branch_reads_stays_in_the_graph(tmp_path):
    """A main-graph weight read only inside an If's branches is left in the model: onnxruntime
    cannot take it apart from the model (its graph moves it into the branch) and would refuse
    to load; verify runs the model (silero_vad_op18_ifless.onnx is built this way)."""
    from onnxmem.runtime.ort import apart_from_weights

    w = numpy_helper.from_array(np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256), "W")
    then = helper.make_graph([helper.make_node("Add", ["x", "W"], ["t"])], "then", [],
                             [vi("t", [1, 256])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["e"])], "else", [],
                              [vi("e", [1, 256])])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                       [vi("x", [1, 256]), vi("c", [], TensorProto.BOOL)],
                       [vi("y", [1, 256])], [w])
    path = tmp_path / "if_weight.onnx"
    onnx.save(model, path)
    stubbed, taken = apart_from_weights(model, {"W": numpy_helper.to_array(w)})
    assert taken == {} and stubbed.graph.initializer[0].raw_data == w.raw_data
    p = plan_model(path, GREEDY)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert report.ok, report.first


def test_weights_computed_from_a_large_weight_take_it_in_memory(tmp_path):
    """A constant node over a 64 KiB float weight (folded: a weight op) is computed in a session
    that gets the weight as an OrtValue, not serialized; its value is the weight's transpose."""
    from onnxmem.runtime.folding import compute_weights
    from onnxmem.runtime.ort import IN_MEMORY, in_memory

    w = np.random.default_rng(3).standard_normal((256, 64)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], name="t", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["y"], name="mm")]
    path = tmp_path / "folded.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 64])], [vi("y", [1, 256])], [onnx.numpy_helper.from_array(w, "W")]),
              path)
    p = plan_model(path, GREEDY)
    assert p.view.weight_ops
    got = compute_weights(p.model, p.view)
    assert np.array_equal(got["Wt"], w.T)
    stub = in_memory("W", w)
    assert stub is not None and stub.external_data[0].value == IN_MEMORY and list(stub.dims) == [256, 64]
    assert in_memory("s", np.zeros(4, np.float32)) is None and in_memory("i", np.zeros(512, np.int64)) is None
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and ex.outputs[0].identical


def test_nodes_alike_share_one_session_and_random_ones_do_not(tmp_path):
    """Nodes of the same op, attributes, input ranks and types run in one session (under the
    session's own names of their values, whatever their names, documentation and metadata); a
    random op, or another rank, gets its own. The
    arena run of a chain of such nodes is still the reference's, bit for bit."""
    from onnxmem.runtime.sessions import node_session, value_names
    from onnxmem.runtime.settings import session_options

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], ["b"], name="r2", doc_string="the second"),
             helper.make_node("Add", ["b", "b"], ["c"], name="twice"), helper.make_node("Relu", ["c"], ["d"], name="r3"),
             helper.make_node("RandomNormalLike", ["d"], ["n1"], name="n1", seed=1.0),
             helper.make_node("RandomNormalLike", ["d"], ["n2"], name="n2", seed=1.0),
             helper.make_node("Add", ["n1", "n2"], ["s"], name="sum"),
             helper.make_node("ReduceSum", ["s"], ["y"], name="reduce", keepdims=0)]
    nodes[3].metadata_props.add(key="namespace", value="layer.3")  # what exporters write: no part of the kernel
    path = tmp_path / "alike.onnx"
    onnx.save(make_model(nodes, [vi("x", [2, 8])], [vi("y", [])]), path)
    p = plan_model(path, GREEDY)
    ops = {op.name: op for op in p.view.ops}
    assert value_names(ops["twice"]) == {"b": "i0", "c": "o0"}
    cache: dict = {}
    made = {name: node_session(p.model, p.model.graph.node[op.index], op, p.view, {}, session_options(),
                               ["CPUExecutionProvider"], cache=cache) for name, op in ops.items()}
    assert made["r1"] is made["r2"] is made["r3"]
    assert made["n1"] is not made["n2"] and made["twice"] is not made["sum"] is not made["r1"]
    assert [i.name for i in made["twice"].get_inputs()] == ["i0"]
    chain = tmp_path / "chain.onnx"  # the same nodes but the random ones (two runs of one draw differ)
    onnx.save(make_model(nodes[:4], [vi("x", [2, 8])], [vi("d", [2, 8])]), chain)
    p = plan_model(chain, GREEDY)
    ex = execute_plan(p.plan, p.model, p.view, model_path=chain)
    assert ex.findings == () and ex.nodes_run == 4 and all(c.identical for c in ex.outputs)


def test_reference_is_the_same_nodes_outside_the_arena(planned, monkeypatch):
    """Where each node runs again as the reference (``reference="nodes"``: CUDA, a random op,
    training graphs), a whole-model run that sums in another order is information, not a verdict."""
    import onnxmem.runtime.sessions as sessions_mod

    path, p = planned
    real = sessions_mod.run_model

    def other_kernels(model, feeds, outputs, **kw):
        return {n: v * np.float32(1.001) for n, v in real(model, feeds, outputs, **kw).items()}

    monkeypatch.setattr(sessions_mod, "run_model", other_kernels)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert ex.findings == ()
    (c,) = ex.outputs
    assert c.ok and c.identical and c.whole_model_ok is False and c.whole_model_diff > 0
    assert any("whole-model" in n and "not the plan" in n for n in ex.notes)


def test_large_outputs_verify(tmp_path):
    """Outputs of 1e12 verify: the per-node reference matches bit for bit."""
    big = onnx.numpy_helper.from_array(np.full((64, 64), 3e4, np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="mm2")]
    path = tmp_path / "big.onnx"
    onnx.save(make_model(nodes, [vi("x", [8, 64])], [vi("y", [8, 64])], inits=[big]), path)
    p = plan_model(path, GREEDY)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view, options=VerifyOptions(inputs={
        "x": np.random.default_rng(0).uniform(0, 1, (8, 64)).astype(np.float32)}))
    assert report.ok, report.first
    (c,) = report.execution.outputs
    assert c.identical and c.whole_model_ok and c.tolerance > 1e6


def test_onnxruntime_prints_nothing(tmp_path, capfd):
    """A failing kernel's status comes back in the exception; nothing goes to stderr."""
    from onnxmem.runtime.ort import make_session

    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [vi("x", [2]), vi("s", [1], TensorProto.INT64)], [vi("y", None)])
    sess = make_session(model)
    with pytest.raises(Exception, match="cannot be reshaped"):
        sess.run(None, {"x": np.ones(2, np.float32), "s": np.array([3], np.int64)})
    assert capfd.readouterr().err == ""


# ------------------------------------------------------------------ scale


def _chain_plan(n: int, *, in_place: bool):
    """A plan of the ``n``-node Relu chain, built by hand: every tensor in one
    in-place group at offset 0, or each in its own group on two alternating buffers."""
    from onnxmem.graph import build_view
    from onnxmem.plans.point import MemoryPlan, PlannedTensor
    from onnxmem.proof.plan import true_lifetimes
    from onnxmem.shapes import infer_shapes

    from .helpers import chain

    model = chain(n)
    view = build_view(model, infer_shapes(model))
    life = true_lifetimes(view, range(len(view.ops)))
    tensors = []
    for k, t in enumerate(view.activations()):
        op = view.ops[t.producer] if t.producer is not None else None
        offset = 0 if in_place else (k % 2) * t.size
        tensors.append(PlannedTensor(t.name, t.dtype, t.shape, t.size, offset, life[t.name][0], life[t.name][1],
                                     op.name if op else None, op.op_type if op else None, t.kind,
                                     "x" if in_place else t.name))
    size = tensors[0].size * (1 if in_place else 2)
    plan = MemoryPlan(model={}, dims={}, input_shapes={}, order=tuple(op.name for op in view.ops),
                      op_types=tuple(op.op_type for op in view.ops), order_strategy="file", io="internal",
                      alignment=1, inplace=in_place, form="offsets", tensors=tuple(tensors), arena_size=size,
                      lower_bound=size, naive_size=size * n, weights_size=0, peak_step=0, solver={}, plan_seconds=0.0)
    return plan, view


@pytest.mark.parametrize("in_place", [False, True], ids=["two-buffers", "one-group"])
def test_proof_of_20000_tensors_finds_one_planted_overlap(in_place):
    plan, view = _chain_plan(20_000, in_place=in_place)
    assert len(plan.tensors) == 20_001
    assert prove_plan(plan, view) == []
    # t9000 moves onto t8999 in a group of its own: it overlaps t8999 (read when t9000 is
    # written) and t9001 (written over it), and nothing else among 20,000 tensors
    moved = tuple(dataclasses.replace(t, offset=plan.tensor("t8999").offset, group="lone") if t.name == "t9000" else t
                  for t in plan.tensors)
    found = prove_plan(dataclasses.replace(plan, tensors=moved), view)
    assert [(f.kind, f.tensor, f.other) for f in found] == [("overlap", "t9000", "t8999"), ("overlap", "t9001", "t9000")]
    assert "'t8999' and 't9000' (written by node 'relu9000')" in found[0].message
    assert found[0].byte_range == (0, 64)


# ------------------------------------------------------------------ memory and identity


def _verify_with(tmp_path, model_path, plan):
    """``onnxmem verify MODEL --plan FILE`` with ``plan`` written to FILE: ``(result, FILE)``."""
    plan_file = tmp_path / "p.json"
    write_plan(plan, plan_file)
    return CliRunner().invoke(main, ["verify", str(model_path), "--plan", str(plan_file)]), plan_file


def test_arena_beyond_memory_is_refused_before_allocating(tmp_path, planned):
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime.arena import available_memory

    path, p = planned
    have = available_memory("cpu")
    assert have is not None and have > 0
    huge = dataclasses.replace(p.plan, arena_size=2**40)  # 1 TiB: statically fine, too large to run here
    assert prove_plan(huge, p.view) == []
    with pytest.raises(RuntimeBackendError, match=r"arena of 1099511627776 B \(1024\.00 GiB\) does not fit in the \d+ B"):
        verify_plan(p.model, huge, model_path=path, view=p.view)
    r, _ = _verify_with(tmp_path, path, huge)
    assert r.exit_code == 1, r.output
    assert "does not fit" in r.stderr and "host memory available" in r.stderr and r.stderr.count("\n") == 1


def test_plan_for_another_model_is_refused_in_one_line(tmp_path, planned):
    from onnxmem.core.errors import PlanError
    from onnxmem.model import file_sha256
    from onnxmem.verify.run import check_plan_identity

    from .helpers import chain

    path, p = planned
    other = tmp_path / "other.onnx"
    onnx.save(chain(3, shape=(1, 64)), other)
    mine, theirs = file_sha256(path)[:8], file_sha256(other)[:8]
    r, plan_file = _verify_with(tmp_path, other, p.plan)
    assert r.exit_code == 1, r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert (f"plan {str(plan_file)!r} was made for a model with sha256 {mine}…, not {str(other)!r} "
            f"(sha256 {theirs}…); plan this model again") in r.stderr
    with pytest.raises(PlanError, match="plan this model again"):
        check_plan_identity(p.plan, onnx.load(other), other, plan_name="p.json")
    # its own model: no warning
    assert check_plan_identity(p.plan, p.model, path, plan_name="p.json")[1] == ()


def test_resaved_model_is_accepted_with_a_warning(tmp_path, planned):
    path, p = planned
    m = onnx.load(path)
    m.producer_name = "re-saved"  # other bytes, the same graph
    resaved = tmp_path / "resaved.onnx"
    onnx.save(m, resaved)
    r, _ = _verify_with(tmp_path, resaved, p.plan)
    assert r.exit_code == 0, r.output
    assert "re-saved" in r.stderr and "verifying it anyway" in r.stderr and "verified" in r.output
    # a tensor of another size is another model, whatever its names
    bigger = onnx.load(path)
    for v in list(bigger.graph.input) + list(bigger.graph.output):
        v.type.tensor_type.shape.dim[1].dim_value = 128
    onnx.save(bigger, resaved)
    r, _ = _verify_with(tmp_path, resaved, p.plan)
    assert r.exit_code == 1 and "plan this model again" in r.stderr, r.output


def test_planning_imports_only_the_proof(tmp_path):
    """The planner's check is the pure proof: planning a model loads no onnxruntime and no execution code."""
    import subprocess
    import sys

    from .helpers import chain

    path = tmp_path / "chain.onnx"
    onnx.save(chain(4), path)
    code = (
        "import sys\n"
        "from onnxmem.planning.pipeline import PlanOptions, plan_model\n"
        f"plan_model({str(path)!r}, PlanOptions(solver='greedy'))\n"
        "print(sorted(m for m in ('onnxruntime', 'onnxmem.verify.run', 'onnxmem.runtime.arena', 'onnxmem.runtime.sessions',"
        " 'onnxmem.runtime.folding', 'onnxmem.runtime.ort') if m in sys.modules))\n"
        "print('onnxmem.proof.plan' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"], out


def test_host_array_owns_its_bytes():
    """``numpy()`` of a value made over a numpy array views that buffer without keeping it
    alive; the reference values the verifier hands on are copies it owns."""
    import onnxruntime as ort

    from onnxmem.runtime.sessions import host_array

    src = np.arange(256, dtype=np.float32).reshape(2, 128)
    value = ort.OrtValue.ortvalue_from_numpy(src, "cpu", 0)
    view = value.numpy()
    assert np.shares_memory(view, src)  # what onnxruntime gives: a view of the caller's buffer
    kept = host_array(value)
    assert kept.flags["OWNDATA"] and not np.shares_memory(kept, src)
    src[:] = -1.0
    assert np.array_equal(kept, np.arange(256, dtype=np.float32).reshape(2, 128))


def test_recent_sessions_keep_the_last_used_and_drop_the_oldest():
    from onnxmem.runtime.sessions import RecentSessions

    cache = RecentSessions(2)
    cache["a"], cache["b"] = 1, 2
    assert cache["a"] == 1  # a is now the most recent
    cache["c"] = 3
    assert list(cache) == ["a", "c"] and "b" not in cache
    cache["a"] = 4  # storing again refreshes it too
    cache["d"] = 5
    assert dict(cache) == {"a": 4, "d": 5}


def test_recent_sessions_drop_the_oldest_while_the_device_has_no_room():
    """A cache whose ``room`` says no keeps dropping the oldest, never below FEWEST_SESSIONS;
    with room it keeps up to its limit."""
    from onnxmem.runtime.sessions import FEWEST_SESSIONS, RecentSessions

    free = {"now": True}
    cache = RecentSessions(10, lambda: free["now"])
    for k in range(8):
        cache[k] = k
    assert list(cache) == list(range(8))
    free["now"] = False
    cache[8] = 8
    assert list(cache) == list(range(9 - FEWEST_SESSIONS, 9))
    free["now"] = True
    for k in range(9, 20):
        cache[k] = k
    assert list(cache) == list(range(10, 20))



def test_a_plan_made_now_is_proven_once(monkeypatch):
    """``verify_plan(proven=...)``: the planner's proof of the plan it just made is the report's;
    a plan given without it, or held to rule 9 it was not made with, is proven again."""
    import onnxmem.verify.run as run

    from .conftest import MODELS

    planned = plan_model(MODELS / "resnet_cnn.onnx", GREEDY)
    assert planned.proof_seconds > 0
    calls = []
    real = run.prove_plan
    monkeypatch.setattr(run, "prove_plan", lambda *a, **k: calls.append(k.get("concurrency")) or real(*a, **k))
    opts = run.VerifyOptions(execute=False)
    report = run.verify_plan(planned.model, planned.plan, view=planned.view, options=opts,
                             proven=planned.proof_seconds)
    assert calls == [] and report.ok and report.static_seconds == planned.proof_seconds
    report = run.verify_plan(planned.model, planned.plan, view=planned.view, options=opts)
    assert calls == ["sequential"] and report.ok
    dag = run.VerifyOptions(execute=False, concurrency="dag")
    run.verify_plan(planned.model, planned.plan, view=planned.view, options=dag, proven=planned.proof_seconds)
    assert calls == ["sequential", "dag"]
    # a wrong plan given without proven is caught
    wrong = dataclasses.replace(planned.plan, tensors=tuple(dataclasses.replace(t, offset=0)
                                                            for t in planned.plan.tensors))
    report = run.verify_plan(planned.model, wrong, view=planned.view, options=opts)
    assert not report.ok and "share bytes" in str(report.first)


def test_an_output_over_a_live_input_is_found_and_a_refusal_there_is_a_clobber():
    """``arena_buffers.overlaps`` pairs a node's output with each live value whose bytes it shares
    and must leave alone (not an input of the output's group dying there, unless a graph output);
    ``refused_finding`` makes the failure of a kernel bound so (CUDA's Transpose over its input)
    the clobber the CPU run reports: the value, the node, its output, the shared bytes."""
    from onnxmem.graph import Op
    from onnxmem.runtime.arena_buffers import Slot, overlaps, refused_finding

    op = Op(index=1, name="transpose", op_type="Transpose", domain="", inputs=("a",), outputs=("t",))

    def slot(name, offset, group, end):
        return Slot(name, "arena", offset, 32768, TensorProto.FLOAT, (64, 128), group, end)

    a, t = slot("a", 0, "a", 2), slot("t", 16384, "t", 3)
    slots, live = {"a": a, "t": t}, {"a": a, "x": slot("x", 65536, "x", 1)}
    assert [(w.name, s.name) for w, s in overlaps(op, 1, ["t"], slots, live, ())] == [("t", "a")]
    same = dataclasses.replace(t, group="a")  # in place over its input, which dies here: allowed
    assert list(overlaps(op, 1, ["t"], {"a": a, "t": same}, live, ())) == []
    assert len(list(overlaps(op, 1, ["t"], {"a": a, "t": same}, live, ("a",)))) == 1  # unless a graph output
    f = refused_finding(t, a, op, "CUBLAS failure 7: an unsupported value", "")
    assert (f.kind, f.tensor, f.node, f.other, f.byte_range) == ("clobber", "a", "transpose", "t", (16384, 32768))
    assert f.message == ("node 'transpose' failed to run with its output 't' over arena bytes [16384, 32768) of 'a', "
                         "still live: CUBLAS failure 7: an unsupported value")
