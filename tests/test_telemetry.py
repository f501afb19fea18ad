"""onnxmem writes nothing but the outputs a command is given: onnxruntime's telemetry is off.

onnxruntime 1.30 and later start a telemetry client when imported, which writes a device
identifier and an event store under the home folder and a session file in ``$TMPDIR``
(``onnxmem/__init__.py``). These tests run real commands in fresh processes with the home
folder, ``$TMPDIR`` and the working folder empty, and look at what is left in each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import MODELS, ROOT

#: the variables onnxruntime (1.31) takes to mean a CI machine or its own tests, where its telemetry
#: stays off by itself: left out of the children's environment, so the tests mean the same there
_QUIET = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS", "JENKINS_URL", "CODEBUILD_BUILD_ID",
          "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR", "BITBUCKET_BUILD_NUMBER", "ORT_RUNNING_UNIT_TESTS")


def _env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], list[Path]]:
    folders = [tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"]
    for f in folders:
        f.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", *_QUIET)}
    env.update(HOME=str(folders[0]), TMPDIR=str(folders[1]), PYTHONPATH=str(ROOT), **extra)
    return env, folders


def _left(folders: list[Path]) -> list[str]:
    return sorted(f"{f.name}/{p.relative_to(f)}" for f in folders for p in f.rglob("*"))


def test_onnxruntime_writes_its_telemetry_files_when_imported_alone(tmp_path: Path) -> None:
    """What the other tests guard against, on this onnxruntime: its import alone, telemetry on,
    writes under the home folder and in ``$TMPDIR`` (skipped for a build that writes nothing)."""
    env, folders = _env(tmp_path)
    subprocess.run([sys.executable, "-c", "import onnxruntime"], env=env, cwd=folders[2], check=True,
                   capture_output=True)
    if not _left(folders):
        pytest.skip("this onnxruntime writes no telemetry files when imported")
    assert any((folders[0] / ".cache").rglob("*")) or any(folders[1].iterdir())


def test_verify_leaves_nothing_in_home_tmpdir_or_the_working_folder(tmp_path: Path) -> None:
    env, folders = _env(tmp_path)
    got = subprocess.run([sys.executable, "-m", "onnxmem", "verify", str(MODELS / "resnet_cnn.onnx")], env=env,
                         cwd=folders[2], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert "verified" in got.stdout
    assert "telemetry" not in got.stderr.lower()
    assert _left(folders) == []


def test_the_library_leaves_the_callers_telemetry_setting(tmp_path: Path) -> None:
    env, folders = _env(tmp_path, ORT_DISABLE_TELEMETRY="0")
    code = "import os, onnxmem; print(os.environ['ORT_DISABLE_TELEMETRY'])"
    got = subprocess.run([sys.executable, "-c", code], env=env, cwd=folders[2], capture_output=True, text=True,
                         check=True)
    assert got.stdout.strip() == "0"
    env, folders = _env(tmp_path / "unset")
    got = subprocess.run([sys.executable, "-c", code], env=env, cwd=folders[2], capture_output=True, text=True,
                         check=True)
    assert got.stdout.strip() == "1"
