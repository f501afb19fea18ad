"""bench/bench_speed.py: the verify table, with what verify cannot do without beside it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bench_speed.py"


def _bench(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, str(script), *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)  # a guard against a hang, not a speed limit
    assert out.returncode == 0, out.stderr
    return out


def test_the_verify_table_times_the_imports_and_each_node_twice_beside_verify_and_onnxruntime():
    out = _bench(BENCH, "--sections", "verify", "--only", "onnx_squeezenet", "--runs", "1", "--no-doc")
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    assert header.rstrip().endswith("| imports and each node's kernel twice / onnxruntime (CPU) |")
    row = [c.strip() for c in next(line for line in lines if line.startswith("| onnx_squeezenet")).split("|")[1:-1]]
    assert len(row) == header.count("|") - 1
    verify_cpu, ort_cpu, ratio, twice = float(row[2]), float(row[4]), float(row[6]), float(row[8])
    assert verify_cpu > 0 and ort_cpu > 0 and twice > 0
    # the ratio of the unrounded figures: each printed figure is within 0.005 of its own
    assert abs(ratio - verify_cpu / ort_cpu) <= 0.005 * (1 + ratio) / (ort_cpu - 0.005) + 0.005
    total = next(line for line in lines if line.startswith("| **at most 2 on**"))
    assert total.rstrip().endswith(f"| over 2 on {int(twice > 2)} |")


def test_the_plan_table_has_no_column_of_the_kernels_run_twice():
    out = _bench(BENCH, "--sections", "zoo", "--only", "onnx_squeezenet", "--runs", "1", "--no-doc")
    header = next(line for line in out.stdout.splitlines() if line.startswith("| model"))
    assert "twice" not in header and header.rstrip().endswith("| CPU ratio of each round |")


def test_the_steps_of_one_verify_are_timed_in_one_process(tmp_path):
    """bench/bench_verify_steps.py on a chain of three Relus, each node run again (no work beside):
    every step of the arena run timed once a node, the nodes' sessions built counted."""
    import onnx

    from .helpers import chain

    path = tmp_path / "chain.onnx"
    onnx.save(chain(3), path)
    out = _bench(ROOT / "bench" / "bench_verify_steps.py", str(path), "--alone")
    rows = {c[0]: (float(c[1]), float(c[2]), int(c[3])) for line in out.stdout.splitlines() if line.startswith("| ")
            for c in [[x.strip() for x in line.split("|")[1:-1]]] if c[0] != "step"}
    for step in ("check_inputs", "_binding", "check_write", "check_outputs", "retire", "session"):
        assert rows[step][2] == 3, (step, rows)
    assert rows["run_beside"][2] == 1 and rows["verify (all of it)"][0] > rows["plan_loaded"][0] > 0
    assert rows["session built"][2] >= 1 and "node runs by op type (both runs): Relu" in out.stdout
    # CPU seconds: the thread's own, so a step's never exceed the whole verify's on the main thread
    assert 0 < rows["plan_loaded"][1] <= rows["verify (all of it)"][1]
    assert "reference beside (its thread)" not in rows  # --alone: nothing beside the arena run
    total = re.search(r"process CPU ([0-9.]+) s .*main thread ([0-9.]+)", out.stdout)
    assert total and float(total[1]) >= float(total[2]) >= rows["verify (all of it)"][1], out.stdout


def test_the_machine_line_names_the_processor_generation_and_its_vector_width(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_scale import machine
    finally:
        sys.path.remove(str(ROOT / "bench"))
    zen4 = tmp_path / "zen4"
    zen4.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                    "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 avx512f\n\n"
                    "processor\t: 1\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: other\nflags\t\t: avx\n")
    assert machine(zen4).startswith("AMD EPYC (family 25, model 17, AVX-512), ")
    older = tmp_path / "older"
    older.write_text("cpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel Xeon\nflags\t\t: sse2 avx avx2\n")
    assert machine(older).startswith("Intel Xeon (family 6, model 85, AVX2), ")
    bare = tmp_path / "bare"
    bare.write_text("model name\t: Some CPU\n")
    assert machine(bare).startswith("Some CPU, ")
    assert "logical CPUs" in machine(tmp_path / "missing")


def test_every_kind_of_arena_run_copies_the_same_values():
    """bench/bench_arena_run.py on squeezenet: the run ahead of the reference, the run step by step
    beside the reference's pieces, and the runs where each node runs again (as on CUDA) each copy
    and check the same values, none of those the next node alone reads."""
    rows = []
    for reference in ("whole", "nodes"):
        out = _bench(ROOT / "bench" / "bench_arena_run.py", "--only", "onnx_squeezenet", "--runs", "1",
                     "--reference", reference)
        rows += [[c.strip() for c in line.split("|")[1:-1]] for line in out.stdout.splitlines()
                 if line.startswith("| onnx_squeezenet")]
    assert [r[1] for r in rows] == ["whole, beside", "whole, after", "nodes, beside", "nodes, after"]
    counts = {tuple(r[2:7]) for r in rows}
    assert len(counts) == 1, rows
    ran, written, uncopied, copied, checked = counts.pop()
    assert (int(ran), int(written)) == (66, 0)  # squeezenet: no shape arithmetic
    assert int(uncopied) > 0 and int(copied.split()[0]) > 0 and int(checked.split()[0]) > 0
