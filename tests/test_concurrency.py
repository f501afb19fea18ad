"""Plans safe under concurrent execution (--concurrency dag): hand-computed diamonds, the
happens-before proof, concurrent trials in one arena, and the command line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.analysis.happens_before import happens_before
from onnxmem.cli.main import main
from onnxmem.core.errors import ModelError, OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.plans.point import write_plan
from onnxmem.proof.plan import prove_plan
from onnxmem.runtime.arena import ExecutionOptions
from onnxmem.runtime.concurrent import ConcurrentOptions, ConcurrentRun, run_concurrent

from .conftest import LIGHT_MODELS, MODELS
from .helpers import make_model, vi

S = 1024  # bytes of every tensor below: [1, 256] float
SHAPE = [1, 256]


def _save(model: onnx.ModelProto, tmp_path: Path, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def uneven_diamond() -> onnx.ModelProto:
    """x -> a = Exp(x); a -> b1 = Neg(a) -> b2 = Sin(b1); a -> c1 = Cos(a); d = Add(b2, c1)."""
    nodes = [
        helper.make_node("Exp", ["x"], ["a"], name="exp"),
        helper.make_node("Neg", ["a"], ["b1"], name="neg"),
        helper.make_node("Sin", ["b1"], ["b2"], name="sin"),
        helper.make_node("Cos", ["a"], ["c1"], name="cos"),
        helper.make_node("Add", ["b2", "c1"], ["d"], name="add"),
    ]
    return make_model(nodes, [vi("x", SHAPE)], [vi("d", SHAPE)])


def inplace_fork() -> onnx.ModelProto:
    """x -> a = Exp(x); c = Neg(a) and b = Relu(a) read a; d = Sigmoid(b); c and d are graph
    outputs. In the file order the Relu is a's last reader, so b may be written over a; under
    concurrency Neg may still read a. Relu and Sigmoid (float) are in the in-place table."""
    nodes = [
        helper.make_node("Exp", ["x"], ["a"], name="exp"),
        helper.make_node("Neg", ["a"], ["c"], name="neg"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Sigmoid", ["b"], ["d"], name="sigmoid"),
    ]
    return make_model(nodes, [vi("x", SHAPE)], [vi("c", SHAPE), vi("d", SHAPE)])


def _plan(model: onnx.ModelProto, tmp_path: Path, **opts):
    path = _save(model, tmp_path)
    return path, plan_loaded(model, path, PlanOptions(**{"order": "file", **opts}))


def test_uneven_diamond_arenas_by_hand(tmp_path):
    # file order exp, neg, sin, cos, add: a [0,4), b1 [1,3), b2 [2,5), c1 [3,5), d [4,5):
    # at most 3 tensors live at once, and b1 and c1 take turns in one slot
    _, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    assert (seq.plan.lower_bound, seq.plan.arena_size) == (3 * S, 3 * S)
    # under any schedule a, b1, b2 and c1 may all be live (cos may run before or after neg and
    # sin): 4 buffers; x shares with a branch, d with a
    _, dag = _plan(uneven_diamond(), tmp_path, inplace=False, concurrency="dag")
    assert (dag.plan.lower_bound, dag.plan.arena_size) == (4 * S, 4 * S)
    assert dag.plan.extra["concurrency"] == "dag" and "concurrency" not in seq.plan.extra
    assert prove_plan(dag.plan, dag.view) == []
    assert dag.plan.solver["status"] == "optimal"


def test_inplace_fork_keeps_only_sharing_the_graph_allows(tmp_path):
    # file order exp, neg, relu, sigmoid (steps 0..3), inputs and outputs in the arena:
    # x [0,1), c [1,4) (output), {a, b, d} [0,4) (relu over a, sigmoid over b; d an output).
    # Live: step 0 x + a = 2S, step 1 a + c, step 2 {a,b} + c, step 3 {a,b,d} + c: 2S each
    _, seq = _plan(inplace_fork(), tmp_path)
    groups = {t.name: t.group for t in seq.plan.tensors}
    assert groups["b"] == groups["a"] == groups["d"]  # relu in place over a, sigmoid in place over b
    assert groups["c"] != groups["a"]  # Neg is not in the in-place table, and a lives on after it
    assert (seq.plan.lower_bound, seq.plan.arena_size) == (2 * S, 2 * S)
    _, dag = _plan(inplace_fork(), tmp_path, concurrency="dag")
    groups = {t.name: t.group for t in dag.plan.tensors}
    assert groups["b"] != groups["a"]  # neg may still read a while relu writes
    assert groups["d"] == groups["b"]  # sigmoid is b's only reader: still in place
    # a, {b, d} and c may all be live at once (3S); x shares with one of the last two
    assert (dag.plan.lower_bound, dag.plan.arena_size) == (3 * S, 3 * S)
    assert prove_plan(dag.plan, dag.view) == []
    # the sequential plan's in-place write is named by the proof under dag, with the reader
    found = prove_plan(seq.plan, seq.view, concurrency="dag")
    assert any(f.kind == "concurrency" and {f.tensor, f.other} <= {"a", "b", "c", "d"} and "relu" in f.message
               for f in found)


def test_happens_before_follows_paths():
    from onnxmem.graph import build_view
    from onnxmem.shapes import infer_shapes

    m = uneven_diamond()
    view = build_view(m, infer_shapes(m))
    hb = happens_before(view)
    idx = {op.name: op.index for op in view.ops}
    assert hb.before(idx["exp"], idx["add"]) and hb.before(idx["neg"], idx["sin"])
    assert not hb.before(idx["neg"], idx["cos"]) and not hb.before(idx["cos"], idx["sin"])
    assert not hb.before(idx["add"], idx["add"])


def test_proof_names_the_pair_and_a_schedule_that_breaks_it(tmp_path):
    _, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    assert prove_plan(seq.plan, seq.view) == []  # fine for its own order
    found = prove_plan(seq.plan, seq.view, concurrency="dag")
    assert found and all(f.kind == "concurrency" for f in found)
    f = found[0]
    assert f.schedule is not None and sorted(f.schedule) == sorted(seq.plan.order)
    assert f.tensor in f.message and f.other in f.message and "schedule" in f.message
    # the schedule is one the graph allows
    pos = {n: k for k, n in enumerate(f.schedule)}
    assert pos["exp"] < pos["neg"] < pos["sin"] < pos["add"] and pos["cos"] < pos["add"]


def test_sequential_plan_clobbers_under_the_proofs_schedule(tmp_path):
    path, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    f = prove_plan(seq.plan, seq.view, concurrency="dag")[0]
    ex = run_concurrent(seq.plan, seq.model, seq.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=1, threads=1, schedule=f.schedule))
    assert ex.failures == 1
    finding = ex.findings[0]
    assert finding.kind in ("clobber", "output") and finding.byte_range is not None
    assert ex.trials[0].started == tuple(n for n in f.schedule if n in ex.trials[0].started)


def test_dag_plan_survives_the_same_schedule_and_random_trials(tmp_path):
    path, dag = _plan(uneven_diamond(), tmp_path, inplace=False, concurrency="dag")
    _, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    schedule = prove_plan(seq.plan, seq.view, concurrency="dag")[0].schedule
    ex = run_concurrent(dag.plan, dag.model, dag.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=1, threads=1, schedule=schedule))
    assert ex.failures == 0
    ex = run_concurrent(dag.plan, dag.model, dag.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=20, threads=2))
    assert ex.failures == 0 and len(ex.trials) == 20
    assert max(t.most_at_once for t in ex.trials) == 2


def test_one_run_serves_every_thread_count(tmp_path):
    """Sessions, bindings and the reference are made once per run: later calls, at other trial
    and thread counts, reuse them and give what a fresh run gives."""
    path, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    schedule = prove_plan(seq.plan, seq.view, concurrency="dag")[0].schedule
    opts = ConcurrentOptions(trials=1, threads=1, schedule=schedule)
    run = ConcurrentRun(seq.plan, seq.model, seq.view, ExecutionOptions(), opts, path)
    first = run.run_trials()
    sessions, bindings, ref = dict(run.sessions), dict(run.bindings), run.reference_seconds
    again = run.run_trials(3, 1)
    assert run.sessions == sessions and run.bindings == bindings and run.reference_seconds == ref
    assert again.reference_seconds == first.reference_seconds and len(again.trials) == 3
    fresh = run_concurrent(seq.plan, seq.model, seq.view, model_path=path, concurrent=opts).trials[0]
    assert fresh.finding is not None and fresh.finding.kind == "clobber"
    for t in (*first.trials, *again.trials):
        assert t.finding == fresh.finding and t.started == fresh.started
    _, dag = _plan(uneven_diamond(), tmp_path, inplace=False, concurrency="dag")
    run = ConcurrentRun(dag.plan, dag.model, dag.view, ExecutionOptions(), ConcurrentOptions(), path)
    for threads in (2, 4):
        ex = run.run_trials(10, threads)
        assert ex.threads == threads and ex.failures == 0 and len(ex.trials) == 10
    with pytest.raises(OnnxmemError, match="--threads and --trials must be 1 or more"):
        run.run_trials(0, 2)


def test_checks_compare_the_arena_where_it_lies(tmp_path):
    """A node's checks read the arena itself (no snapshot), word by word and the bytes after the
    last word: a byte changed in either part is found at its offset."""
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="exp"), helper.make_node("Neg", ["a"], ["b"], name="neg")]
    path, dag = _plan(make_model(nodes, [vi("x", [1, 3])], [vi("b", [1, 3])]), tmp_path, concurrency="dag")
    run = ConcurrentRun(dag.plan, dag.model, dag.view, ExecutionOptions(), ConcurrentOptions(), path)
    run.prepare()
    slot = run.slots["a"]
    assert slot.size == 12 and run._differs("a") is not None  # the arena holds the sentinel
    run.arena.write(slot.offset, run.reference["a"])
    assert run._differs("a") is None
    for k in (2, 11):  # in the 8-byte word, in the 4 bytes after it
        run.arena.view[slot.offset + k] ^= 1
        assert run._differs("a") == (slot.offset + k, slot.offset + k + 1)
        run.arena.view[slot.offset + k] ^= 1
    assert run._differs("a") is None


def test_concurrent_trials_refuse_a_graph_with_bodies():
    path = MODELS / "control_flow.onnx"
    model = onnx.load(path)
    dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))
    with pytest.raises(OnnxmemError, match="concurrent trials run graphs without If/Loop/Scan bodies, and node "
                                           "'.+' has them; run the plan in its own order"):
        ConcurrentRun(dag.plan, dag.model, dag.view, ExecutionOptions(), ConcurrentOptions(), path)


def test_sequential_plan_of_a_branchy_model_clobbers_in_random_trials(tmp_path):
    # four parallel branches with 25-100 KiB tensors: a sequential plan shares bytes between
    # branches, and random schedules run the branches interleaved
    path = MODELS / "inception_block.onnx"
    model = onnx.load(path)
    seq = plan_loaded(model, path, PlanOptions())
    ex = run_concurrent(seq.plan, seq.model, seq.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=10, threads=2))
    assert ex.failures >= 5
    dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))
    ex = run_concurrent(dag.plan, dag.model, dag.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=10, threads=4))
    assert ex.failures == 0
    assert dag.plan.arena_size >= dag.plan.lower_bound > seq.plan.lower_bound


def test_corrupted_dag_plan_is_caught_by_the_proof(tmp_path):

    _, dag = _plan(uneven_diamond(), tmp_path, inplace=False, concurrency="dag")
    b1 = dag.plan.tensor("b1")
    c1 = dag.plan.tensor("c1")
    tensors = tuple(replace(t, offset=b1.offset) if t.name == "c1" else t for t in dag.plan.tensors)
    bad = replace(dag.plan, tensors=tensors)
    found = prove_plan(bad, dag.view)
    assert any(f.kind == "concurrency" and {f.tensor, f.other} == {"b1", "c1"} for f in found)
    assert c1.offset != b1.offset


def two_views() -> onnx.ModelProto:
    """x -> a = Exp(x); b = Identity(a) and c = Identity(a) (a gradient handed to both operands
    of an Add, as onnxruntime's Add_Grad writes it); d = Sin(b), e = Cos(c); f = Add(d, e)."""
    nodes = [
        helper.make_node("Exp", ["x"], ["a"], name="exp"),
        helper.make_node("Identity", ["a"], ["b"], name="id_b"),
        helper.make_node("Identity", ["a"], ["c"], name="id_c"),
        helper.make_node("Sin", ["b"], ["d"], name="sin"),
        helper.make_node("Cos", ["c"], ["e"], name="cos"),
        helper.make_node("Add", ["d", "e"], ["f"], name="add"),
    ]
    return make_model(nodes, [vi("x", SHAPE)], [vi("f", SHAPE)])


def test_two_views_of_one_value_share_its_bytes_under_dag(tmp_path):
    # id_b and id_c are not ordered, but neither changes a byte of a: a, b and c are one
    # buffer; Sin and Cos may not write over it (the other view may still be read).
    # x [0, 1), {a, b, c} [0, 5), d [3, 5), e [4, 5), f [5, 6): 3 buffers live at step 4
    path, dag = _plan(two_views(), tmp_path, concurrency="dag")
    groups = {t.name: t.group for t in dag.plan.tensors}
    assert groups["b"] == groups["c"] == groups["a"] and groups["d"] != groups["a"] != groups["e"]
    assert (dag.plan.lower_bound, dag.plan.arena_size) == (3 * S, 3 * S)
    assert prove_plan(dag.plan, dag.view) == []
    ex = run_concurrent(dag.plan, dag.model, dag.view, model_path=path,
                        concurrent=ConcurrentOptions(trials=10, threads=2))
    assert ex.failures == 0
    # Sin written over a's bytes while Cos may still read c is caught
    a = dag.plan.tensor("a")
    bad = replace(dag.plan, tensors=tuple(replace(t, offset=a.offset) if t.name == "d" else t for t in dag.plan.tensors))
    assert any(f.kind == "concurrency" and {f.tensor, f.other} & {"d"} for f in prove_plan(bad, dag.view))


@pytest.mark.parametrize("path", LIGHT_MODELS[:3] + [MODELS / "control_flow.onnx"], ids=lambda p: p.stem)
def test_real_models_plan_and_prove_under_dag(path):
    model = onnx.load(path)
    dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))
    assert prove_plan(dag.plan, dag.view) == []
    assert dag.plan.lower_bound <= dag.plan.arena_size
    seq = plan_loaded(model, path, PlanOptions())
    assert dag.plan.lower_bound >= seq.plan.lower_bound


def test_unknown_concurrency_is_one_line_error(tmp_path):
    path = _save(uneven_diamond(), tmp_path)
    with pytest.raises(ModelError, match="--concurrency 'threads'"):
        plan_loaded(uneven_diamond(), path, PlanOptions(concurrency="threads"))
    r = CliRunner().invoke(main, ["plan", str(path), "--concurrency", "threads"])
    assert r.exit_code == 2 and "threads" in r.output


def test_cli_plan_verify_and_compare(tmp_path):
    path = _save(uneven_diamond(), tmp_path)
    r = CliRunner().invoke(main, ["plan", str(path), "--inplace", "off", "--order", "file", "--concurrency", "dag",
                                  "-o", str(tmp_path / "dag.json")])
    assert r.exit_code == 0, r.output
    assert "4.00 KiB (4,096 B)" in r.output
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(tmp_path / "dag.json"), "--concurrency", "dag",
                                  "--trials", "5", "--threads", "2"])
    assert r.exit_code == 0, r.output
    assert "5 of 5 equal the reference" in r.output and "ordered by the graph" in r.output
    r = CliRunner().invoke(main, ["compare", str(path), "--inplace", "off", "--execution-mode", "parallel"])
    assert r.exit_code == 0, r.output
    assert "ORT_PARALLEL" in r.output and "--concurrency dag" in r.output


def test_cli_verify_dag_refuses_a_sequential_plan_naming_the_pair(tmp_path):
    path, seq = _plan(uneven_diamond(), tmp_path, inplace=False)
    plan_file = tmp_path / "seq.json"
    write_plan(seq.plan, plan_file)
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan_file)])
    assert r.exit_code == 0, r.output  # fine for its own order
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan_file), "--concurrency", "dag"])
    assert r.exit_code == 3
    assert "the graph does not order them" in r.output and "schedule that breaks the plan" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["randwire", "nasnet", "transformer", "inception_v1", "inception_v2", "densenet121"])
def test_branchy_models_survive_concurrent_trials(kind, tmp_path):
    from onnxmem.model.generate import nasnet, randwire, transformer

    built = {"randwire": lambda: randwire(48, "ws", 2), "nasnet": lambda: nasnet(3, 1),
             "transformer": lambda: transformer(3, 1)}
    if kind in built:
        model = built[kind]()
        model.ir_version = min(model.ir_version, 10)
        path = _save(model, tmp_path)
    else:
        path = next(p for p in LIGHT_MODELS if p.stem == f"light_{kind}")
        model = onnx.load(path)
    dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))
    assert prove_plan(dag.plan, dag.view) == []
    for threads in (2, 4):
        ex = run_concurrent(dag.plan, dag.model, dag.view, model_path=path,
                            concurrent=ConcurrentOptions(trials=20, threads=threads))
        assert ex.failures == 0, ex.findings[0]


def test_too_many_nodes_is_a_one_line_error(tmp_path, monkeypatch):
    from onnxmem.analysis import happens_before as concurrency

    monkeypatch.setattr(concurrency, "MAX_NODES", 3)
    path = _save(uneven_diamond(), tmp_path)
    with pytest.raises(ModelError, match="more than the 3 --concurrency dag orders; plan with --concurrency "
                                         "sequential"):
        plan_loaded(uneven_diamond(), path, PlanOptions(concurrency="dag"))


def test_onnxruntime_parallel_peak_and_bad_mode(tmp_path):
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.runtime.peak import ort_peak

    path, dag = _plan(uneven_diamond(), tmp_path, inplace=False, concurrency="dag")
    peak = ort_peak(dag.model, dag.view, model_path=path, execution_mode="parallel", threads=2)
    assert peak.execution_mode == "parallel" and peak.peak is not None and peak.peak >= 3 * S
    assert peak.threads_seen >= 1
    with pytest.raises(OnnxmemError, match="--execution-mode 'threads' is not one of sequential, parallel"):
        ort_peak(dag.model, dag.view, model_path=path, execution_mode="threads")


def test_dag_plan_of_a_model_with_bodies_is_proven_and_run():
    """If/Loop/Scan bodies run inside their owner's step: the dag plan of a model with a Loop
    holds rule 9 statically and runs once in its order (concurrent trials need no bodies)."""
    path = str(MODELS / "control_flow.onnx")
    out = CliRunner().invoke(main, ["verify", path, "--concurrency", "dag", "--trials", "3"])
    assert out.exit_code == 0, out.output + out.stderr
    assert "every pair sharing bytes ordered by the graph" in out.output
    assert "executed" in out.output and out.output.rstrip().endswith("verified")
    assert "concurrent trials run graphs without If/Loop/Scan bodies" in out.stderr
