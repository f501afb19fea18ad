"""Adversarial checks of --concurrency dag: graphs where the rule is subtle, checked against
every state a concurrent schedule can reach; hand-corrupted plans; the trials' bounds; the flags."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.proof.plan import prove_plan
from onnxmem.runtime.arena import ExecutionOptions
from onnxmem.runtime.concurrent import ConcurrentOptions, ConcurrentRun

from .helpers import make_model, vi
from .test_hostile import assert_refused_subprocess

SHAPE = [1, 256]
ROOT = Path(__file__).resolve().parent.parent


def _save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def multi_reader() -> onnx.ModelProto:
    """``a`` is read by three branches of different depths, one of them reading it last."""
    n = helper.make_node
    nodes = [n("Exp", ["x"], ["a"], name="exp"),
             n("Neg", ["a"], ["b1"], name="neg"), n("Sin", ["b1"], ["b2"], name="sin"),
             n("Add", ["b2", "a"], ["b3"], name="addb"),
             n("Cos", ["a"], ["c1"], name="cos"),
             n("Tanh", ["x"], ["e1"], name="tanh"), n("Mul", ["e1", "a"], ["e2"], name="mul"),
             n("Sum", ["b3", "c1", "e2"], ["y"], name="sum")]
    return make_model(nodes, [vi("x", SHAPE)], [vi("y", SHAPE)])


# ---------------------------------------------------------------- every schedule, by brute force

VIEWS = {"Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze"}


class Schedules:
    """Every state a concurrent run of ``model``'s top-level nodes can reach (each node not started,
    running or done; a node starts once every node it reads from is done; a body's reads count
    as its owner's), worked out from the ONNX file alone, not from onnxmem's view."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.nodes = list(g.node)
        self.prod = {o: i for i, nd in enumerate(self.nodes) for o in nd.output if o}
        reads = [list(dict.fromkeys([x for x in nd.input if x] + _body_reads(nd))) for nd in self.nodes]
        self.preds = [{self.prod[x] for x in r if x in self.prod} for r in reads]
        self.readers: dict[str, list[int]] = {}
        for i, r in enumerate(reads):
            for x in r:
                self.readers.setdefault(x, []).append(i)
        self.outputs = {o.name for o in g.output}

    def states(self, samples: int = 0, seed: int = 0):
        n = len(self.nodes)
        if samples:  # random walks, for graphs too wide to enumerate
            rng = random.Random(seed)
            for _ in range(samples):
                st = [0] * n
                while True:
                    yield tuple(st)
                    moves = [(i, 1) for i in range(n) if st[i] == 0 and all(st[p] == 2 for p in self.preds[i])]
                    moves += [(i, 2) for i in range(n) if st[i] == 1]
                    if not moves:
                        break
                    i, v = rng.choice(moves)
                    st[i] = v
            return
        seen: set[tuple[int, ...]] = set()
        stack = [(0,) * n]
        while stack:
            st = stack.pop()
            if st in seen:
                continue
            seen.add(st)
            yield st
            for i in range(n):
                if st[i] == 0 and all(st[p] == 2 for p in self.preds[i]):
                    stack.append(st[:i] + (1,) + st[i + 1:])
                elif st[i] == 1:
                    stack.append(st[:i] + (2,) + st[i + 1:])

    def broken(self, plan, samples: int = 0) -> set[tuple[str, str]]:
        """Pairs of the plan's top-level tensors that share bytes and clash in some reachable state:
        two groups both live; or, in one group, a writer running over a member another node still
        needs (unless it leaves those bytes as they are: a view of it, a Concat of it)."""
        ts = {t.name: t for t in plan.tensors if t.size > 0 and t.graph == ""}
        pairs = [(a, b) for a, b in itertools.combinations(ts.values(), 2)
                 if a.offset < b.offset + b.size and b.offset < a.offset + a.size]
        prod, readers, outputs = self.prod, self.readers, self.outputs

        def started(x, st):
            return x not in prod or st[prod[x]] >= 1

        def live(x, st):
            return started(x, st) and (x in outputs or (x in prod and st[prod[x]] == 1)
                                       or any(st[r] < 2 for r in readers.get(x, ())))

        def keeps(w, t, u):
            nd = self.nodes[w]
            lo, hi = max(t.offset, u.offset), min(t.offset + t.size, u.offset + u.size)
            ins = [ts.get(v) for v in nd.input[:1 if nd.op_type in VIEWS else None]]
            if nd.op_type in VIEWS:
                return ins[0] is not None and ins[0].group == t.group and ins[0].offset == t.offset
            return nd.op_type == "Concat" and any(v is not None and v.group == t.group and v.offset <= lo
                                                  and hi <= v.offset + v.size for v in ins)

        bad: set[tuple[str, str]] = set()
        for st in self.states(samples):
            for a, b in pairs:
                if (a.name, b.name) in bad:
                    continue
                if a.group != b.group:
                    clash = live(a.name, st) and live(b.name, st)
                else:
                    clash = False
                    for t, u in ((a, b), (b, a)):
                        w = prod.get(t.name)
                        if w is None or st[w] != 1 or prod.get(u.name) == w or keeps(w, t, u):
                            continue
                        other = prod.get(u.name) is not None and st[prod[u.name]] == 1
                        needed = u.name in outputs or any(st[r] < 2 for r in readers.get(u.name, ()) if r != w)
                        clash = clash or other or (started(u.name, st) and needed)
                if clash:
                    bad.add((a.name, b.name))
        return bad


def _body_reads(node: onnx.NodeProto) -> list[str]:
    """Values of the enclosing graph that ``node``'s bodies read."""
    out: list[str] = []
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            inner = {i.name for i in sub.input} | {i.name for i in sub.initializer}
            for nd in sub.node:
                out += [x for x in list(nd.input) + _body_reads(nd) if x and x not in inner]
                inner |= set(nd.output)
            out += [o.name for o in sub.output if o.name not in inner]
    return out


def _n(op: str, ins: list[str], outs: list[str], **kw) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=outs[0] + "_" + op.lower(), **kw)


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def subtle_graphs() -> dict[str, onnx.ModelProto]:
    """Graphs where the rule is subtle (each [1, 256] float unless said)."""
    x, y = [vi("x", SHAPE)], [vi("y", SHAPE)]
    then_g = helper.make_graph([_n("Sin", ["b"], ["t"])], "then", [], [vi("t", SHAPE)])
    else_g = helper.make_graph([_n("Cos", ["c"], ["e"])], "else", [], [vi("e", SHAPE)])
    body = helper.make_graph([_n("Identity", ["cin"], ["cout"]), _n("Add", ["v", "b"], ["vo"])], "body",
                             [vi("i", [], onnx.TensorProto.INT64), vi("cin", [], onnx.TensorProto.BOOL), vi("v", SHAPE)],
                             [vi("cout", [], onnx.TensorProto.BOOL), vi("vo", SHAPE)])
    ones = numpy_helper.from_array(np.ones(SHAPE, np.float32))
    return {
        "multi reader": multi_reader(),
        "in-place chain read in parallel": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Relu", ["a"], ["r1"]), _n("Sigmoid", ["r1"], ["r2"]), _n("Relu", ["r2"], ["r3"]),
             _n("Neg", ["r1"], ["n1"]), _n("Cos", ["n1"], ["n2"]), _n("Sin", ["a"], ["s1"]),
             _n("Sum", ["r3", "n2", "s1"], ["y"])], x, y),
        "views read in parallel": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Reshape", ["a", "col"], ["v1"]), _n("Reshape", ["v1", "row"], ["v2"]),
             _n("Relu", ["v2"], ["r"]), _n("Neg", ["v1"], ["n1"]), _n("Reshape", ["n1", "row"], ["n2"]),
             _n("Sin", ["a"], ["s1"]), _n("Sum", ["r", "n2", "s1"], ["y"])], x, y,
            [_ints("col", [256, 1]), _ints("row", [1, 256])]),
        "Concat inputs of parallel branches, one read after": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["b"]), _n("Sin", ["b"], ["b2"]), _n("Cos", ["a"], ["c"]),
             _n("Tanh", ["x"], ["d"]), _n("Concat", ["b2", "c", "d"], ["cat"], axis=1), _n("Relu", ["c"], ["c2"]),
             _n("Sigmoid", ["cat"], ["cs"]), _n("ReduceSum", ["cs"], ["rs"], keepdims=1), _n("Add", ["rs", "c2"], ["y"])],
            x, y),
        "graph inputs read late": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["b"]), _n("Sin", ["b"], ["c"]), _n("Cos", ["c"], ["d"]),
             _n("Add", ["d", "x"], ["y1"]), _n("Tanh", ["z"], ["z1"]), _n("Add", ["y1", "z1"], ["y2"]),
             _n("Mul", ["y2", "z"], ["y"])], [*x, vi("z", SHAPE)], y),
        "a graph output read inside": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["o1"]), _n("Sin", ["o1"], ["b"]), _n("Cos", ["a"], ["c"]),
             _n("Relu", ["c"], ["c2"]), _n("Add", ["b", "c2"], ["y"])], x, [*y, vi("o1", SHAPE)]),
        "If branches capture values of parallel branches": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["b"]), _n("Tanh", ["a"], ["c"]), _n("Relu", ["x"], ["d"]),
             _n("Sigmoid", ["d"], ["d2"]), _n("ReduceSum", ["d2"], ["ds"], keepdims=0),
             _n("Greater", ["ds", "zero"], ["cond"]),
             _n("If", ["cond"], ["f"], then_branch=then_g, else_branch=else_g), _n("Add", ["f", "d2"], ["y"])],
            x, y, [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]),
        "a Loop body captures a value": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["b"]), _n("Cos", ["a"], ["c"]), _n("Sin", ["c"], ["c2"]),
             _n("Loop", ["trip", "go", "c2"], ["lo"], body=body), _n("Add", ["lo", "a"], ["y"])], x, y,
            [numpy_helper.from_array(np.array(3, np.int64), "trip"),
             numpy_helper.from_array(np.array(True), "go")]),
        "nodes with no inputs": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Neg", ["a"], ["b"]), _n("Sin", ["b"], ["c"]),
             _n("RandomNormal", [], ["r"], shape=SHAPE, seed=1.0), _n("Constant", [], ["k"], value=ones),
             _n("Add", ["c", "r"], ["d"]), _n("Mul", ["d", "k"], ["y"])], x, y),
        "two outputs, one unused": make_model(
            [_n("Exp", ["x"], ["a"]), _n("Split", ["a", "halves"], ["s1", "s2"], axis=1),
             _n("TopK", ["a", "k"], ["tv", "ti"], axis=1), _n("Neg", ["s1"], ["n"]), _n("Sin", ["tv"], ["t2"]),
             _n("Concat", ["n", "t2"], ["y0"], axis=1), _n("Cos", ["y0"], ["y"])], x, y,
            [_ints("halves", [128, 128]), _ints("k", [128])]),
        "a weight read by parallel branches": make_model(
            [_n("MatMul", ["x", "W"], ["a"]), _n("MatMul", ["a", "W"], ["b"]), _n("Relu", ["b"], ["b2"]),
             _n("MatMul", ["x", "W"], ["c"]), _n("Add", ["b2", "c"], ["y"])], x, y,
            [numpy_helper.from_array(np.ones([256, 256], np.float32), "W")]),
    }


def random_graph(seed: int) -> onnx.ModelProto:
    """A small random DAG of unary, in-place, binary, view and Concat nodes; its unread values and
    a random one are graph outputs."""
    rng = random.Random(seed)
    vals, nodes, used = ["x"], [], set()
    for i in range(rng.randint(5, 10)):
        kind, a, b, o = rng.choice("uurbvc"), rng.choice(vals), rng.choice(vals), f"v{i}"
        used.add(a)
        if kind in "ur":
            nodes.append(_n(rng.choice(["Neg", "Sin", "Exp"] if kind == "u" else ["Relu", "Sigmoid"]), [a], [o]))
        elif kind == "b":
            used.add(b)
            nodes.append(_n(rng.choice(["Add", "Mul"]), [a, b], [o]))
        elif kind == "v":
            nodes.append(_n("Reshape", [a, "row"], [o]))
        else:
            used.add(b)
            nodes += [_n("Concat", [a, b], [o + "c"], axis=1), _n("Slice", [o + "c", "st", "en", "ax"], [o])]
        vals.append(o)
    outs = [v for v in vals[1:] if v not in used] + [rng.choice(vals[1:])]
    inits = [_ints("row", [1, 256]), _ints("st", [0]), _ints("en", [256]), _ints("ax", [1])]
    return make_model(nodes, [vi("x", SHAPE)], [vi(o, SHAPE) for o in dict.fromkeys(outs)], inits)


@pytest.mark.parametrize("name", list(subtle_graphs()))
def test_dag_plans_hold_in_every_reachable_state(name, tmp_path):
    """The dag plan of each subtle graph is proven, and no reachable state of any concurrent schedule
    has two tensors that share bytes in a clash; its sequential plan, where the proof names an
    unordered pair, has one (the brute force agrees with the proof)."""
    model = subtle_graphs()[name]
    path = _save(model, tmp_path)
    schedules = Schedules(model)
    for order in ("file", "auto"):
        dag = plan_loaded(model, path, PlanOptions(concurrency="dag", order=order))
        assert prove_plan(dag.plan, dag.view) == []
        assert schedules.broken(dag.plan) == set()
        seq = plan_loaded(model, path, PlanOptions(order=order))
        assert bool(prove_plan(seq.plan, seq.view, concurrency="dag")) == bool(schedules.broken(seq.plan))


def test_dag_plans_of_random_graphs_hold_and_the_proof_agrees_with_brute_force(tmp_path):
    """40 random graphs: every dag plan holds in every reachable state; on their sequential plans the
    proof finds an unordered pair exactly where brute force finds a clash."""
    disagree, clashing = [], 0
    for seed in range(40):
        model = random_graph(seed)
        path = _save(model, tmp_path)
        schedules = Schedules(model)
        dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))
        assert prove_plan(dag.plan, dag.view) == [] and schedules.broken(dag.plan) == set(), seed
        seq = plan_loaded(model, path, PlanOptions(order="file"))
        bad = schedules.broken(seq.plan)
        clashing += bool(bad)
        if bool(prove_plan(seq.plan, seq.view, concurrency="dag")) != bool(bad):
            disagree.append(seed)
    assert disagree == [] and clashing >= 5


def test_a_wide_fan_out_holds_in_sampled_schedules(tmp_path):
    """120 parallel branches (Neg, then an in-place Relu) off one value: every branch may be live at
    once, so the dag arena holds them all (x and y may share), and 10 random walks find no clash."""
    nodes = [_n("Exp", ["x"], ["a"])]
    for i in range(120):
        nodes += [_n("Neg", ["a"], [f"n{i}"]), _n("Relu", [f"n{i}"], [f"r{i}"])]
    nodes.append(_n("Sum", [f"r{i}" for i in range(120)], ["y"]))
    model = make_model(nodes, [vi("x", SHAPE)], [vi("y", SHAPE)])
    dag = plan_loaded(model, _save(model, tmp_path), PlanOptions(concurrency="dag"))
    assert prove_plan(dag.plan, dag.view) == []
    assert dag.plan.arena_size == dag.plan.lower_bound == 121 * 1024
    assert Schedules(model).broken(dag.plan, samples=10) == set()


def test_the_proof_rejects_every_corrupted_dag_plan_brute_force_rejects(tmp_path):
    """Each group of a dag plan moved onto another tensor's bytes (and each lone tensor forged into
    another's group there): wherever the sequential rules still hold, rule 9 rejects the plan exactly
    when some reachable state clashes; a proof that accepts a wrong dag plan fails here."""
    tried = rejected = 0
    for name in ("multi reader", "in-place chain read in parallel", "Concat inputs of parallel branches, one read after",
                 "If branches capture values of parallel branches"):
        model = subtle_graphs()[name]
        dag = plan_loaded(model, _save(model, tmp_path), PlanOptions(concurrency="dag", order="file"))
        plan, schedules = dag.plan, Schedules(model)
        lone = Counter(t.group for t in plan.tensors)
        ts = [t for t in plan.tensors if t.graph == "" and t.size > 0]
        for t, u in itertools.permutations(ts, 2):
            moved = tuple(replace(x, offset=x.offset + u.offset - t.offset) if x.group == t.group and x.graph == ""
                          else x for x in plan.tensors)
            forged = tuple(replace(x, offset=u.offset, group=u.group, group_offset=u.group_offset) if x is t else x
                           for x in plan.tensors)
            for tensors in (moved, forged if lone[t.group] == 1 and u.size == t.size else None):
                if tensors is None or u.offset == t.offset or max(x.offset + x.size for x in tensors) > plan.arena_size:
                    continue
                wrong = replace(plan, tensors=tensors)
                if prove_plan(wrong, dag.view, concurrency="sequential"):
                    continue  # the sequential rules catch it already
                tried += 1
                found = bool(prove_plan(wrong, dag.view))
                assert found == bool(schedules.broken(wrong)), (name, t.name, u.name)
                rejected += found
    assert tried >= 50 and 0 < rejected < tried  # wrong plans and plans a move leaves right


def test_rule_9_of_a_model_past_the_dag_limit_is_one_finding(tmp_path):
    """A plan file that records --concurrency dag for a model of more nodes than dag plans for: rule 9
    is one finding at once (it compared every pair sharing bytes, quadratic in a chain's nodes: a
    40,000-node chain ran for minutes), and verify says it in one line."""
    nodes = [helper.make_node("Neg" if i % 2 else "Sin", [f"v{i}" if i else "x"], [f"v{i + 1}"], name=f"n{i}")
             for i in range(10_001)]
    model = make_model(nodes, [vi("x", [1, 16])], [vi("v10001", [1, 16])])
    path = _save(model, tmp_path)
    seq = plan_loaded(model, path, PlanOptions(order="file"))
    claimed = replace(seq.plan, extra={**seq.plan.extra, "concurrency": "dag"})
    found = prove_plan(claimed, seq.view)
    assert len(found) == 1 and found[0].message == (
        "the plan records --concurrency dag, which holds for models of at most 10,000 nodes, and this one has "
        "10,001: rule 9 cannot be checked; re-plan with --concurrency sequential")
    assert prove_plan(seq.plan, seq.view) == []


# ---------------------------------------------------------------- the trials' bounds


def test_concurrent_trials_stop_at_the_time_limit(tmp_path):
    """--trials has no upper bound of its own: --time-limit bounds the reference and the trials as
    one run, which stops in one line naming it and the flag (it ran on, unannounced, before)."""
    model = _save(multi_reader(), tmp_path)
    assert_refused_subprocess(["verify", model, "--concurrency", "dag", "--trials", str(10**9),
                               "--time-limit", "1"], tmp_path,
                              "the concurrent trials (1,000,000,000 of them, up to 2 nodes at once) did not "
                              "finish in 1 s and was stopped; raise --time-limit")


def test_trials_follow_the_seed_at_every_thread_count():
    """The node whose end is awaited next is the seed's pick, so a trial starts its nodes in the
    seed's order at 4 threads too (it was whichever kernel ended first); the orders are not the
    plan's, and another seed gives others."""
    path = ROOT / "models" / "inception_block.onnx"
    model = onnx.load(path)
    dag = plan_loaded(model, path, PlanOptions(concurrency="dag"))

    def orders(seed: int) -> list[tuple[str, ...]]:
        run = ConcurrentRun(dag.plan, model, dag.view, ExecutionOptions(seed=seed),
                            ConcurrentOptions(trials=6, threads=4), path)
        cx = run.run_trials()
        assert cx.failures == 0 and max(t.most_at_once for t in cx.trials) == 4
        return [t.started for t in cx.trials]

    first = orders(0)
    assert orders(0) == first and orders(0) == first
    assert len(set(first)) == 6 and tuple(dag.plan.order) not in first
    assert orders(1) != first


def random_draws() -> onnx.ModelProto:
    """Nodes that draw random numbers beside a chain: an unseeded RandomNormal (no inputs: it may run
    at any time), a seeded RandomUniformLike and a Dropout in training mode."""
    n = helper.make_node
    nodes = [n("Exp", ["x"], ["a"], name="exp"), n("Neg", ["a"], ["b"], name="neg"),
             n("RandomNormal", [], ["r"], shape=SHAPE, name="normal"),
             n("RandomUniformLike", ["a"], ["u"], seed=3.0, name="uniform"),
             n("Dropout", ["b", "ratio", "train"], ["d", "mask"], name="dropout"),
             n("Sum", ["d", "r", "u"], ["y"], name="sum")]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    return make_model(nodes, [vi("x", SHAPE)], [vi("y", SHAPE)], inits)


def test_trials_of_a_graph_with_random_draws_equal_the_reference(tmp_path):
    """A kernel run once draws other numbers: each trial runs a fresh one of every node that draws,
    as the reference did (the trials reused the reference's kernels, and every correct plan of
    such a graph was reported wrong)."""
    model = _save(random_draws(), tmp_path)
    r = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "4", "--threads", "3"])
    assert r.exit_code == 0, r.output
    assert "trials    4 of 4 equal the reference" in r.stdout
    # a wrong plan of the same graph is still caught by the trials: the sequential plan, its
    # unordered pairs sharing bytes, run in the schedule the proof names
    seq = plan_loaded(random_draws(), model, PlanOptions(order="file"))
    found = prove_plan(seq.plan, seq.view, concurrency="dag")
    assert found and found[0].kind == "concurrency"
    run = ConcurrentRun(seq.plan, random_draws(), seq.view, ExecutionOptions(),
                        ConcurrentOptions(trials=1, threads=1, schedule=found[0].schedule), model)
    assert run.run_trials().failures == 1


def test_a_training_graph_runs_once_in_its_order_under_dag(tmp_path):
    """A training step's labels, seeded dropout and stand-in kernels are the sequential run's: under
    --concurrency dag verify runs it as without the flag (here: one line, no training kernels in
    this onnxruntime), and the trials refuse it in one line."""
    model = ROOT / "models" / "training" / "mlp.train.onnx"
    seq = CliRunner().invoke(main, ["verify", str(model)])
    dag = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "2"])
    assert dag.exit_code == seq.exit_code
    assert dag.output.splitlines()[-1] == seq.output.splitlines()[-1]  # an error, or 'verified'
    loaded = onnx.load(model)
    res = plan_loaded(loaded, model, PlanOptions(concurrency="dag"))
    with pytest.raises(OnnxmemError, match="concurrent trials do not run a training graph"):
        ConcurrentRun(res.plan, loaded, res.view, ExecutionOptions(), ConcurrentOptions(), model)


def test_a_training_step_with_dropout_verifies_under_dag():
    """With the training runtime: a dag plan of a training graph with Dropout is verified by one run
    in its order (the trials reran Dropout's kernel, drew another mask and called the plan wrong)."""
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    r = CliRunner().invoke(main, ["verify", str(ROOT / "models" / "training" / "mlp_dropout.train.onnx"),
                                  "--concurrency", "dag", "--trials", "3"])
    assert r.exit_code == 0, r.output
    assert "this is a training graph, so the plan ran once in its own order" in r.output
    assert "every pair sharing bytes ordered by the graph" in r.stdout and r.stdout.endswith("verified\n")


# ---------------------------------------------------------------- the flags


def _usage_error(args: list[str]) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    return r.stderr.splitlines()[-1]


def test_trial_flags_without_dag_trials_are_refused(tmp_path):
    """--trials and --threads set the dag trials: given without --concurrency dag (or with --static-only,
    or beside several models) they did nothing, silently; now one line names them and the fix."""
    model = _save(multi_reader(), tmp_path)
    line = _usage_error(["verify", model, "--trials", "50", "--threads", "8"])
    assert line == ("Error: --trials and --threads set the concurrent trials of --concurrency dag; add "
                    "--concurrency dag (or leave out --trials and --threads)")
    line = _usage_error(["verify", model, "--concurrency", "dag", "--static-only", "--threads", "4"])
    assert line == "Error: --static-only runs nothing; leave out --threads (or --static-only)"
    line = _usage_error(["verify", model, model, "--pipeline", "--trials", "3"])
    assert "--trials works on one model" in line
    line = _usage_error(["compare", model, "--threads", "4"])
    assert line.startswith("Error: --threads sets onnxruntime's inter-op threads of --execution-mode parallel; "
                           "add --execution-mode parallel")
    r = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "3", "--threads", "3"])
    assert r.exit_code == 0 and "trials    3 of 3 equal the reference" in r.stdout, r.output


def test_a_dag_plan_verified_without_the_flag_says_rule_9_held(tmp_path):
    """A plan that records --concurrency dag is held to rule 9 by every verify; the static line says
    so (it listed the sequential rules only), and the run is one run in its order."""
    model = _save(multi_reader(), tmp_path)
    plan = tmp_path / "dag.json"
    assert CliRunner().invoke(main, ["plan", str(model), "--concurrency", "dag", "-o", str(plan)]).exit_code == 0
    r = CliRunner().invoke(main, ["verify", str(model), "--plan", str(plan)])
    assert r.exit_code == 0, r.output
    assert "no live overlap, every pair sharing bytes ordered by the graph" in r.stdout
    assert "trials" not in r.stdout and "executed  8 nodes in one cpu arena" in r.stdout


def test_compare_parallel_keeps_an_explicit_sequential_plan(tmp_path):
    """compare --execution-mode parallel plans with --concurrency dag unless --concurrency says otherwise:
    an explicit sequential plan is made and warned about (it was made dag, the flag ignored)."""
    model = _save(multi_reader(), tmp_path)
    r = CliRunner().invoke(main, ["compare", str(model), "--execution-mode", "parallel", "--concurrency",
                                  "sequential"])
    assert r.exit_code == 0, r.output
    assert "[--concurrency sequential]" in r.stdout
    assert "warning: the plan holds for its own order only" in r.output
