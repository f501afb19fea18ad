"""`onnxmem fit`: the largest value of a ranged dim whose deployment fits, on real files and sessions."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.cli.output import fmt_bytes
from onnxmem.core.errors import OnnxmemError
from onnxmem.core.sizes import parse_size
from onnxmem.model import load_model
from onnxmem.planning import PlanOptions
from onnxmem.planning.fit import fit_model, fit_to_dict
from onnxmem.runtime import fixed_cost, session_peak
from tests.helpers import batch_chain, saved_model

ROOT = Path(__file__).resolve().parent.parent
N = 256
#: the chain's weights: one float matrix N x N
WEIGHTS = N * N * 4
#: its arena per batch row: x and MatMul's output live together (Relu writes over its input)
ARENA_PER_ROW = 2 * N * 4
#: the plan's own view of the graph as written: the hand-computable totals
PLAN_VIEW = {"optimize": "none", "runtime": "plan"}


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``y = Relu(x @ w)``, ``x: float[batch, N]``, ``w: float[N, N]``: hand-computable totals."""
    return saved_model(tmp_path_factory, batch_chain(N), "fit")


@pytest.mark.parametrize("batch", [1, 7, 100, 1000])
def test_chain_largest_batch_is_exact(chain: Path, batch: int) -> None:
    fixed = 12345
    memory = WEIGHTS + ARENA_PER_ROW * batch + fixed
    fit = fit_model(load_model(chain), chain, memory, {"batch": (1, 1024)}, fixed=fixed, **PLAN_VIEW).answer
    assert fit.value == batch
    assert fit.at.arena == ARENA_PER_ROW * batch and fit.at.weights == WEIGHTS
    assert fit.at.total == memory and fit.margin == 0
    assert fit.next is not None and fit.next.total == memory + ARENA_PER_ROW > memory
    assert fit.monotone


def test_chain_io_external_adds_inputs_and_outputs(chain: Path) -> None:
    # outside the arena: x and y are N*4 bytes per row each; the arena holds h alone
    per_row = N * 4 + 2 * N * 4
    memory = WEIGHTS + per_row * 50
    fit = fit_model(load_model(chain), chain, memory, {"batch": (1, 1024)}, PlanOptions(io="external"),
                    **PLAN_VIEW).answer
    assert fit.value == 50
    assert (fit.at.inputs, fit.at.outputs, fit.at.arena) == (N * 4 * 50, N * 4 * 50, N * 4 * 50)


def test_whole_range_fits(chain: Path) -> None:
    fit = fit_model(load_model(chain), chain, 2**30, {"batch": (1, 64)}, **PLAN_VIEW).answer
    assert fit.value == 64 and fit.next is None and "every value" in fit.reason


def test_frontier_of_two_dims(tmp_path: Path) -> None:
    # y = Relu(x) with x: float[batch, seq, 16]: the arena holds x and y (a graph input is not
    # written over), 2 * 64*batch*seq bytes
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    report = fit_model(load_model(path), path, 2 * 64 * 1200, {"batch": (1, 4), "seq": (1, 1000)}, **PLAN_VIEW)
    assert [f.value for f in report.fits] == [1000, 600, 400, 300]
    assert fit_to_dict(report)["fit"] == {"batch": 4, "seq": 300}


def test_cli_json_keys_and_exact_answer(chain: Path, tmp_path: Path) -> None:
    cache = tmp_path / "fixed.json"
    fixed = fixed_cost("cpu").session
    memory = WEIGHTS + ARENA_PER_ROW * 300 + fixed
    r = run("fit", str(chain), "--memory", str(memory), "--dim", "batch=1:1024", "--json", "--cache", str(cache),
            "--optimize", "none", "--runtime", "plan")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["fit"] == {"batch": 300}
    assert set(data["items"]) == {"weights", "arena", "inputs", "outputs", "kv_cache", "io_outside_arena",
                                  "fixed", "session_held", "session_created", "onnxruntime_activations", "total"}
    assert data["runtime"] is None and data["planned"] == "range"
    assert data["items"]["fixed"] == fixed and data["items"]["total"] == memory and data["margin"] == 0
    assert data["next"]["items"]["total"] == memory + ARENA_PER_ROW
    assert {"reason", "memory", "device", "optimize", "box", "monotone"} <= set(data)
    entry = next(iter(json.loads(cache.read_text()).values()))
    assert entry["session"] == fixed and entry["device"] == "cpu"


def test_cli_text_and_plot(chain: Path, tmp_path: Path) -> None:
    png = tmp_path / "fit.png"
    r = run("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:1024", "--plot", str(png))
    assert r.exit_code == 0, r.output
    for item in ("session", "weights", "held", "created", "arena", "inputs", "outputs", "fixed", "total", "margin"):
        assert any(line.startswith(item) for line in r.output.splitlines()), item
    assert "graph --optimize all" in r.output and "default onnxruntime session, memory patterns on" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smallest_does_not_fit_exits_2(chain: Path, tmp_path: Path) -> None:
    png = tmp_path / "never.png"
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "100KiB", "--dim", "batch=1:8", "--json",
                                  "--plot", str(png)])
    assert r.exit_code == 2
    data = json.loads(r.stdout)
    assert data["fit"] == {"batch": None}
    over = data["items"]["total"] - 100 * 1024
    assert over > 0 and f"{over:,} B over the memory" in data["reason"]
    assert r.stderr.startswith("error: does not fit: even batch=1 needs") and r.stderr.count("\n") == 1
    assert png.exists()  # the picture shows how far over it is


@pytest.mark.parametrize("text", ["8 GiBs", "-1", "0", "abc", "1e9", "", "9" * 30, "1.5.GiB"])
def test_bad_memory_is_one_line(chain: Path, text: str) -> None:
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", text, "--dim", "batch=1:8"])
    assert r.exit_code == 1 and r.exception is None or isinstance(r.exception, SystemExit)
    assert r.exit_code == 1
    assert r.stderr.startswith("error: --memory") and r.stderr.count("\n") == 1


def test_parse_size_units() -> None:
    assert parse_size("8GiB", "--memory") == 8 * 2**30
    assert parse_size("1.5 kib", "--memory") == 1536
    assert parse_size("2GB", "--memory") == 2 * 10**9
    assert parse_size("4096", "--memory") == 4096
    with pytest.raises(OnnxmemError, match="--memory 'x' is not a size"):
        parse_size("x", "--memory")


def test_needs_a_ranged_dim(chain: Path) -> None:
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=4"])
    assert r.exit_code == 1 and "batch is bound to 4; range it instead (--dim batch=1:1024)" in r.stderr


def test_bad_optimize_level_and_runtime_are_refused(chain: Path) -> None:
    with pytest.raises(OnnxmemError, match="--optimize 'fast' is not one of none"):
        fit_model(load_model(chain), chain, 2**30, {"batch": (1, 8)}, optimize="fast")
    with pytest.raises(OnnxmemError, match="--runtime 'guess' is not one of measure"):
        fit_model(load_model(chain), chain, 2**30, {"batch": (1, 8)}, runtime="guess")


@pytest.mark.slow
def test_cnn_answer_runs_within_budget_in_a_default_session(tmp_path: Path) -> None:
    """resnet50 over its batch at fit's defaults (the graph a default session runs, the model's
    session made and run at the answer): a real default session at the answer, in a fresh
    process, stays within the budget, and the next batch's prediction exceeds it."""
    from onnxmem.planning.process import input_shapes
    from onnxmem.zoo import materialize

    path = materialize(ROOT / "models" / "zoo" / "resnet50_batch.onnx", tmp_path)
    model = load_model(path)
    budget = 300 * 2**20
    report = fit_model(model, path, budget, {"batch": (1, 32)}, fixed=fixed_cost("cpu").session)
    fit = report.answer
    assert fit.value is not None and 2 <= fit.value < 32 and report.measured
    assert fit.next is not None and fit.next.total > budget
    peak = session_peak(path, input_shapes(model, {"batch": fit.value}), level="ORT_ENABLE_ALL").peak
    assert peak <= budget
    assert 0.9 <= fit.at.total / peak <= 1.2


def test_bad_cache_and_output_paths_are_one_line(chain: Path, tmp_path: Path) -> None:
    bad = tmp_path / "cache.json"
    bad.write_text("[1, 2")
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=1:8", "--cache", str(bad)])
    assert r.exit_code == 1 and "is not a fixed-cost cache" in r.stderr and r.stderr.count("\n") == 1
    assert bad.read_text() == "[1, 2"
    plan = tmp_path / "plan.json"  # a JSON object of another kind (a plan given by mistake) is not rewritten
    plan.write_text('{"schema_version": 1, "arena_size": 64, "tensors": []}')
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=1:8", "--cache", str(plan)])
    assert r.exit_code == 1 and "is not a fixed-cost cache" in r.stderr and r.stderr.count("\n") == 1
    assert plan.read_text() == '{"schema_version": 1, "arena_size": 64, "tensors": []}'
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=1:8", "--plot", str(chain)])
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert chain.read_bytes()[:1] != b"\x89"


@pytest.mark.parametrize(("peak", "inputs", "held", "created", "arena", "factor"), [
    (240, 10, 150, 160, 40, 2.5),    # the runs grew the process past its creation peak
    (160, 90, 150, 160, 40, None),   # they stayed under it (the inputs alone above): hidden, unknown
    (250, 0, 150, 160, 0, None),     # no arena to scale
])
def test_activation_factor(peak: int, inputs: int, held: int, created: int, arena: int,
                           factor: float | None) -> None:
    from onnxmem.planning.process import activation_factor
    from onnxmem.runtime import SessionPeak

    run = SessionPeak(created=created, peak=peak, baseline=0, runs=(peak,), held=held, inputs=inputs)
    assert activation_factor(run, held, created, arena) == factor


def test_footprint_total_counts_the_session_and_its_creation_peak() -> None:
    from onnxmem.planning.fit import Footprint
    from onnxmem.planning.process import Process

    process = Process(held=150, created=400, factor=3.0, source="rule", factors={(("batch", 4),): 2.0})
    assert process.activations(10) == 30 and process.activations(10, {"batch": 4}) == 20
    # held + factor x arena = 150 + 3 x 40 = 270 is below the creation peak (with the inputs the
    # caller holds): the total is 408
    low = Footprint({"batch": 1}, 100, 40, 8, 8, 0, 7, True, held=150, created=408, runtime=80)
    assert low.total == 408 and low.session == 150
    high = Footprint({"batch": 9}, 100, 400, 8, 8, 0, 7, False, held=150, created=400, runtime=800)
    assert high.total == 150 + 400 + 800 + 16
    plan_view = Footprint({"batch": 9}, 100, 400, 8, 8, 0, 7, False)
    assert plan_view.total == 100 + 7 + 400 + 16


def _matmul(tmp_path: Path, k: int, n: int, external: bool) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])
    w = numpy_helper.from_array(np.random.default_rng(0).random((k, n), dtype=np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / f"mm_{external}.onnx"
    onnx.save(model, str(path), save_as_external_data=external, location="mm.data" if external else None)
    return path


@pytest.mark.parametrize("n", [1024, 1000])
def test_prepacked_matmul_weight_in_external_data(tmp_path: Path, n: int) -> None:
    """MLAS packs a MatMul's float weight ``[K, N]`` into K x N rounded up to 16 floats at session
    start. With the weight in external data, onnxruntime maps the file, reads the weight to pack
    it and then unmaps it: the session's creation peak holds both (the mapped original and the
    packed copy); once made it holds the packed copy alone. With prepacking off nothing is read
    at creation."""
    k = 2048
    original, packed = k * n * 4, k * (-(-n // 16) * 16) * 4
    fixed = fixed_cost("cpu").session
    path = _matmul(tmp_path, k, n, external=True)
    on = session_peak(path, {"x": (1, k)}, level="ORT_ENABLE_ALL", runs=0)
    off = session_peak(path, {"x": (1, k)}, level="ORT_ENABLE_ALL", runs=0, prepack=False)
    slack = 2**20
    assert abs(on.held - (fixed + packed)) <= slack
    assert abs(on.created - (fixed + packed + original)) <= slack
    assert abs(off.created - fixed) <= slack


def test_inline_weight_is_held_once_whether_prepacked_or_not(tmp_path: Path) -> None:
    """A weight stored in the model file is copied into the session; prepacking replaces that copy
    (the original is freed), so the session holds one copy either way, and at most one more: the
    bytes of the file read to parse it, which the C heap may keep (measured 1x to 2x the weight,
    depending on the process's heap history)."""
    k = n = 1024
    fixed = fixed_cost("cpu").session
    path = _matmul(tmp_path, k, n, external=False)
    on = session_peak(path, {"x": (1, k)}, level="ORT_ENABLE_ALL", runs=0)
    off = session_peak(path, {"x": (1, k)}, level="ORT_ENABLE_ALL", runs=0, prepack=False)
    for got in (on, off):
        assert fixed + k * n * 4 - 2**20 <= got.held <= fixed + 2 * k * n * 4 + 2**20


def test_fit_measures_the_session_and_its_activations(chain: Path) -> None:
    """At fit's defaults the chain's default session is made (what it holds) and run at the answer
    (onnxruntime's activations per byte of the arena); ``--runtime rule`` runs nothing and takes the
    rule's factor."""
    from onnxmem.planning.process import SAFETY_FACTOR

    model = load_model(chain)
    fixed = fixed_cost("cpu").session
    # the first run, at the rule's answer, must take its process past the creation peak of the
    # session measured in another child: about 14.7 MB against 9.6 here (at 16 MiB of memory the
    # margin was 0.9 MB, within what two children's creation peaks differ by on a loaded machine)
    memory, box = 48 * 2**20, {"batch": (1, 2**16)}
    off = fit_model(model, chain, memory, box, fixed=fixed, runtime="rule", patterns=False)
    assert off.process is not None and off.process.factor == SAFETY_FACTOR[False] and not off.process.patterns
    rule = fit_model(model, chain, memory, box, fixed=fixed, runtime="rule")
    assert rule.process is not None and rule.process.factor == SAFETY_FACTOR[True] and not rule.measured
    assert rule.process.held is not None and rule.process.held >= WEIGHTS
    at = rule.answer.at
    assert rule.process.created is not None and at.created == rule.process.created + at.inputs
    assert at.total == max(at.created, at.session + at.arena + at.runtime + at.io)
    assert at.runtime == math.ceil(SAFETY_FACTOR[True] * at.arena) - at.arena
    measured = fit_model(model, chain, memory, box, fixed=fixed)
    assert measured.measured and measured.answer.value is not None
    assert measured.answer.next is not None and measured.answer.next.total > memory
    assert fit_to_dict(measured)["runtime"]["factor_source"].startswith("measured at batch=")


def test_point_plans_where_the_range_plan_of_the_level_fails(tmp_path: Path) -> None:
    """At ``all`` on CPU, onnxruntime gives a Conv the NCHWc layout; over a ranged image height a
    NCHWc Conv without padding has output height ``H - 2``, which no engine gives for that op, so fit plans the
    graph at each value it searches, and says so."""
    from onnxmem.planning.pipeline import plan_optimized
    from onnxmem.runtime.optimize import optimized_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "H", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, None, 14])
    w = numpy_helper.from_array(np.full((16, 8, 3, 3), 0.01, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["c"])
    model = helper.make_model(helper.make_graph([node, helper.make_node("Relu", ["c"], ["y"])], "conv", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    with optimized_model(path, "all") as built:
        plan = plan_optimized(built, PlanOptions(dims={"H": 40}, optimize="all")).plan
    memory = plan.weights_size + plan.arena_size
    report = fit_model(load_model(path), path, memory, {"H": (8, 64)}, runtime="plan")
    assert report.plan is None and any("range plan at --optimize all cannot be made" in w for w in report.warnings)
    fit = report.answer
    assert fit.value == 40 and fit.at.total == memory and fit.next is not None and fit.next.total > memory
    from onnxmem.report.fit import render_fit_plot

    assert render_fit_plot(report, "conv")[:8] == b"\x89PNG\r\n\x1a\n"  # the values planned while searching


def test_unbound_input_dim_cannot_be_measured(chain: Path) -> None:
    from onnxmem.planning.process import input_shapes

    assert input_shapes(load_model(chain), {"batch": 3}) == {"x": (3, N)}
    with pytest.raises(OnnxmemError, match="graph input 'x' has a dim without a value .*--dim NAME=N"):
        input_shapes(load_model(chain), {})


def test_compare_prints_plans_deployment_total_and_the_measured_session(chain: Path) -> None:
    plan = run("plan", str(chain), "--dim", "batch=64", "--fixed-cost")
    compare = run("compare", str(chain), "--dim", "batch=64")
    assert plan.exit_code == 0 and compare.exit_code == 0, compare.output
    same = [line for line in plan.output.splitlines() if line.startswith("deployment   total")]
    assert len(same) == 1 and same[0] in compare.output.splitlines()
    measured = next(line for line in compare.output.splitlines() if line.startswith("measured     default session"))
    assert f"inputs {fmt_bytes(64 * N * 4)}" in measured


def test_weights_missing_counts_the_rule_and_says_why(tmp_path: Path) -> None:
    """Without its data file the model's session cannot be made: fit counts weights + fixed and the
    rule's factor, in one warning line; at --optimize all (onnxruntime reads the weights to build
    its graph) it refuses in one line."""
    path = _matmul(tmp_path, 256, 256, external=True)
    (tmp_path / "mm.data").unlink()
    r = CliRunner().invoke(main, ["fit", str(path), "--memory", "64MiB", "--dim", "batch=1:1024", "--optimize",
                                  "none", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["runtime"]["factor_source"] == "rule" and data["runtime"]["session_held"] is None
    assert data["items"]["session_held"] == data["items"]["weights"] + data["items"]["fixed"]
    assert r.stderr.count("\n") == 1 and "could not be made to measure it" in r.stderr
    r = CliRunner().invoke(main, ["fit", str(path), "--memory", "64MiB", "--dim", "batch=1:1024"])
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1


def _fit_in_a_pool_worker(path: str, fixed: int, out: Any) -> None:
    """fit at its defaults in a daemonic process (a pool's worker): what it measured, and why not."""
    report = fit_model(load_model(path), path, 48 * 2**20, {"batch": (1, 2**16)}, fixed=fixed)
    assert report.process is not None
    out.put((report.process.held, report.process.source, list(report.warnings)))


def test_a_session_is_measured_in_a_fresh_process_or_not_at_all(chain: Path) -> None:
    """The first session a process makes also sets up onnxruntime's environment (8.7 MB resident on
    CPU, none of it again for a second session). A session measured in a process that made one
    before would hold too little, and fit would find a batch the deployment cannot hold. So each
    measurement runs in a child started for it, two alike in one process; where none can be
    started (runs kept in this process, a pool's worker) it is refused in one line, and fit counts
    weights + the fixed cost and says why."""
    import multiprocessing as mp

    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime import run_limits

    fixed = fixed_cost("cpu").session
    first = session_peak(chain, {}, level="ORT_ENABLE_ALL", runs=0)
    second = session_peak(chain, {}, level="ORT_ENABLE_ALL", runs=0)
    assert first.held >= WEIGHTS + 2**20 and abs(first.held - second.held) < 2**20, (first, second)
    with run_limits(isolate=False), pytest.raises(RuntimeBackendError, match=r"^measuring a session of .* needs "
                                                  r"a fresh process, and runs kept in this process \(isolate=False\)"):
        session_peak(chain, {}, runs=0)
    ctx = mp.get_context("fork")  # a fork of this test's process, whose onnxruntime made sessions
    out = ctx.Queue()
    worker = ctx.Process(target=_fit_in_a_pool_worker, args=(str(chain), fixed, out), daemon=True)
    worker.start()
    held, source, warnings = out.get(timeout=120)
    worker.join(30)
    assert held is None and source == "rule", (held, warnings)
    assert any("needs a fresh process, and a daemonic process (a pool's worker) cannot start one" in w
               for w in warnings), warnings


def test_arena_extension_strategies(chain: Path) -> None:
    from onnxmem.runtime.footprint import ARENA_EXTEND

    for extend in ARENA_EXTEND:
        got = session_peak(chain, {"x": (64, N)}, level="ORT_ENABLE_ALL", arena_extend=extend)
        assert len(got.runs) == 2 and got.peak >= got.held > 0 and got.inputs == 64 * N * 4
    with pytest.raises(OnnxmemError, match="arena extension 'doubling' is not one of next-power-of-two"):
        session_peak(chain, {"x": (1, N)}, arena_extend="doubling")


def test_nothing_fits_by_the_rule_then_the_smallest_is_run(chain: Path) -> None:
    """At batch 8000 the rule's factor (6.0) puts the chain over 64 MiB (held 8 to 10 MiB + 6 x
    16 MB of arena); the smallest value is then run, its factor measured, and the search goes on.
    The run must take the process past the session's creation peak, which hides the first few
    MB of activations (at batch 1000 it stayed under it in one run of six): at 8000 it is past
    it by about 6.5 MB."""
    from onnxmem.planning.process import SAFETY_FACTOR

    memory, box = 64 * 2**20, {"batch": (8000, 32000)}
    model = load_model(chain)
    rule = fit_model(model, chain, memory, box, runtime="rule")
    assert rule.answer.value is None and rule.process is not None and rule.process.factor == SAFETY_FACTOR[True]
    measured = fit_model(model, chain, memory, box)
    assert 8000 in measured.measured and measured.answer.value is not None and measured.answer.value >= 8000
    assert measured.answer.at.total <= memory


def test_the_plot_of_a_range_from_zero_draws_without_a_warning(chain: Path, tmp_path: Path) -> None:
    """A range from 0 (a KV cache's past length) on a long range: its axis is logarithmic but for
    the stretch about 0 (symlog), where a log axis had matplotlib warn of a non-positive limit."""
    import warnings

    png = tmp_path / "fit.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = run("fit", str(chain), "--memory", "64MiB", "--dim", "batch=0:1024", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert re.search(r"range        batch=0:1024   1 piece   plan", r.output), r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_cache_nested_past_the_parser_is_refused_in_one_line(chain: Path, tmp_path: Path) -> None:
    """A fixed-cost cache of 100,000 nested brackets took the JSON parser past Python's recursion
    limit: a traceback (fuzz seed 1300000, ranges:1300165). It is refused as any file that is no cache."""
    cache = tmp_path / "cost.json"
    cache.write_text("[" * 100_000 + "]" * 100_000)
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:64", "--cache", str(cache),
                                  *("--optimize", "none", "--runtime", "plan")])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert r.output.startswith("error: --cache ") and "is not a fixed-cost cache written by onnxmem fit" in r.output
    assert cache.read_text() == "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("dims", [("batch=5:5",), ("batch=1:1", "seq=1:16")])
def test_the_plot_of_a_range_of_one_value_draws_it_without_a_warning(tmp_path: Path, dims: tuple[str, ...]) -> None:
    """A range of one value gave matplotlib identical x limits: its warning on stderr beside the
    answer (fuzz seed 1400000, ranges:1401575), and a curve or frontier of one point drew nothing.
    The axis now spans one unit either side, the value's stack is a bar and a frontier's point a dot."""
    import warnings

    from onnxmem.report.fit import fit_figure, render_fit_plot

    path = ROOT / "models" / "transformer_block.onnx"
    box = {k: (int(v.split(":")[0]), int(v.split(":")[1])) for k, v in (d.split("=") for d in dims)}
    bound = {} if "seq" in box else {"seq": 4}
    report = fit_model(load_model(path), path, 20 * 2**20, box, PlanOptions(dims=bound), fixed=2**20,
                       runtime="plan")
    assert all(f.value is not None for f in report.fits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = render_fit_plot(report, "block")
        ax = fit_figure(report, "block").axes[0]
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    lo, hi = box["batch"]
    assert ax.get_xlim() == (lo - 1, hi + 1)
    if "seq" in box:
        assert ax.lines[0].get_marker() == "o"
    else:
        assert len(ax.patches) == 5  # weights, fixed cost, io, arena, runtime: one bar each
