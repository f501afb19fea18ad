"""Plans executed on a GPU with onnxruntime's CUDA provider (``make test-cuda``).

Every test here is marked ``cuda`` and skips where the CUDA provider cannot run; the
default suite deselects them. Where a GPU exists they check the CUDA path end to end:
control-flow bodies run node by node in one device arena (a Loop whose body holds
an If among them: its reference run once read freed memory on CUDA), a corrupted
plan is caught on the device, and the zoo job and ``compare`` measure on CUDA.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, cuda_available, execute_plan, verify_plan

from .conftest import ROOT
from .helpers import make_model, two_convs_model, vi
from .nested_models import CONTROL_FLOW_MODELS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not cuda_available(), reason="onnxruntime's CUDA provider cannot run here"),
]

CUDA = PlanOptions(alignment=256)
#: inputs that make network_in_if take its network branch
INPUTS = {"network_in_if": {"x": np.ones((8, 64), np.float32), "sr": np.array(16000, np.int64)}}


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW_MODELS))
def test_control_flow_models_verify_on_cuda(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    onnx.save(CONTROL_FLOW_MODELS[name](), path)
    p = plan_model(path, CUDA)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view,
                         options=VerifyOptions(device="cuda", inputs=INPUTS.get(name)))
    assert report.ok, report.first
    run = report.execution
    assert run is not None and run.device == "cuda" and run.nodes_run >= 1
    assert all(c.ok and c.identical for c in run.outputs)


def test_a_body_tensor_moved_over_a_live_one_is_caught_on_cuda(tmp_path):
    path = tmp_path / "loop_carried.onnx"
    onnx.save(CONTROL_FLOW_MODELS["loop_carried"](), path)
    p = plan_model(path, CUDA)
    body = [t for t in p.plan.tensors if t.graph and t.size]
    live = {t.name: (t.start, t.end) for t in body}
    pair = next((a, b) for a in body for b in body
                if a.name < b.name and a.graph == b.graph and a.group != b.group and a.size == b.size
                and live[a.name][0] <= live[b.name][1] and live[b.name][0] <= live[a.name][1]
                and a.offset != b.offset)
    moved = tuple(dataclasses.replace(t, offset=pair[0].offset) if t.name == pair[1].name and t.graph == pair[1].graph
                  else t for t in p.plan.tensors)
    bad = dataclasses.replace(p.plan, tensors=moved)
    ex = execute_plan(bad, p.model, p.view, options=VerifyOptions(device="cuda"), model_path=path)
    assert ex.findings, "a body tensor written over a live one went unnoticed on CUDA"


def test_zoo_job_verifies_on_cuda(tmp_path):
    zoo = tmp_path / "zoo.txt"
    zoo.write_text("onnx:squeezenet\nonnx:resnet50\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["zoo", str(zoo), "--verify", "cuda", "--alignment", "256", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "results.json").read_text())["models"]
    assert len(rows) == 2
    for row in rows:
        assert row["verify"] == "pass" and "on cuda" in row["verify_detail"]
        assert row["ort_peak"] and row["arena_size"] <= row["ort_peak"]


def test_compare_measures_onnxruntime_on_cuda(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Neg", ["a"], ["b"], name="neg"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 1024], TensorProto.FLOAT)], [vi("y", [1, 1024])]), path)
    r = CliRunner().invoke(main, ["compare", str(path), "--device", "cuda", "--alignment", "256"])
    assert r.exit_code == 0, r.output
    # at the Add, a, b and y (4 KiB each) are allocated; the plan holds the same three: Add is
    # not among the kernels onnxruntime declares in place (docs/aliasing.md)
    line = next(ln for ln in r.stdout.splitlines() if "ORT_DISABLE_ALL" in ln)
    assert re.search(r"ORT_DISABLE_ALL: [\d.]+ KiB \(12,288 B\) allocated", line), line
    assert re.search(r"onnxmem arena +12\.00 KiB \(12,288 B\)", r.stdout), r.stdout


def test_a_recomputed_model_matches_its_original_bit_for_bit_on_cuda(tmp_path):
    """``verify --original --device cuda``: the original runs node by node on the GPU as the
    rewrite does (an ordinary CPU run differs from CUDA kernels in the last bits)."""
    from onnxmem.zoo import materialize

    original = materialize(ROOT / "models" / "zoo" / "unet.onnx", tmp_path)
    rewritten = tmp_path / "unet_r.onnx"
    r = CliRunner().invoke(main, ["plan", str(original), "--budget", "0.9x", "--alignment", "256",
                                  "--rewrite-out", str(rewritten), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert "recompute" in r.stdout
    r = CliRunner().invoke(main, ["verify", str(rewritten), "--original", str(original), "--device", "cuda"])
    assert r.exit_code == 0, r.output
    assert "outputs identical, bit for bit" in r.stdout


def test_verify_on_cuda_holds_little_device_memory_beside_its_arena(tmp_path):
    """Each node's session once kept a device arena and handles of its own to the end of the
    run: verifying DenseNet-121 (an 8 MB arena) took 38,881 MiB of an H200. One shared arena and
    at most ``CUDA_SESSIONS`` sessions at once keep the device memory the run takes, read
    every 20 ms while it runs, within 4 GiB."""
    import threading
    from pathlib import Path

    import onnx.backend.test as backend_test

    from onnxmem.runtime.isolation import available_memory
    from onnxmem.zoo import materialize

    light = Path(backend_test.__file__).parent / "data" / "light" / "light_densenet121.onnx"
    model = materialize(light, tmp_path)
    before = available_memory("cuda")
    assert before is not None
    lowest = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            free = available_memory("cuda")
            if free is not None:
                lowest[0] = min(lowest[0], free)
            done.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        r = CliRunner().invoke(main, ["verify", str(model), "--device", "cuda", "--alignment", "256"])
    finally:
        done.set()
        watcher.join()
    assert r.exit_code == 0, r.output
    taken = before - lowest[0]
    print(f"device memory taken by verify: {taken / 2**20:.0f} MiB")
    assert taken < 4 * 2**30, f"verify took {taken / 2**30:.1f} GiB of the GPU"


def test_nodes_alike_of_other_shapes_share_one_cuda_session(tmp_path):
    """On CUDA too a node session declares its inputs by rank: the convolutions over 16x16 and
    8x8 images (the same weights' shape, the same attributes) share one session, as do the
    Relus over [1, 4, 16, 16] and [1, 4, 8, 8]; the plan runs in one device arena with outputs
    identical to the reference's."""
    from onnxmem.runtime.sessions import node_session, node_setup

    path = tmp_path / "shapes.onnx"
    onnx.save(two_convs_model(), path)
    p = plan_model(path, CUDA)
    options, providers = node_setup(cuda=True)
    cache: dict = {}
    made = {op.name: node_session(p.model, p.model.graph.node[op.index], op, p.view, {}, options, providers,
                                  cache=cache) for op in p.view.ops}
    assert made["c1"] is made["c2"] and made["r1"] is made["r2"] and len(cache) == 3
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(device="cuda"))
    assert ex.findings == () and ex.outputs[0].identical


def test_an_uncopied_value_written_over_starts_the_cuda_run_again(tmp_path, monkeypatch):
    """On the device the values the next node alone reads keep no copy on the host: a plan that
    writes over one (y moved onto s's bytes: Add, which onnxruntime does not declare in place,
    over its input) starts the run again with the device arena back to the sentinel and every value copied, and finds what
    a run that copies every value finds."""
    from onnxmem.runtime.arena import ArenaRun
    from onnxmem.runtime.arena_buffers import SENTINEL, CudaArena

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
             helper.make_node("Add", ["s", "s"], ["y"], name="add")]
    path = tmp_path / "chain.onnx"
    onnx.save(make_model(nodes, [vi("x", [64, 128])], [vi("y", [128, 64])]), path)
    p = plan_model(path, PlanOptions(solver="greedy", order="file", alignment=256))
    opts = VerifyOptions(device="cuda")
    run = ArenaRun(p.plan, p.model, p.view, opts, path)
    ex = run.run()
    assert ex.findings == () and run.unkept == {"a", "t", "s"} and all(c.identical for c in ex.outputs)
    at = p.plan.tensor("s").offset
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == "y" else t
                                                    for t in p.plan.tensors))
    held: list[set[int]] = []  # what the device arena holds after each reset
    real = CudaArena.reset

    def reset(self):
        real(self)
        held.append(set(self.read(0, self._n).tolist()))

    monkeypatch.setattr(CudaArena, "reset", reset)
    run = ArenaRun(bad, p.model, p.view, opts, path)
    ex = run.run()
    monkeypatch.setattr(ArenaRun, "spare_copies", False)
    ref = ArenaRun(bad, p.model, p.view, opts, path).run()
    assert held == [{SENTINEL}] and run.unkept == frozenset()  # started again once, the arena reset
    assert ex.findings and ex.findings == ref.findings and (ex.findings[0].tensor, ex.findings[0].other) == ("s", "y")


def test_a_kernel_refusing_its_output_over_a_live_value_is_a_finding(tmp_path):
    """onnxruntime's CUDA Transpose refuses an output bound over its own input (cuBLAS: an
    unsupported value), where its CPU kernel writes over it: either way the plan that puts t on a's
    bytes gets the finding that t's write clobbers a at the Transpose, not an error of the run."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Transpose", ["a"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Sigmoid", ["t"], ["y"], name="sigmoid")]
    path = tmp_path / "transpose.onnx"
    onnx.save(make_model(nodes, [vi("x", [64, 128])], [vi("y", [128, 64])]), path)
    p = plan_model(path, PlanOptions(solver="greedy", order="file", alignment=256))
    at = p.plan.tensor("a").offset
    bad = dataclasses.replace(p.plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == "t" else t
                                                    for t in p.plan.tensors))
    found = {}
    for device in ("cuda", "cpu"):
        ex = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(device=device))
        f = ex.findings[0]
        found[device] = (f.kind, f.tensor, f.node, f.other)
    assert found["cuda"] == found["cpu"] == ("clobber", "a", "transpose", "t")


def test_shape_arithmetic_is_written_on_cuda_as_every_node_run_gives(tmp_path):
    """The nodes of shape arithmetic are written in the device arena from their run together on the
    CPU (onnxmem.runtime.handover): the graph outputs are bit for bit those of the run where every
    node runs on CUDA, the handed nodes written, none of them run; a handed value moved onto a live one
    gives the first finding of the run where every node runs."""
    from .test_verify_handover import _handed, _model

    path = tmp_path / "shapes.onnx"
    onnx.save(_model(), path)
    p = plan_model(path, dataclasses.replace(CUDA, solver="greedy", order="file"))
    opts = VerifyOptions(device="cuda")
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
    every = execute_plan(p.plan, p.model, p.view, model_path=path, options=dataclasses.replace(opts, handed=False))
    assert ex.findings == every.findings == () and all(c.ok and c.identical for c in ex.outputs + every.outputs)
    handed = _handed(path, p)
    assert {"shape", "gather", "unsqueeze", "shape2", "gather2", "unsqueeze2"} <= handed
    assert (ex.nodes_handed, ex.nodes_run, every.nodes_run) == (len(handed), 13 - len(handed), 13)
    moved = [dataclasses.replace(t, offset=p.plan.tensor("a").offset) if t.name == "g" else t for t in p.plan.tensors]
    bad = dataclasses.replace(p.plan, tensors=tuple(moved))
    caught = execute_plan(bad, p.model, p.view, model_path=path, options=opts)
    first = execute_plan(bad, p.model, p.view, model_path=path, options=dataclasses.replace(opts, handed=False))
    assert caught.findings and caught.findings[0] == first.findings[0]


def test_the_device_arena_moves_bytes_by_the_runtime_as_its_session_does():
    """The device arena copies by the CUDA runtime (``cudaMemcpy``) once it has checked them
    against its Identity session: bytes written by the runtime at odd offsets and sizes read back
    through the session, and bytes written through the session read back by the runtime; a
    kernel run on onnxruntime's own stream right after a write by the runtime sees its bytes."""
    from onnxmem.runtime.arena_buffers import CudaArena

    arena = CudaArena(1 << 20)
    assert arena._direct is not None  # the runtime onnxruntime's provider loaded answers
    rng = np.random.default_rng(5)
    for offset, size in ((0, 1), (3, 4093), (4096, 65_537), ((1 << 20) - 7, 7)):
        data = rng.integers(0, 256, size, dtype=np.uint8)
        arena.write(offset, data)
        assert np.array_equal(arena._through_session(offset, size), data)
        other = data[::-1].copy()
        arena._move(("cpu", int(other.ctypes.data)), ("cuda", arena.base + offset), size)
        assert np.array_equal(arena.read(offset, size), other)
    assert CudaArena(1 << 20, direct=False)._direct is None


def test_copies_that_do_not_move_the_bytes_are_not_used():
    """A runtime whose copies say they succeeded but move nothing (or fail) is refused by the
    check, and the arena keeps to its session; without a runtime there is nothing to check."""
    from onnxmem.runtime.arena_buffers import CudaArena

    arena = CudaArena(1 << 12, direct=False)
    assert arena.direct_copies((lambda *args: 0, lambda: 0)) is None  # nothing moved
    assert arena.direct_copies((lambda *args: 1, lambda: 0)) is None  # an error code
    assert arena.direct_copies(None) is None
