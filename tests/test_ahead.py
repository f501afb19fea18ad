"""Work an arena run does on other threads (onnxmem.runtime.ahead): node sessions built on a pool
while the nodes run, under the keys node_session looks them up by, and the ordinary
whole-model run beside the arena run; each gives what the same work on one thread gives."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxmem.core.errors import RuntimeBackendError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime import ahead, sessions
from onnxmem.runtime.ort import load_weights
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import two_convs_model

GREEDY = PlanOptions(solver="greedy", order="file")


@pytest.fixture()
def convs(tmp_path):
    """Three kinds of node (helpers.two_convs_model): the convolutions share one session, as do the Relus."""
    path = tmp_path / "convs.onnx"
    onnx.save(two_convs_model(), path)
    return path, plan_model(path, GREEDY)


def _items(planned):
    view = planned.view
    return [(planned.model.graph.node[op.index], op, {n: view.tensors[n].shape for n in op.reads})
            for op in view.ops]


def _setup():
    return sessions.node_setup(cuda=False)


def _build_all(model, items, view, options, providers, cache, threads=ahead.BUILD_THREADS, alones=None, known=None):
    """Every session ``SessionsAhead`` builds for ``items``, taken into ``cache`` in the order the
    nodes run once all are built; the number taken."""
    building = ahead.SessionsAhead(model, items, view, options, providers, cache, threads, alones, known)
    building.finish()
    return sum(building.take(key, cache) for key in list(building.futures))


@pytest.mark.parametrize("threads", [1, 8])
def test_the_sessions_built_are_those_node_session_finds(convs, threads):
    """Three kinds of node, three sessions built (on one thread or several); each node then finds
    its kind's session and none is built again."""
    _, planned = convs
    options, providers = _setup()
    cache: dict = {}
    assert _build_all(planned.model, _items(planned), planned.view, options, providers, cache,
                                threads=threads) == 3
    built = {id(s) for s in cache.values()}
    found = [sessions.node_session(planned.model, node, op, planned.view, shapes, options, providers, cache=cache)
             for node, op, shapes in _items(planned)]
    assert len(cache) == 3 and {id(s) for s in found} == built
    assert found[0] is found[3] and found[1] is found[4] and found[2] is not found[0]


def test_a_limited_cache_gets_the_first_kinds_only(convs):
    """``RecentSessions(2)``: the sessions of the first two kinds in the order the nodes run."""
    _, planned = convs
    options, providers = _setup()
    cache = sessions.RecentSessions(2)
    assert _build_all(planned.model, _items(planned), planned.view, options, providers, cache,
                                threads=2) == 2
    items = _items(planned)
    for k in (0, 1):
        node, op, shapes = items[k]
        assert sessions.node_alone(planned.model, node, op, planned.view, shapes, share=True).key in cache
    node, op, shapes = items[2]
    assert sessions.node_alone(planned.model, node, op, planned.view, shapes, share=True).key not in cache


def test_a_session_that_fails_to_build_is_left_to_node_session(convs):
    """A standard-domain op onnxruntime has no kernel for (the first Relu renamed): nothing built,
    no error on the pool; node_session then gives its one-line error."""
    _, planned = convs
    node, op, shapes = _items(planned)[1]
    odd = onnx.NodeProto()
    odd.CopyFrom(node)
    odd.op_type = "NoSuchOp"
    options, providers = _setup()
    cache: dict = {}
    assert _build_all(planned.model, [(odd, op, shapes)], planned.view, options, providers, cache) == 0
    assert cache == {}
    with pytest.raises(RuntimeBackendError, match="cannot load node 'r1' \\(Relu\\) alone"):
        sessions.node_session(planned.model, odd, op, planned.view, shapes, options, providers, cache=cache)


def test_each_node_made_ahead_is_not_made_again_when_it_runs(convs, monkeypatch):
    """``SessionsAhead`` hands each node as its session runs it (``Alone``) to ``node_session``,
    which then finds the node's session without making the node again."""
    _, planned = convs
    options, providers = _setup()
    cache: dict = {}
    alones: dict = {}
    items = _items(planned)
    assert _build_all(planned.model, items, planned.view, options, providers, cache, alones=alones) == 3
    assert sorted(alones) == [op.index for _, op, _ in items]
    for node, op, shapes in items:
        assert alones[op.index] == sessions.node_alone(planned.model, node, op, planned.view, shapes, share=True)

    def made_again(*args, **kwargs):
        raise AssertionError("node_alone ran again")

    monkeypatch.setattr(sessions, "node_alone", made_again)
    found = [sessions.node_session(planned.model, node, op, planned.view, shapes, options, providers, cache,
                                   alones[op.index]) for node, op, shapes in items]
    assert {id(s) for s in found} == {id(s) for s in cache.values()}


def test_the_ordinary_run_beside_gives_the_ordinary_run(convs):
    path, planned = convs
    full, _ = load_weights(planned.model, path)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)}
    beside = ahead.ordinary_beside(full, feeds, ["y"], {})
    values, seconds = ahead.ordinary_values(beside, True, lambda: pytest.fail("runs again"))
    now = sessions.run_model(full, feeds, ["y"])
    assert np.array_equal(values["y"], now["y"]) and seconds > 0
    assert ahead.ordinary_values(ahead.ordinary_beside(full, feeds, ["y"], {}), False, dict) == (None, None)
    got, seconds = ahead.ordinary_values(None, True, lambda: now)
    assert got is now and seconds >= 0


def test_an_error_beside_is_raised_where_its_result_is_taken():
    def fails():
        raise RuntimeBackendError("onnxruntime failed to run the model as a whole: no")

    beside = ahead.Beside(fails, "t")
    beside.start()
    with pytest.raises(RuntimeBackendError, match="as a whole: no"):
        beside.result()
    unwanted = ahead.Beside(fails, "t")
    unwanted.start()
    assert ahead.ordinary_values(unwanted, False, dict) == (None, None)  # an op ran as its stand-in


def test_each_node_run_again_gives_the_same_with_work_beside(convs):
    """``reference="nodes"``: the sessions built on threads and the ordinary run beside change
    nothing the run finds or compares; the ordinary run's seconds are those of its own thread."""
    path, planned = convs
    runs = [execute_plan(planned.plan, planned.model, planned.view, model_path=path,
                         options=VerifyOptions(reference="nodes", beside=beside)) for beside in (True, False)]
    for run in runs:
        assert run.findings == () and run.nodes_run == 5 and run.reference == "nodes"
        assert run.reference_seconds is not None and run.reference_seconds > 0
    assert [(c.name, c.identical, c.whole_model_ok, c.whole_model_diff) for c in runs[0].outputs] == \
        [(c.name, c.identical, c.whole_model_ok, c.whole_model_diff) for c in runs[1].outputs]
    assert all(c.ok and c.identical and c.whole_model_ok for c in runs[0].outputs)


def test_a_first_run_ahead_gets_the_known_weights_and_zeros_else(convs, monkeypatch):
    """``warm_feeds``: a weight ``known`` gives as it is, every other input zeros of its shape;
    nothing where the made-up inputs come to more than WARM_BYTES."""
    _, planned = convs
    node, op, shapes = _items(planned)[0]  # c1: Conv(x, w)
    alone = sessions.node_alone(planned.model, node, op, planned.view, shapes, share=True)
    w = np.ones((4, 4, 3, 3), np.float32)
    feeds = ahead.warm_feeds(alone, op, planned.view, shapes, {"w": w}.get)
    names = sessions.value_names(op)
    assert feeds[names["w"]] is w
    x = feeds[names["x"]]
    assert x.shape == (1, 4, 16, 16) and x.dtype == np.float32 and not x.any()
    monkeypatch.setattr(ahead, "WARM_BYTES", 4 * 16 * 16 * 4 - 1)  # one byte short of x's
    assert ahead.warm_feeds(alone, op, planned.view, shapes, {}.get) is None


def _counted_runs(monkeypatch):
    """``(ran, run)``: each ``InferenceSession.run`` from now on adds its session's id to ``ran``;
    ``run`` is onnxruntime's own."""
    import onnxruntime as ort

    ran: list[int] = []
    real = ort.InferenceSession.run

    def counted(self, *args, **kwargs):
        ran.append(id(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "run", counted)
    return ran, real


def test_sessions_built_ahead_run_once_and_then_give_what_a_fresh_session_gives(convs, monkeypatch):
    """With ``known``, each session built runs once on the pool (three kinds of node, three runs);
    a node then run in a session so used computes bit for bit what a session built for it alone
    computes. Without it, or with WARM_UP off, no session runs."""

    _, planned = convs
    options, providers = _setup()
    ran, real = _counted_runs(monkeypatch)
    items = _items(planned)
    for known, warm, runs in ((None, True, 0), ({}.get, False, 0), ({}.get, True, 3)):
        monkeypatch.setattr(ahead, "WARM_UP", warm)
        ran.clear()
        cache: dict = {}
        assert _build_all(planned.model, items, planned.view, options, providers, cache, known=known) == 3
        assert len(ran) == runs and set(ran) <= {id(s) for s in cache.values()}
    node, op, shapes = items[0]
    names = sessions.value_names(op)
    x = np.random.default_rng(3).standard_normal((1, 4, 16, 16)).astype(np.float32)
    w = onnx.numpy_helper.to_array(planned.model.graph.initializer[0])
    feeds = {names["x"]: x, names["w"]: w}
    used = sessions.node_session(planned.model, node, op, planned.view, shapes, options, providers, cache=cache)
    fresh = sessions.node_session(planned.model, node, op, planned.view, shapes, options, providers)
    assert used is not fresh
    assert np.array_equal(real(used, None, feeds)[0], real(fresh, None, feeds)[0])


def test_a_first_run_ahead_that_fails_still_gives_the_session(tmp_path):
    """A first run ahead on made-up values may fail (here ``known`` gives a Reshape a target of
    25 elements for 12): the session is kept all the same, and runs the node's own values."""
    from onnx import helper

    from .helpers import make_model, vi

    target = onnx.numpy_helper.from_array(np.array([3, 4], np.int64), "target")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape")]
    path = tmp_path / "reshape.onnx"
    onnx.save(make_model(nodes, [vi("x", [2, 6])], [vi("y", [3, 4])], [target]), path)
    planned = plan_model(path, GREEDY)
    options, providers = _setup()
    items = [it for it in _items(planned) if it[1].op_type == "Reshape"]
    cache: dict = {}
    bad = {"target": np.array([5, 5], np.int64)}.get
    assert _build_all(planned.model, items, planned.view, options, providers, cache, known=bad) == 1
    node, op, shapes = items[0]
    names = sessions.value_names(op)
    (sess,) = cache.values()
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (y,) = sess.run(None, {names["r"]: x, names["target"]: np.array([3, 4], np.int64)})
    assert np.array_equal(y, x.reshape(3, 4))


def _long_loop() -> onnx.ModelProto:
    """x -> Loop of 10^12 iterations (an Identity carried) -> y: a run that never ends in time."""
    from onnx import helper

    from .helpers import make_model, vi

    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "body", [vi("i", [], onnx.TensorProto.INT64), vi("c_in", [], onnx.TensorProto.BOOL), vi("v_in", [1, 4])],
        [vi("c_out", [], onnx.TensorProto.BOOL), vi("v_out", [1, 4])])
    loop = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)
    return make_model([loop], [vi("x", [1, 4])], [vi("y", [1, 4])],
                      [helper.make_tensor("M", onnx.TensorProto.INT64, [], [10**12])])


@pytest.mark.parametrize("first", [False, True])
def test_a_run_beside_whose_values_are_not_wanted_is_stopped(first):
    """``Beside.cancel`` ends the onnxruntime run in progress on that thread (a Loop of 10^12
    iterations, which the time limit alone would stop only after 600 s), or, cancelled before it
    starts, the run it starts; its error says it was stopped and ``join`` raises nothing."""
    import time

    from onnxmem.runtime.isolation import thread_token

    feeds = {"x": np.ones((1, 4), np.float32)}
    beside = ahead.Beside(lambda: sessions.run_model(_long_loop(), feeds, ["y"]), "long")
    if first:
        beside.cancel()
    beside.start()
    time.sleep(0.5)
    beside.cancel()
    beside.join(60)
    assert not beside.is_alive()
    assert isinstance(beside.error, RuntimeBackendError), beside.error
    assert str(beside.error) == "the run of the model as a whole was stopped: its values were no longer wanted"
    assert thread_token() is None  # this thread's runs are stopped by nothing


def _held(monkeypatch, op_type: str, release) -> None:
    """onnxruntime's sessions, the one of a model with ``op_type`` built only once ``release`` is set."""
    import onnxruntime as ort

    real = ort.InferenceSession

    def held(data, sess_options=None, providers=None):
        if op_type.encode() in data:
            assert release.wait(30)
        return real(data, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", held)


def test_a_node_waits_for_its_own_session_not_for_those_built_after_it(convs, monkeypatch):
    """The sessions of the Conv and the Relu are taken while the MaxPool's is still being built:
    a node waits for its own session only, and the later one comes when it is built."""
    import threading

    release = threading.Event()
    _held(monkeypatch, "MaxPool", release)
    _, planned = convs
    options, providers = _setup()
    cache: dict = {}
    building = ahead.SessionsAhead(planned.model, _items(planned), planned.view, options, providers, cache)
    keys = list(building.futures)
    try:
        assert len(keys) == 3 and building.take(keys[0], cache) and building.take(keys[1], cache)
        assert len(cache) == 2 and not building.futures[keys[2]].done()
    finally:
        release.set()
    assert building.take(keys[2], cache) and len(cache) == 3
    assert not building.take(keys[0], cache)  # taken once: the cache has it from then on
    building.close()


def test_closing_starts_no_more_builds_and_leaves_the_rest_to_node_session(convs, monkeypatch):
    """One thread, its first build held: ``close`` waits for that one and starts no other; the
    nodes whose sessions were not built get theirs from ``node_session``, the same kind of session."""
    import threading

    release = threading.Event()
    _held(monkeypatch, "Conv", release)
    _, planned = convs
    options, providers = _setup()
    cache: dict = {}
    building = ahead.SessionsAhead(planned.model, _items(planned), planned.view, options, providers, cache, threads=1)
    threading.Timer(0.3, release.set).start()
    building.close()
    assert [building.take(key, cache) for key in list(building.futures)] == [True, False, False]
    found = [sessions.node_session(planned.model, node, op, planned.view, shapes, options, providers, cache)
             for node, op, shapes in _items(planned)]
    assert len(cache) == 3 and found[0] is found[3] and found[1] is found[4]


def test_a_first_run_ahead_takes_its_turn_with_the_node_runs(convs, monkeypatch):
    """While the caller holds ``runs`` (a node of its run running), the sessions are built but none
    runs its first run, so none is handed over; once it lets go, each runs once and comes."""
    import threading
    import time

    ran, _ = _counted_runs(monkeypatch)
    release = threading.Event()
    _held(monkeypatch, "", release)  # every build waits until the test holds the lock
    _, planned = convs
    options, providers = _setup()
    cache: dict = {}
    building = ahead.SessionsAhead(planned.model, _items(planned), planned.view, options, providers, cache,
                                   known={}.get)
    with building.runs:
        release.set()
        time.sleep(0.5)
        assert ran == [] and not any(f.done() for f in building.futures.values())
    building.finish()
    assert sum(building.take(key, cache) for key in list(building.futures)) == 3 and len(ran) == 3


def test_the_node_runs_of_a_run_take_turns_with_the_first_runs_ahead(convs, monkeypatch):
    """``reference="nodes"`` with work beside: each node run, in the arena and outside it, holds the
    lock of the sessions built ahead (``SessionsAhead.runs``), and the run finds what it finds alone."""
    import onnxruntime as ort

    path, planned = convs
    made: list = []
    real_init, real_run = ahead.SessionsAhead.__init__, ort.InferenceSession.run_with_iobinding
    held: list[bool] = []

    def init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    def run(self, binding, *args, **kwargs):
        held.append(bool(made) and made[0].runs.locked())
        return real_run(self, binding, *args, **kwargs)

    monkeypatch.setattr(ahead.SessionsAhead, "__init__", init)
    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", run)
    got = execute_plan(planned.plan, planned.model, planned.view, model_path=path,
                       options=VerifyOptions(reference="nodes", beside=True))
    assert got.findings == () and got.nodes_run == 5 and len(made) == 1
    assert len(held) == 10 and all(held)  # five nodes, each run twice
