"""Freed heap pages go back to the system after shape inference (onnxmem.core.memory)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from onnxmem.core import memory

from .helpers import HANG_S

#: a child that fills its heap with 3,000 blocks of 64 KiB (below glibc's mmap threshold, so on
#: the heap itself), frees all but every 50th, and prints its resident MiB at start, after the
#: frees and after release_freed
_CHILD = textwrap.dedent("""
    import os
    from onnxmem.core.memory import release_freed

    def mib():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    start = mib()
    blocks = [b"x" * 65536 for _ in range(3000)]
    kept = blocks[::50]
    del blocks
    freed = mib()
    print(release_freed(), start, freed, mib())
""")


@pytest.mark.skipif(memory._trim() is None, reason="the C library has no malloc_trim (not glibc)")
def test_pages_freed_inside_the_heap_go_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True,
                         timeout=HANG_S).stdout.split()
    done, start, freed, after = out[0], *map(float, out[1:])
    assert done == "True"
    assert freed - start > 150  # freed among kept blocks: the pages stay with the process
    assert freed - after > 150 and after - start < 30  # ... until release_freed gives them back


def test_without_malloc_trim_nothing_is_asked(monkeypatch):
    monkeypatch.setattr(memory, "_trim", lambda: None)
    assert memory.release_freed() is False


@pytest.mark.parametrize("nodes, handed_back", [(3, True), (2, False)], ids=["large", "small"])
def test_a_large_graph_hands_its_freed_pages_back_before_the_proof(tmp_path, monkeypatch, nodes, handed_back):
    """A graph of ``PIECE_NODES`` nodes or more hands the pages the order search and the solver
    freed back to the system before its plan is proven (the proof's tables are the peak of a
    100,000-node plan); a smaller one does not (the few milliseconds are not worth it)."""
    import onnx

    import onnxmem.planning.pipeline as pipeline

    from .helpers import chain

    calls: list[str] = []
    real = pipeline.prove_plan
    monkeypatch.setattr(pipeline, "PIECE_NODES", 3)
    monkeypatch.setattr(pipeline, "release_freed", lambda: calls.append("release") or True)
    monkeypatch.setattr(pipeline, "prove_plan", lambda *a, **k: calls.append("prove") or real(*a, **k))
    path = tmp_path / "chain.onnx"
    onnx.save(chain(nodes), path)
    pipeline.plan_model(path, pipeline.PlanOptions())
    assert calls == (["release", "prove"] if handed_back else ["prove"])
