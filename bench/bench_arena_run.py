"""The arena run of ``verify`` alone, in one process: what it costs the system.

For each zoo model (``models/zoo``, weights filled in by ``onnxmem.zoo.fixtures.materialize``)
the model is planned, then :meth:`onnxmem.runtime.arena.ArenaRun.run` (every node in the arena,
its checks, the whole-model reference in pieces) runs once with the reference beside the arena
run on a thread of its own and once after it on the same thread, each in a fresh process
(``--reference nodes``: each node run again outside the arena as its reference, as on CUDA, with
its node sessions built beside or not). The table gives the nodes run in the arena and those of
shape arithmetic whose values are written there instead (:mod:`onnxmem.runtime.handover`), the
values whose bytes the run copies aside as they are written and the inputs whose bytes it
checks before a node reads them (on CUDA each is a copy from the device to the host), then the
call's minor page faults, system and user CPU seconds (``getrusage`` of the process around the
call) and wall seconds, the median of ``--runs``.

    python bench/bench_arena_run.py --only swin_t_legacy,nasnetalarge --runs 3
    python bench/bench_arena_run.py --only nasnetalarge,mobilenet_v2 --reference nodes

To compare two versions of onnxmem, run it with ``PYTHONPATH`` set to each checkout in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import json, resource, sys, time
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime import arena
from onnxmem.runtime.isolation import run_limits
from onnxmem.verify.run import VerifyOptions

path, beside, reference, dims = sys.argv[1], sys.argv[2] == "beside", sys.argv[3], json.loads(sys.argv[4])
import onnxmem
print(onnxmem.__file__, file=sys.stderr)
p = plan_model(path, PlanOptions(dims=dims))
with run_limits(isolate=False):
    run = arena.ArenaRun(p.plan, p.model, p.view, VerifyOptions(beside=beside, reference=reference), path)
    moved = {"kept": 0, "kept_bytes": 0, "checked": 0, "checked_bytes": 0}
    def counted(fn, key):
        def wrapped(slot):
            moved[key] += 1
            moved[key + "_bytes"] += slot.size
            return fn(slot)
        return wrapped
    run._keep, run._peek = counted(run._keep, "kept"), counted(run._peek, "checked")
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    ex = run.run()
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
assert not ex.findings and ex.reference == reference, (ex.findings, ex.reference)
print(json.dumps({"faults": r1.ru_minflt - r0.ru_minflt, "sys": r1.ru_stime - r0.ru_stime,
                  "user": r1.ru_utime - r0.ru_utime, "wall": t1 - t0,
                  "uncopied": len(run.unkept), "run": ex.nodes_run, "handed": ex.nodes_handed, **moved}))
'''


def measure(path: Path, beside: bool, reference: str = "whole", dims: dict[str, int] | None = None) -> dict[str, float]:
    """One run in a fresh process (``dims``: the zoo's binding of the model's symbolic dims)."""
    out = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(path), "beside" if beside else "after", reference,
                          json.dumps(dims or {})],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="swin_t_legacy,nasnetalarge,pnasnet5large_legacy,mobilenet_v2",
                        help="zoo models, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reference", choices=("whole", "nodes"), default="whole",
                        help="the reference: one whole-model run in pieces, or each node run again")
    opts = parser.parse_args(argv)
    from onnxmem.zoo import load_zoo
    from onnxmem.zoo.fixtures import materialize

    wanted = opts.only.split(",")
    entries = {e.name: e for e in load_zoo(ROOT / "models" / "zoo")}
    print(f"onnxmem from {Path(sys.modules['onnxmem'].__file__).parent.parent}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| model | reference | nodes run in the arena | nodes written there | values not copied | values copied (MB) | "
          "inputs checked (MB) | minor page faults | system CPU s | user CPU s | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            path = materialize(entries[name].path, Path(tmp) / name)
            for beside in (True, False):
                runs = [measure(path, beside, opts.reference, entries[name].dims) for _ in range(opts.runs)]
                def med(k: str, runs: list[dict[str, float]] = runs) -> float:
                    return statistics.median(r[k] for r in runs)
                print(f"| {name} | {opts.reference}, {'beside' if beside else 'after'} | {med('run'):,.0f} | "
                      f"{med('handed'):,.0f} | {med('uncopied'):,.0f} | "
                      f"{med('kept'):,.0f} ({med('kept_bytes') / 1e6:,.1f}) | "
                      f"{med('checked'):,.0f} ({med('checked_bytes') / 1e6:,.1f}) | "
                      f"{med('faults'):,.0f} | {med('sys'):.2f} | "
                      f"{med('user'):.2f} | {med('wall'):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
