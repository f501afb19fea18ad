"""The whole-model reference beside the arena run: it runs on a thread of its own while the
nodes run in the arena ahead of it, and the run gives what the step-by-step run gives: the same
findings for a corrupted plan, the same notes and findings where a planned shape does not hold."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import make_model, vi

GREEDY = PlanOptions(solver="greedy", order="file")


@pytest.fixture()
def chain(tmp_path):
    """x -> a=Relu(x) -> t=Transpose(a) -> s=Sigmoid(t) -> m=MatMul(s, W) -> y=Add(m, s)."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32), "W")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
             helper.make_node("MatMul", ["s", "W"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "s"], ["y"], name="add")]
    path = tmp_path / "chain.onnx"
    onnx.save(make_model(nodes, [vi("x", [4, 8])], [vi("y", [8, 4])], [w]), path)
    return path, plan_model(path, GREEDY)


def _both(path, plan, view, model):
    """The run with the reference beside it (the same as the run after it), and the run where each
    node runs again (no whole reference)."""
    beside = execute_plan(plan, model, view, model_path=path, options=VerifyOptions(beside=True))
    alone = execute_plan(plan, model, view, model_path=path, options=VerifyOptions(beside=False))
    assert beside.findings == alone.findings and beside.notes == alone.notes
    assert [(c.name, c.max_abs_diff, c.identical) for c in beside.outputs] == \
        [(c.name, c.max_abs_diff, c.identical) for c in alone.outputs]
    nodes = execute_plan(plan, model, view, model_path=path, options=VerifyOptions(reference="nodes"))
    assert beside.reference == "whole" and nodes.reference == "nodes"
    return beside, nodes


def test_the_reference_beside_gives_the_bits_of_each_node_again(chain):
    path, p = chain
    beside, nodes = _both(path, p.plan, p.view, p.model)
    assert beside.findings == nodes.findings == () and beside.nodes_run == nodes.nodes_run == 5
    assert beside.reference_seconds > 0 and beside.private_seconds == 0.0
    for a, b in zip(beside.outputs, nodes.outputs):
        assert a.ok and a.identical and b.identical and a.name == b.name


@pytest.mark.parametrize("moved, onto", [("t", "a"), ("s", "a"), ("m", "s"), ("y", "s")])
def test_a_corrupted_plan_gives_the_same_first_finding(chain, moved, onto):
    """A tensor moved onto one another tensor's bytes: the run ahead of the reference stops at the
    same finding, naming the same tensor, node and bytes, as the run of each node again."""
    path, p = chain
    at = p.plan.tensor(onto).offset
    tensors = tuple(dataclasses.replace(t, offset=at) if t.name == moved else t for t in p.plan.tensors)
    bad = dataclasses.replace(p.plan, tensors=tensors)
    beside, nodes = _both(path, bad, p.view, p.model)
    assert beside.findings, f"{moved} onto {onto} was not caught"
    assert beside.findings[0] == nodes.findings[0]
    assert beside.nodes_run == nodes.nodes_run


def _shaped(view, name, shape):
    t = dataclasses.replace(view.tensors[name], shape=tuple(shape))
    return dataclasses.replace(view, tensors={**view.tensors, name: t})


def test_a_planned_shape_of_the_same_bytes_is_a_note_and_the_run_goes_on(chain):
    """The plan holds t at [4, 8] where Transpose computes [8, 4]: the run ahead cannot bind it,
    so the run goes step by step after the reference, which notes the shape and verifies."""
    path, p = chain
    view = _shaped(p.view, "t", [4, 8])
    beside, nodes = _both(path, p.plan, view, p.model)
    assert beside.findings == nodes.findings == ()
    assert beside.notes == nodes.notes and "'t' runs with shape [8, 4]" in beside.notes[0]
    assert all(c.identical for c in beside.outputs)


def test_onnxruntime_refuses_an_output_bound_at_a_shape_the_kernel_does_not_compute(chain):
    """What the run ahead assumes of onnxruntime, where the reference beside it gives no shape
    for a value (``ArenaRun._same_shapes``): Transpose computes t at [8, 4]; its node session, with
    t bound in the arena at [4, 8] (the same bytes), fails rather than write [4, 8]; bound at
    [8, 4], it runs and t holds a's transpose."""
    from onnxmem.runtime.arena import ArenaRun

    path, p = chain
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(), path)
    run.load_inputs()
    ops = {op.name: op for op in p.view.ops}
    relu, transpose = ops["relu"], ops["transpose"]
    run._bind_and_run(relu, run.session(relu, run.nodes[relu.index]), in_arena=True)
    a = np.array(run._read(run.slots["a"])).view(np.float32).reshape(4, 8)
    run.slots["t"] = dataclasses.replace(run.slots["t"], shape=(4, 8))
    with pytest.raises(Exception, match="shape"):
        run._bind_and_run(transpose, run.session(transpose, run.nodes[transpose.index]), in_arena=True)
    run.slots["t"] = dataclasses.replace(run.slots["t"], shape=(8, 4))
    run._bind_and_run(transpose, run.session(transpose, run.nodes[transpose.index]), in_arena=True)
    assert np.array_equal(np.array(run._read(run.slots["t"])).view(np.float32).reshape(8, 4), a.T)


def test_values_only_the_next_node_reads_are_not_copied(chain, monkeypatch):
    """a, t and m are each read by the node after their writer alone: the run ahead copies the
    bytes of s (read two nodes on) and y (an output) only, and verifies. With t moved onto a's
    bytes (written while a is live), the run goes step by step, copying every value, and finds
    what the step-by-step run finds."""
    from onnxmem.runtime.arena import ArenaRun

    path, p = chain
    kept: list[str] = []
    real = ArenaRun._keep
    monkeypatch.setattr(ArenaRun, "_keep", lambda self, slot: kept.append(slot.name) or real(self, slot))
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(beside=True), path)
    ex = run.run()
    assert run.unkept == {"a", "t", "m"} and sorted(kept) == ["s", "y"]
    assert ex.findings == () and ex.nodes_run == 5 and all(c.identical for c in ex.outputs)
    at = p.plan.tensor("a").offset
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == "t" else t
                                                    for t in p.plan.tensors))
    kept.clear()
    run = ArenaRun(bad, p.model, p.view, VerifyOptions(beside=True), path)
    ex = run.run()
    alone = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(beside=False))
    assert run.unkept == frozenset() and "a" in kept
    assert ex.findings and ex.findings == alone.findings and ex.findings[0].tensor == "a"


@pytest.mark.parametrize("reference, beside", [("nodes", True), ("nodes", False), ("whole", False)],
                         ids=["each node again, sessions built beside", "each node again", "pieces as asked for"])
def test_the_step_by_step_run_copies_only_what_a_later_node_reads(chain, monkeypatch, reference, beside):
    """Where the run goes step by step (each node run again as the reference, as on CUDA; or the
    reference's pieces run as step 2 asks for them, where no core is spare), the values read by the
    next node alone (a, t, m) keep no copy either: s and y are copied, and the run verifies with
    the same bits. With t moved onto a's bytes, the write over a (not copied) starts the run again
    with every value copied (the pieces run again), and it finds what a run that copies every value
    from the start finds, at the same node."""
    from onnxmem.runtime.arena import ArenaRun

    path, p = chain
    kept: list[str] = []
    again: list[bool] = []
    real_keep, real_again = ArenaRun._keep, ArenaRun._start_again
    monkeypatch.setattr(ArenaRun, "_keep", lambda self, slot: kept.append(slot.name) or real_keep(self, slot))
    monkeypatch.setattr(ArenaRun, "_start_again", lambda self: again.append(True) or real_again(self))
    opts = VerifyOptions(beside=beside, reference=reference)
    run = ArenaRun(p.plan, p.model, p.view, opts, path)
    ex = run.run()
    assert ex.reference == reference and run.unkept == {"a", "t", "m"} and sorted(kept) == ["s", "y"] and not again
    assert ex.findings == () and ex.nodes_run == 5 and all(c.identical for c in ex.outputs)
    at = p.plan.tensor("a").offset
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == "t" else t
                                                    for t in p.plan.tensors))
    kept.clear()
    run = ArenaRun(bad, p.model, p.view, opts, path)
    ex = run.run()
    assert again == [True] and run.unkept == frozenset() and "a" in kept
    monkeypatch.setattr(ArenaRun, "spare_copies", False)
    every = ArenaRun(bad, p.model, p.view, opts, path)
    ref = every.run()
    assert every.unkept == frozenset() and again == [True]  # copied from the start: no second start
    assert ex.findings and ex.findings == ref.findings and ex.findings[0].tensor == "a"
    assert ex.nodes_run == ref.nodes_run


def test_a_run_that_keeps_going_copies_every_value(chain):
    """``keep_going`` reports every finding in one run: no value goes uncopied, so none starts it again."""
    from onnxmem.runtime.arena import ArenaRun

    path, p = chain
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(reference="nodes", keep_going=True), path)
    ex = run.run()
    assert run.unkept == frozenset() and ex.findings == ()


def test_a_planned_shape_of_other_bytes_is_a_finding(chain):
    """The plan holds t in 64 bytes at [4, 4] where Transpose computes [8, 4] (128 bytes): the
    shape finding of the step-by-step run, naming the node and both shapes."""
    path, p = chain
    view = _shaped(p.view, "t", [4, 4])
    tensors = tuple(dataclasses.replace(t, size=64) if t.name == "t" else t for t in p.plan.tensors)
    bad = dataclasses.replace(p.plan, tensors=tensors)
    beside, nodes = _both(path, bad, view, p.model)
    assert beside.findings == nodes.findings
    (f,) = beside.findings
    assert f.kind == "shape" and f.tensor == "t" and "[8, 4] (128 B)" in f.message and "[4, 4] (64 B)" in f.message
    assert beside.outputs == ()


@pytest.mark.parametrize("pieces", [{}, {"piece_bytes": 1}], ids=["whole", "a piece per node"])
def test_a_model_onnxruntime_cannot_run_is_the_reference_error(tmp_path, pieces):
    """A node whose kernel fails on these values (a Gather of a row past the end: its shape is
    right, its index is not): the one-line error of the step-by-step run, after the reference,
    not the run ahead's; the same when the reference runs in pieces."""
    from onnxmem.core.errors import RuntimeBackendError

    index = onnx.numpy_helper.from_array(np.array([5], np.int64), "index")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Gather", ["a", "index"], ["y"], name="gather", axis=0)]
    path = tmp_path / "bad.onnx"
    onnx.save(make_model(nodes, [vi("x", [2, 4])], [vi("y", [1, 4])], [index]), path)
    p = plan_model(path, GREEDY)
    for beside in (True, False):
        with pytest.raises(RuntimeBackendError, match="onnxruntime failed to run the model as a whole"):
            execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(beside=beside, **pieces))


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1001, 4096, 4097, 40_003])
@pytest.mark.parametrize("memcmp", [True, False])
def test_same_bytes_sees_one_changed_byte_anywhere(n, memcmp, monkeypatch):
    """The clobber checks' comparison (the C library's memcmp, or without it eight bytes at a time,
    then the rest one by one): any one changed bit, at the start, in the middle, in the tail, and
    on a view that starts off eight; and a strided view."""
    from onnxmem.runtime import arena_records
    from onnxmem.runtime.arena_records import same_bytes

    if memcmp:
        assert arena_records._MEMCMP is not None  # loaded on every platform the tests run on
    else:
        monkeypatch.setattr(arena_records, "_MEMCMP", None)
    a = np.random.default_rng(n).integers(0, 256, n + 1, dtype=np.uint8)[1:]  # a view, one byte in
    assert same_bytes(a, a.copy())
    for i in sorted({0, n // 2, n - 1} if n else set()):
        b = a.copy()
        b[i] ^= 0x10
        assert not same_bytes(a, b) and not same_bytes(b, a)
    if n:
        assert not same_bytes(a, a[:-1])
    wide = np.random.default_rng(n).integers(0, 256, 2 * n, dtype=np.uint8)
    strided = wide[::2]  # not one run of memory
    assert same_bytes(strided, strided.copy()) and same_bytes(strided.copy(), strided)
    if n:
        changed = strided.copy()
        changed[n - 1] ^= 1
        assert not same_bytes(strided, changed)


def test_the_child_collects_garbage_as_the_command_does():
    """A command's work in its onnxruntime child runs under the garbage collector's thresholds of
    the command's process (``onnxmem.cli.main.GC_THRESHOLDS`` while a command runs), and the
    child's own are back after it."""
    import gc

    from onnxmem.cli.child import run_in_child
    from onnxmem.runtime.isolation import run_limits

    before = gc.get_threshold()
    try:
        with run_limits():
            gc.set_threshold(12_345, 6, 7)
            assert run_in_child(gc.get_threshold) == (12_345, 6, 7)
            gc.set_threshold(*before)
            assert run_in_child(gc.get_threshold) == before
    finally:
        gc.set_threshold(*before)


def test_the_time_limit_stops_the_run_and_the_reference_beside_it(chain):
    """Past ``--time-limit`` the run beside the reference stops with the one-line error naming both,
    and waits for the reference's thread, which its own limit stops."""
    import threading

    from onnxmem.runtime.isolation import TimeLimitExceeded, run_limits

    path, p = chain
    with run_limits(seconds=1e-6, isolate=False), \
            pytest.raises(TimeLimitExceeded, match="the arena run, and the run of the model as a whole"):
        execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(beside=True))
    assert not [t for t in threading.enumerate() if t.name == "onnxmem-reference"]


def test_a_host_arena_resets_to_the_sentinel():
    from onnxmem.runtime.arena_buffers import SENTINEL, HostArena

    arena = HostArena(64)
    arena.write(8, np.arange(16, dtype=np.uint8))
    assert arena.read(8, 16).tolist() == list(range(16))
    arena.reset()
    assert set(arena.read(0, 64).tolist()) == {SENTINEL}
