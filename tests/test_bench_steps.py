"""bench/bench_steps.py: each step of a plan timed in a child process of a tree's code, side by
side with another tree, and a folder that is no checkout refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bench_steps.py"


def test_each_step_of_a_small_chain_is_timed_side_by_side():
    out = subprocess.run([sys.executable, str(BENCH), "--nodes", "200", "--runs", "1", "--rounds", "1",
                          "--families", "chain", "--against", str(ROOT), "--no-doc"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)  # a guard against a hang, not a speed limit
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| step")}
    # every step the pipeline runs, the node fields read once among them, in both trees
    for step in ("load", "read_nodes", "_infer", "view_of", "order_view", "aliased_liveness", "prove_plan", "write"):
        cells = [c.strip() for c in rows[f"`{step}`"].split("|")[2:4]]
        assert all(float(c) >= 0 for c in cells), (step, cells)
    assert "chain, 200 nodes:" in out.stdout
    whole = [c.strip() for c in rows["**`plan_loaded`, every step**"].split("|")[2:5]]
    assert float(whole[0]) > 0 and float(whole[1]) > 0 and float(whole[2]) > 0


def test_a_folder_that_is_no_checkout_is_refused(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--against", str(tmp_path), "--no-doc"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)  # a guard against a hang, not a speed limit
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "is not a checkout of onnxmem" in out.stderr
