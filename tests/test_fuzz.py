"""Fuzzing of the command line in the default suite: a seeded sample of every family.

The sample runs once per module (``outcomes``); each failure class is its own test,
so a report names what broke and the ``FAMILY:SEED`` that reproduces it
(``python tools/fuzz.py --replay FAMILY:SEED``). The checks themselves are tested
on literal results and on real runs that must trip them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import fuzzlib as fuzzing  # noqa: E402

SEED = 0
COUNTS = fuzzing.SAMPLE_COUNTS
#: the wall-clock safety net for a true hang only: ten times the sample's bound. The work of
#: each case is bounded without a clock (the planner's default budgets count work, not seconds:
#: onnxmem.core.workclock), so a case that is merely slow on a loaded machine is not a hang
BOUND = 10 * fuzzing.SAMPLE_BOUND
SCALE = fuzzing.SAMPLE_SCALE


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[fuzzing.Outcome]:
    root = tmp_path_factory.mktemp("fuzz")
    config = fuzzing.RunConfig(workers=2, bound=BOUND, mem_limit=6 << 30, scale=SCALE)
    started = time.monotonic()
    result = fuzzing.run_cases(fuzzing.iter_cases(COUNTS, SEED), root, config)
    print(f"\nfuzz sample: {len(result)} cases in {time.monotonic() - started:.1f} s\n"
          + fuzzing.summary_table(result))
    return result


def _report(outcomes: list[fuzzing.Outcome], cls: str) -> str:
    bad = [o for o in outcomes if cls in o.classes]
    lines = [f"{len(bad)} of {len(outcomes)} cases: {cls}"]
    for o in bad[:8]:
        lines.append(f"  {o.case.key} {o.case.command} ({o.case.note[:70]!r}): {o.classes[cls][:160]!r}")
    return "\n".join(lines)


@pytest.mark.heavy
def test_sample_covers_every_family_and_command(outcomes: list[fuzzing.Outcome]) -> None:
    assert len(outcomes) == sum(COUNTS.values())
    pairs = {(o.case.family, o.case.command) for o in outcomes}
    for fam in fuzzing.MODEL_FAMILIES:
        if fam == "outputs":
            continue
        for cmd in fuzzing.MODEL_COMMANDS:
            assert (fam, cmd) in pairs, f"{fam} never ran {cmd}"
    for cmd in fuzzing.PLAN_COMMANDS:
        assert ("plans", cmd) in pairs
    assert ("csv", "pack") in pairs
    for fam in fuzzing.EXTRA_FAMILIES:
        assert any(f == fam for f, _ in pairs), f"{fam} never ran"


@pytest.mark.heavy
@pytest.mark.parametrize("cls", fuzzing.CLASSES)
def test_no_failure(outcomes: list[fuzzing.Outcome], cls: str) -> None:
    assert not any(cls in o.classes for o in outcomes), _report(outcomes, cls)


def test_cases_are_a_function_of_family_and_seed(tmp_path: Path) -> None:
    """Two corpora, two folders: every file of a case is byte for byte the same."""
    a, b = fuzzing.Corpus(tmp_path / "ca"), fuzzing.Corpus(tmp_path / "cb")
    for fam in fuzzing.FAMILIES:
        if fam == "plans":
            continue  # needs planned bases; covered by the same seeds in the sample
        for seed in range(4):
            fa, fb = tmp_path / "a" / f"{fam}{seed}", tmp_path / "b" / f"{fam}{seed}"
            ca = fuzzing.build_case(a, fam, seed, fa, SCALE)
            cb = fuzzing.build_case(b, fam, seed, fb, SCALE)
            assert (ca.argv, ca.outputs, ca.note) == (cb.argv, cb.outputs, cb.note)
            assert fuzzing.snapshot(fa) == fuzzing.snapshot(fb), f"{fam}:{seed} differs"


# -- the checks can fail ------------------------------------------------------------


def _result(code: int | None, stderr: str = "", stdout: str = "", **extra: object) -> dict:
    def stream(text: str) -> dict:
        return {"head": text, "tail": "", "size": len(text.encode()), "traceback": "Traceback" in text}

    return {"code": code, "seconds": 0.1, "stdout": stream(stdout), "stderr": stream(stderr), **extra}


def _plan_case() -> fuzzing.Case:
    return fuzzing.Case("bytes", 0, "plan", ["plan", "model/m.onnx", "-o", "out/plan.json"],
                        ["out/plan.json"], ["out/plan.json"])


@pytest.mark.parametrize(
    "res, after_extra, expected",
    [
        (_result(0), {"out/plan.json": ("file", 2, "x")}, set()),
        (_result(1, "error: bad model\n"), {}, set()),
        (_result(1, "Traceback (most recent call last):\n  x\nValueError: no\n"), {}, {"traceback"}),
        (_result(1, "error: first\nsecond\n"), {}, {"noisy-error"}),
        (_result(1, ""), {}, {"noisy-error"}),
        (_result(2, "Usage: onnxmem\n"), {}, {"bad-exit"}),
        (_result(2, "Usage: onnxmem plan [OPTIONS] MODEL\nTry 'onnxmem plan --help' for help.\n\n"
                    "Error: Invalid value for '-o'\n"), {}, set()),
        (_result(1, "error: x\n"), {"out/plan.json": ("file", 2, "x")}, {"partial"}),
        (_result(0), {}, {"missing-output"}),
        (_result(0), {"out/plan.json": ("file", 2, "x"), "out/.plan.json.tmp": ("file", 1, "y")},
         {"stray-write"}),
        (_result(0), {"out/plan.json": ("file", 2, "x"), "model/m.onnx": ("file", 9, "changed")},
         {"input-changed"}),
        (_result(1, "error: x\n"), {"PWNED": ("file", 0, "e")}, {"pwned", "stray-write"}),
        (_result(1, "error: x\n", execs=["os.system touch"]), {}, {"pwned"}),
        (_result(1, "error: x\n", reads=["/etc/passwd"]), {}, {"stray-read"}),
        (_result(1, "error: name \x1b[31m\n"), {}, {"raw-control"}),
        (_result(None, hang=True), {}, {"hang"}),
        (_result(1, "Traceback (most recent call last):\nMemoryError\n", exc="MemoryError"), {},
         {"traceback", "memory"}),
    ],
)
def test_check_result_classifies(tmp_path: Path, res: dict, after_extra: dict, expected: set) -> None:
    before = {"model": ("dir",), "model/m.onnx": ("file", 9, "h"), "out": ("dir",)}
    after = {**before, **after_extra}
    (tmp_path / "out").mkdir()
    (tmp_path / "out/plan.json").write_text("{}")
    got = fuzzing.check_result(_plan_case(), tmp_path, before, after, res, False, 10.0)
    expected = expected | ({"invalid-plan"} if res["code"] == 0 and "out/plan.json" in after_extra
                           else set())
    assert set(got) == expected, got


def test_a_command_that_must_refuse_fails_on_exit_0(tmp_path: Path) -> None:
    case = fuzzing.Case("outputs", 0, "plan", ["plan", "model/m.onnx", "-o", "model/m.onnx"],
                        must_fail=True)
    before = {"model": ("dir",), "model/m.onnx": ("file", 9, "h")}
    got = fuzzing.check_result(case, tmp_path, before, dict(before), _result(0), False, 10.0)
    assert set(got) == {"bad-exit"}
    got = fuzzing.check_result(case, tmp_path, before, dict(before), _result(1, "error: x\n"), False, 10.0)
    assert got == {}


def test_unsafe_plan_is_recognised() -> None:
    t = {"size": 64, "start": 0, "end": 2}
    assert fuzzing._unsafe({"tensors": [dict(t, name="a", group="a", offset=0),
                                        dict(t, name="b", group="b", offset=32)]})
    assert not fuzzing._unsafe({"tensors": [dict(t, name="a", group="a", offset=0),
                                            dict(t, name="b", group="b", offset=64)]})
    assert not fuzzing._unsafe({"tensors": [dict(t, name="a", group="a", offset=0),
                                            dict(t, name="v", group="a", offset=0)]})
    assert not fuzzing._unsafe({"tensors": [dict(t, name="a", group="a", offset=0),
                                            dict(t, name="b", group="b", offset=0, start=2, end=3)]})


def test_valid_plan_passes_the_schema_check(tmp_path: Path) -> None:
    corpus = fuzzing.Corpus(tmp_path / "corpus", shipped=False)
    corpus.ensure_plans()
    plan = corpus.by_name("mlp").plan_json
    assert plan is not None
    (tmp_path / "out").mkdir()
    (tmp_path / "out/plan.json").write_text(plan)
    after = {"out": ("dir",), "out/plan.json": ("file", len(plan), "h")}
    got = fuzzing.check_result(_plan_case(), tmp_path, {"out": ("dir",)}, after, _result(0), False, 10.0)
    assert got == {}
    data = json.loads(plan)
    data["arena_size"] = -1
    (tmp_path / "out/plan.json").write_text(json.dumps(data))
    got = fuzzing.check_result(_plan_case(), tmp_path, {"out": ("dir",)}, after, _result(0), False, 10.0)
    assert set(got) == {"invalid-plan"}


def _fit_answer(found: int | None, total: int, memory: int = 1000, **extra: object) -> str:
    data = {"fit": {"batch": found}, "memory": memory, "box": {"batch": [1, 64]},
            "items": {"total": total}, "margin": memory - total, "next": None, **extra}
    return json.dumps(data)


@pytest.mark.parametrize(
    "code, stdout, wrong",
    [
        (0, _fit_answer(8, 900, next={"point": {"batch": 9}, "items": {"total": 1100}}), None),
        (2, _fit_answer(None, 1200), None),
        (0, _fit_answer(80, 900), "batch=80 outside its range"),
        (0, _fit_answer(8, 1100), "exit 0 with"),
        (0, _fit_answer(8, 900, margin=5), "margin 5 is not memory - total"),
        (0, _fit_answer(8, 900, next={"point": {"batch": 9}, "items": {"total": 950}}), "fits too"),
        (0, _fit_answer(8, 900, frontier=[{"point": {"batch": 2}, "value": 3, "items": {"total": 2000}}]),
         "over the memory"),
        (2, _fit_answer(4, 1200), "exit 2 (nothing fits)"),
        (2, _fit_answer(None, 800), "exit 2 (nothing fits)"),
        (0, "fit: batch=8", "without a JSON answer"),
    ],
)
def test_fit_answers_are_checked_on_their_own_figures(tmp_path: Path, code: int, stdout: str,
                                                      wrong: str | None) -> None:
    case = fuzzing.Case("ranges", 0, "fit --runtime plan", ["fit", "model/m.onnx"], ok_codes=(2,), fit_json=True)
    stderr = "" if code == 0 else "warning: a figure\nerror: does not fit: even batch=1 needs 1200 B\n"
    got = fuzzing.check_result(case, tmp_path, {}, {}, _result(code, stderr, stdout), False, 10.0)
    assert (got.get("wrong-answer") is None) if wrong is None else wrong in got.get("wrong-answer", ""), got
    assert set(got) <= {"wrong-answer"}, got


def test_fits_exit_2_is_an_answer_whose_plot_is_written(tmp_path: Path) -> None:
    """fit's exit 2 (nothing fits) writes its --plot as exit 0 does: no ``partial``; without the
    plot it is ``missing-output``; any other failing exit that leaves the plot is ``partial``."""
    case = fuzzing.Case("ranges", 0, "fit --runtime plan", ["fit", "model/m.onnx", "--plot", "out/fit.png"],
                        ["out/fit.png"], ok_codes=(2,), fit_json=True)
    before = {"out": ("dir",)}
    drawn = {**before, "out/fit.png": ("file", 9, "p")}
    no_fit = _result(2, "error: does not fit: even batch=1 needs 1200 B\n", _fit_answer(None, 1200))
    assert fuzzing.check_result(case, tmp_path, before, drawn, no_fit, False, 10.0) == {}
    assert set(fuzzing.check_result(case, tmp_path, before, dict(before), no_fit, False, 10.0)) == {"missing-output"}
    failed = _result(1, "error: bad model\n")
    assert set(fuzzing.check_result(case, tmp_path, before, drawn, failed, False, 10.0)) == {"partial"}


def test_a_range_plan_is_checked_against_its_own_schema(tmp_path: Path) -> None:
    corpus = fuzzing.Corpus(tmp_path / "corpus", shipped=False)
    text = corpus.ensure_range_plan()
    case = fuzzing.Case("ranges", 0, "plan (range)", ["plan"], ["out/plan.json"], ["out/plan.json"])
    (tmp_path / "out").mkdir()
    after = {"out": ("dir",), "out/plan.json": ("file", 1, "h")}
    (tmp_path / "out/plan.json").write_text(text)
    assert fuzzing.check_result(case, tmp_path, {"out": ("dir",)}, after, _result(0), False, 10.0) == {}
    data = json.loads(text)
    data["range"]["pieces"][0]["box"] = "batch"
    (tmp_path / "out/plan.json").write_text(json.dumps(data))
    got = fuzzing.check_result(case, tmp_path, {"out": ("dir",)}, after, _result(0), False, 10.0)
    assert set(got) == {"invalid-plan"}


@pytest.mark.heavy
def test_worker_records_reads_hangs_and_recovers(tmp_path: Path) -> None:
    """Real runs through a worker: an unnamed read outside the model's folder, a run
    past its bound (killed), then a clean run on the replacement worker."""
    folder = tmp_path / "case"
    for sub in ("model", "out", "outside"):
        (folder / sub).mkdir(parents=True)
    (folder / fuzzing.CANARY).write_text("{}")
    worker = fuzzing.Worker(tmp_path / "worker", 6 << 30)
    try:
        res = worker.run({"folder": str(folder), "argv": ["show", fuzzing.CANARY], "named_reads": []}, 60)
        assert res["code"] == 1
        assert any(r.endswith("outside/canary.bin") for r in res["reads"]), res["reads"]
        res = worker.run({"folder": str(folder), "argv": ["show", fuzzing.CANARY],
                          "named_reads": [str(folder / fuzzing.CANARY)]}, 60)
        assert res["reads"] == [] and res["code"] == 1
        res = worker.run({"folder": str(folder), "named_reads": [],
                          "argv": ["generate", "transformer", "out/big.onnx", "--size", "4000"]}, 0.2)
        assert res.get("hang") is True
        res = worker.run({"folder": str(folder), "named_reads": [],
                          "argv": ["generate", "randwire", "out/small.onnx", "--size", "4"]}, 60)
        assert res["code"] == 0 and (folder / "out/small.onnx").is_file()
    finally:
        worker.stop()
    assert not os.path.exists(folder / fuzzing.MARK)


@pytest.mark.heavy
def test_a_fresh_interpreter_per_case_runs_the_command_and_its_child(tmp_path: Path) -> None:
    """``tools/fuzz.py --subprocess``: each case in a fresh interpreter. It put the repository root,
    not ``tools/``, on the path, so every case died importing the harness ('interpreter died'); a
    command that starts its onnxruntime child (verify) makes and removes multiprocessing's heap
    file in /dev/shm, which is not a stray write."""
    folder = tmp_path / "case"
    for sub in ("model", "out", "outside"):
        (folder / sub).mkdir(parents=True)
    (folder / "model" / "m.onnx").write_bytes((Path(__file__).resolve().parent.parent / "models" / "resnet_cnn.onnx").read_bytes())
    worker = fuzzing.SubprocessWorker(tmp_path / "worker", 6 << 30)
    case = fuzzing.Case("bytes", 0, "verify", ["verify", "model/m.onnx"])
    before = fuzzing.snapshot(folder)
    res = worker.run({"folder": str(folder), "argv": case.argv, "named_reads": []}, 120)
    assert "crash" not in res and res["code"] == 0, res
    got = fuzzing.check_result(case, folder, before, fuzzing.snapshot(folder), res, False, 120.0)
    assert got == {}, got
