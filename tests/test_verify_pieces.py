"""The whole-model reference in pieces: each piece a session of consecutive nodes of the plan's
order, run when the arena run first asks for one of its values; every value has the bits of the
whole model run once, and the run finds what the run of each node again finds."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.arena import ArenaRun
from onnxmem.runtime.sessions import host_array, run_values
from onnxmem.verify.run import VerifyOptions, execute_plan

from .conftest import LIGHT
from .helpers import HANG_S, diamond_model, make_model, vi

GREEDY = PlanOptions(solver="greedy", order="file")


@pytest.fixture()
def diamond(tmp_path):
    """x -> sig=Sigmoid(x) -> tan=Tanh(sig) -> sum=Add(sig, tan) -> y=MatMul(sum, W)."""
    path = tmp_path / "diamond.onnx"
    onnx.save(diamond_model(16, 4), path)
    return path, plan_model(path, GREEDY)


def _reference(path, planned, piece_bytes):
    """The arena run of ``planned`` (inputs loaded), its reference's values and their pieces."""
    run = ArenaRun(planned.plan, planned.model, planned.view, VerifyOptions(piece_bytes=piece_bytes), path)
    run.load_inputs()
    values = run.reference_values()
    assert values is not None
    return run, values, run.reference_pieces(values)


def test_every_value_in_pieces_has_the_bits_of_the_whole_run():
    """squeezenet in pieces of about 256 KiB of values: each value, taken in the plan's order, is
    the whole run's bit for bit; the pieces run one at a time as their values are asked for, and
    once every value is taken nothing is held."""
    path = LIGHT / "light_squeezenet.onnx"
    planned = plan_model(path)
    run, values, pieces = _reference(path, planned, 256 << 10)
    whole = run_values(run.full, run.feeds, values, run.weights)
    assert len(pieces.pieces) > 3
    names = list(values)
    first = pieces.pop(names[0])
    assert pieces.ran == 1 and np.array_equal(host_array(first), host_array(whole[names[0]]))
    for name in names[1:]:
        got = host_array(pieces.pop(name))
        want = host_array(whole[name])
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), name
    assert pieces.ran == len(pieces.pieces) and not pieces.given and not pieces.kept


def test_a_value_read_by_a_later_piece_is_kept_until_that_piece_has_run(diamond):
    """One node a piece: sig, read by tanh and by add, is kept after it is taken until add's piece
    has run (and sum until matmul's); a value taken twice is a KeyError."""
    path, p = diamond
    _, _, pieces = _reference(path, p, 1)
    assert [pc.outputs for pc in pieces.pieces] == [("sig",), ("tan",), ("sum",), ("y",)]
    assert [n for n, _ in pieces.pieces[2].inputs] == ["sig", "tan"]
    assert "sig" in pieces and "y" in pieces
    pieces.pop("sig")
    assert "sig" in pieces.kept and "sig" not in pieces
    pieces.pop("tan")
    assert set(pieces.kept) == {"sig", "tan"}
    pieces.pop("sum")
    assert pieces.ran == 3 and set(pieces.kept) == {"sum"}  # matmul reads it
    with pytest.raises(KeyError):
        pieces.pop("sig")
    assert host_array(pieces.pop("y")).shape == (4, 16) and not pieces.kept and not pieces.given


def test_the_beside_run_keeps_the_outputs_and_the_shapes_of_the_others(diamond):
    """One node a piece: every value is read by a later piece, so each piece gives it; the outputs
    are kept, the shapes alone of the others."""
    path, p = diamond
    _, _, pieces = _reference(path, p, 1)
    cut = pieces.pieces
    pieces.run_all({"y"})
    assert pieces.pieces == cut
    assert set(pieces.given) == {"y"} and pieces.shape("sig") == (4, 16) and not pieces.kept
    again = pieces.again()
    assert again.ran == 0 and again.pieces is cut and "sig" in again


def test_the_beside_run_gives_only_the_outputs_and_the_values_later_pieces_read(diamond):
    """One piece of every node: it gives y alone (onnxruntime reuses the memory of the others), so
    the shapes of the others are unknown; ``again`` (the run step by step) gives every value."""
    path, p = diamond
    _, values, pieces = _reference(path, p, 1 << 30)
    (cut,) = pieces.pieces
    assert cut.outputs == ("sig", "tan", "sum", "y")
    pieces.run_all({"y"})
    assert [pc.outputs for pc in pieces.pieces] == [("y",)] and set(pieces.given) == {"y"}
    assert pieces.shape("y") == (4, 16) and pieces.shape("sig") is None and not pieces.shapes
    again = pieces.again()
    assert again.pieces == (cut,) and [n for n in values if n in again] == list(values)
    assert host_array(again.pop("tan")).shape == (4, 16)


def _runs(path, plan, view, model):
    """The run with the reference in one-node pieces, beside the arena run and before each node,
    and the run where each node runs again; the first two must agree in everything they find."""
    got = [execute_plan(plan, model, view, model_path=path, options=VerifyOptions(beside=beside, piece_bytes=1))
           for beside in (True, False)]
    nodes = execute_plan(plan, model, view, model_path=path, options=VerifyOptions(reference="nodes"))
    for ex in got:
        assert ex.reference == "whole"
        assert ex.findings == got[1].findings and ex.notes == got[1].notes
        assert [(c.name, c.identical) for c in ex.outputs] == [(c.name, c.identical) for c in got[1].outputs]
    return got[1], nodes


def test_the_pieces_verify_a_good_plan(diamond):
    path, p = diamond
    ex, nodes = _runs(path, p.plan, p.view, p.model)
    assert ex.findings == nodes.findings == () and ex.nodes_run == 4 and ex.reference_seconds > 0
    (c,) = ex.outputs
    assert c.ok and c.identical


@pytest.mark.parametrize("moved, onto", [("tan", "sig"), ("sum", "sig"), ("y", "sum")])
def test_a_corrupted_plan_is_caught_the_same_way(diamond, moved, onto):
    """A tensor moved onto another's bytes: the same first finding, tensor, node and bytes, as the
    run of each node again."""
    path, p = diamond
    at = p.plan.tensor(onto).offset
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == moved else t
                                                    for t in p.plan.tensors))
    ex, nodes = _runs(path, bad, p.view, p.model)
    assert ex.findings, f"{moved} onto {onto} was not caught"
    assert ex.findings[0] == nodes.findings[0] and ex.nodes_run == nodes.nodes_run


def test_a_planned_shape_of_the_same_bytes_is_a_note_in_pieces(tmp_path):
    """The plan holds t at [4, 8] where Transpose computes [8, 4]: beside, the run goes step by
    step again with fresh pieces, and notes the shape as the run of each node again does."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Sigmoid", ["t"], ["y"], name="sigmoid")]
    path = tmp_path / "chain.onnx"
    onnx.save(make_model(nodes, [vi("x", [4, 8])], [vi("y", [8, 4])]), path)
    p = plan_model(path, GREEDY)
    view = dataclasses.replace(p.view, tensors={**p.view.tensors,
                                                "t": dataclasses.replace(p.view.tensors["t"], shape=(4, 8))})
    ex, again = _runs(path, p.plan, view, p.model)
    assert ex.findings == again.findings == () and ex.notes == again.notes
    assert "'t' runs with shape [8, 4]" in ex.notes[0]


_PIECES_FAULTS = r'''
import resource, sys
import numpy as np
import onnx
from onnx import helper
from onnxmem.runtime import settings
from onnxmem.runtime.reference import PieceReference

if sys.argv[1] == "own":  # as where onnxruntime cannot register the process's arena
    settings._SHARED_ARENAS["cpu"] = False
n = 10_000_000  # 40 MB a value: above the sizes glibc's malloc serves from its heap
ops = ["Relu", "Neg", "Abs", "Neg", "Abs", "Neg", "Abs", "Neg"]
names = ["x"] + [f"v{k}" for k in range(len(ops))]
nodes = [helper.make_node(op, [a], [b]) for op, a, b in zip(ops, names, names[1:])]
f = lambda name: helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [n])
model = helper.make_model(helper.make_graph(nodes, "chain", [f("x")], [f(names[-1])]),
                          opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 10
values = {v: onnx.TensorProto.FLOAT for v in names[1:]}
ref = PieceReference(model, nodes, values, {"x": np.ones(n, np.float32)}, {}, piece_bytes=1,
                     sizes={v: 4 * n for v in values})
assert len(ref.pieces) == len(ops)
ref.pop(names[1])  # the first piece: the arena, if any, grows here
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for v in names[2:]:
    ref.pop(v)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
'''


def test_reference_pieces_reuse_the_memory_of_the_pieces_before_them(tmp_path):
    """The pieces' sessions draw from one arena for the process (``settings.shared_arena``): a piece's
    values take the memory an earlier piece's values freed, where sessions with arenas of their own
    take fresh pages from the system for every value (faulted in and zeroed: the reference's
    system time on thousands of nodes). Both ways in fresh processes, the minor page faults of
    seven pieces of one 40 MB value each."""
    import os
    import subprocess
    import sys

    script = tmp_path / "pieces.py"
    script.write_text(_PIECES_FAULTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def faults(how: str) -> int:
        out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, env=env,
                             timeout=HANG_S)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    shared, own = faults("shared"), faults("own")
    pages = 7 * 40_000_000 // 4096
    assert own > pages // 2, (own, pages)  # fresh pages for each value
    assert shared < own // 4, (shared, own)


def test_the_process_arena_is_registered_once_and_keeps_its_strategy():
    """The process's CPU arena (``settings.register_env_arena``) is onnxruntime's once registered: the
    pieces' ``shared_arena`` and a measurement asking the same growth share it; a measurement
    asking another growth is refused in one line, not measured with the wrong one."""
    import subprocess
    import sys

    code = ("import onnxruntime as o\n"
            "from onnxmem.runtime import settings as ort\n"
            "from onnxmem.core.errors import RuntimeBackendError\n"
            "so = o.SessionOptions()\n"
            "assert ort.shared_arena(so) and so.get_session_config_entry('session.use_env_allocators') == '1'\n"
            "ort.register_env_arena('cpu', 1)\n"
            "try:\n"
            "    ort.register_env_arena('cpu', 0)\n"
            "except RuntimeBackendError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("this process's onnxruntime cpu arena grows by strategy 1, not 0; "
                                  "measure in a fresh process")
