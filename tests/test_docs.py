"""The generated CLI reference and the shipped models are current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_shipped_models_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "models" / "build_models.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
