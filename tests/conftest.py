"""Shared fixtures: real models on disk."""

from __future__ import annotations

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
