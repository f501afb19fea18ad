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


def test_onnxruntime_requirement_covers_every_platform_once():
    """onnxruntime-gpu where its wheels exist, plain onnxruntime everywhere else."""
    import configparser

    from packaging.requirements import Requirement

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = [Requirement(line) for line in cfg["options"]["install_requires"].split("\n") if line.strip()]
    ort = [r for r in reqs if r.name in ("onnxruntime", "onnxruntime-gpu")]
    assert {r.name for r in ort} == {"onnxruntime", "onnxruntime-gpu"}
    platforms = [("Linux", "x86_64", "onnxruntime-gpu"), ("Windows", "AMD64", "onnxruntime-gpu"),
                 ("Linux", "aarch64", "onnxruntime"), ("Darwin", "arm64", "onnxruntime"),
                 ("Darwin", "x86_64", "onnxruntime"), ("Windows", "ARM64", "onnxruntime")]
    for system, machine, want in platforms:
        env = {"platform_system": system, "platform_machine": machine}
        chosen = [r.name for r in ort if r.marker is not None and r.marker.evaluate(env)]
        assert chosen == [want], (system, machine, chosen)
