"""The zoo's Ray executor and its CI job (``make zoo-ray-ci``, ``tools/zoo_ray_ci.py``).

The tests that start a real local Ray cluster carry the ``ray`` marker (``make test-ray``):
a cluster takes several seconds to start on two cores, so the default run leaves them out.
The 50-model list and the job's checks are tested in the default run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from onnxmem.core.errors import OnnxmemError
from onnxmem.zoo import ZooModel, ZooOptions, light_model_path, load_zoo, ray_settings, run_zoo

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "models" / "zoo"
TOOLS = ROOT / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import zoo_ray_ci  # noqa: E402

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the ray extra")


def light(name: str) -> ZooModel:
    return ZooModel(f"onnx_{name}", light_model_path(name))


def _cluster_processes() -> list[int]:
    """Ids of the processes whose command line names a temporary folder of a Ray cluster that
    the zoo started (``onnxmem-ray-``)."""
    return zoo_ray_ci._naming(os.path.join(tempfile.gettempdir(), "onnxmem-ray-"))


def _cluster_folders() -> set[str]:
    """The temporary folders of Ray clusters, the zoo's and Ray's default (``/tmp/ray``)."""
    return ({p.name for p in Path(tempfile.gettempdir()).glob("onnxmem-ray-*")}
            | {p.name for p in Path("/tmp").glob("ray") if p.is_dir()})


# --------------------------------------------------------------------------- the 50 models


def test_the_ci_list_holds_the_catalogue_and_fifty_models():
    catalog = {m.name: m for m in load_zoo(FIXTURES)}
    models = load_zoo(FIXTURES / "catalog-50.json")
    names = [m.name for m in models]
    assert len(names) == len(set(names)) == 50
    # every catalogue model, as the catalogue binds it (a new one: add it, drop a size variant)
    assert set(catalog) <= set(names), set(catalog) - set(names)
    for m in models:
        if m.name in catalog:
            assert (m.path, m.dims) == (catalog[m.name].path, catalog[m.name].dims)
            continue
        # a size variant: a catalogue model's file with its symbolic dims bound otherwise
        (base,) = [c for c in catalog.values() if c.path == m.path and c.dims]
        assert m.name.startswith(base.name + "_")
        assert set(m.dims) == set(base.dims) and m.dims != base.dims


# --------------------------------------------------------------------------- the job's checks


def _doc(rows: list[dict], workers: int = 2, complete: bool = True) -> dict:
    return {"complete": complete, "workers": workers, "models": rows}


def _row(name: str, arena: int = 1024, status: str = "ok", worker: str = "h:1", seconds: float = 1.0) -> dict:
    return {"name": name, "path": f"/{name}.onnx", "status": status, "error": None,
            "arena_size": arena, "lower_bound": 512, "seconds": seconds, "plan_seconds": seconds / 2,
            "worker": worker, "plan_file": f"/out/{name}.json"}


def test_the_job_accepts_equal_runs_over_their_timings_and_workers():
    ray = _doc([_row("a", worker="h:1"), _row("b", worker="h:2", seconds=3.0)])
    local = _doc([_row("a", worker="h:7", seconds=9.0), _row("b", worker="h:8")], workers=2)
    assert zoo_ray_ci.compare_runs(ray, local, models=2, min_workers=2) == []


def test_the_job_names_every_difference():
    local = _doc([_row("a"), _row("b"), _row("c")])
    assert zoo_ray_ci.compare_runs(_doc([_row("a"), _row("b", arena=2048), _row("c")]), local, 3, 2) == \
        ["b: differs in arena_size (ray [2048], local [1024])"]
    problems = zoo_ray_ci.compare_runs(_doc([_row("a"), _row("b")], workers=1, complete=False),
                                       local, 3, 2)
    assert problems == ["ray run: 2 models, complete=False; expected 3, complete",
                        "ray run: 1 distinct worker processes; expected at least 2"]
    failed = _doc([_row("a"), _row("b", status="failed", arena=None), _row("z")])
    problems = zoo_ray_ci.compare_runs(failed, local, 3, 2)
    assert problems[0] == "ray run: 1 models not ok: b (failed: None)"
    assert problems[1].startswith("b: differs in arena_size, status")
    assert problems[2] == "z: in the ray run only"
    assert zoo_ray_ci.compare_runs({"error": "gone", "models": []}, local, 3, 2)[0] == "ray run: gone"


def test_the_job_compares_the_plans_without_their_timings(tmp_path):
    for run, offset in (("ray", 0), ("local", 0), ("moved", 64)):
        plan = {"arena_size": 128, "plan_seconds": len(run), "solver": {"seconds": len(run)},
                "tensors": [{"name": "t", "offset": offset}]}
        (tmp_path / run / "plans").mkdir(parents=True)
        (tmp_path / run / "plans" / "a.json").write_text(json.dumps(plan))
    docs = _doc([_row("a")]), _doc([_row("a")])
    assert zoo_ray_ci.compare_runs(*docs, 1, 2, tmp_path / "ray", tmp_path / "local") == []
    assert zoo_ray_ci.compare_runs(*docs, 1, 2, tmp_path / "ray", tmp_path / "moved") == \
        ["a: the plans differ (plans/a.json)"]
    assert "plan file missing" in zoo_ray_ci.compare_runs(*docs, 1, 2, tmp_path / "ray", tmp_path)[0]


def test_ray_settings_are_set_for_the_block_and_restored(monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    with ray_settings() as settings:
        assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
        assert os.environ["RAY_AUTH_TOKEN"] == settings["RAY_AUTH_TOKEN"] and len(settings["RAY_AUTH_TOKEN"]) == 64
    with ray_settings() as again:
        assert again == settings  # Ray keeps the first token a process reads
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "1" and "RAY_AUTH_TOKEN" not in os.environ


# --------------------------------------------------------------------------- real clusters


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="ray is installed")
def test_ray_executor_without_ray_says_how_to_install():
    with pytest.raises(OnnxmemError, match=r"pip install 'onnxmem\[ray\]'"):
        run_zoo([light("squeezenet")], ZooOptions(executor="ray"))


@pytest.mark.ray
@needs_ray
def test_ray_executor_matches_inline_on_a_local_cluster(tmp_path, monkeypatch):
    """A local cluster of two worker processes: the results equal the inline executor's, two
    workers ran the models, and the cluster leaves no process, no folder and no file in the
    home folder behind."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import onnxmem
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    folders = _cluster_folders()
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not a protobuf")
    models = [light("squeezenet"), ZooModel("broken", bad), light("bvlc_alexnet"), light("zfnet512")]
    inline = run_zoo(models, ZooOptions(executor="inline"))
    remote = run_zoo(models, ZooOptions(executor="ray", jobs=2))

    def figures(r):
        return (r.name, r.status, r.nodes, r.lower_bound, r.arena_size)

    assert [figures(r) for r in remote] == [figures(r) for r in inline]
    assert [r.status for r in remote] == ["ok", "failed", "ok", "ok"]
    assert len({r.worker for r in remote}) == 2
    assert not (tmp_path / "home").exists()  # no ~/.ray/auth_token
    assert _cluster_folders() == folders and _cluster_processes() == []
    assert "RAY_AUTH_TOKEN" not in os.environ


@pytest.mark.ray
@needs_ray
def test_the_ci_job_runs_a_head_and_stops_it(tmp_path):
    """``tools/zoo_ray_ci.py`` for real on three models: a head, the two runs, the checks, and
    nothing left running or on disk outside --out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    before = _cluster_folders()
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(TOOLS / "zoo_ray_ci.py"), "--models", "3", "--out", str(out), "--",
         "--only", "onnx_squeezenet,onnx_bvlc_alexnet,onnx_zfnet512"],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 models ok on Ray over 2 worker processes" in proc.stdout
    doc = json.loads((out / "ray" / "results.json").read_text())
    assert doc["workers"] == 2 and doc["options"]["executor"] == "ray"
    assert _cluster_folders() == before
    assert not (tmp_path / "home").exists()
    assert zoo_ray_ci._naming(os.path.join(tempfile.gettempdir(), "onnxmem-ray-ci-")) == []
