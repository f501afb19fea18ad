"""Shared fixtures: real models on disk, and the allocation tracer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT.glob("light_*.onnx"))
SHIPPED = sorted(MODELS.glob("*.onnx"))
#: dims the shipped models need
SHIPPED_DIMS = {"transformer_block.onnx": {"batch": 1, "seq": 32}}


@pytest.fixture(scope="session")
def light_models() -> list[Path]:
    assert len(LIGHT_MODELS) == 9, f"expected the nine onnx-wheel models in {LIGHT}"
    return LIGHT_MODELS


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS


@pytest.fixture
def tracer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``bench/alloc_trace.c`` built and preloaded into the next onnxruntime child (a fresh one),
    so that ``SessionPeak.requested`` and ``TrainingStepPeak.requested`` are counted."""
    from onnxmem.runtime.isolation import end_child

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build bench/alloc_trace.c")
    out = tmp_path / "alloc_trace.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(ROOT / "bench" / "alloc_trace.c"), "-ldl"],
                   check=True)
    monkeypatch.setenv("LD_PRELOAD", str(out))  # the next child inherits it
    end_child()
    yield out
    end_child()  # no later test runs in a traced child
