"""What the stored dataclass method code saves a command (``onnxmem.core.classcode``).

Each command runs as a user runs it, in a process of its own, with the store
(``onnxmem/core/_classcode.<interpreter>.bin``, written by ``make install``) and without it
(``ONNXMEM_CLASSCODE=off``), the two alternating ``--runs`` times after an uncounted first
run of each; the table gives the median CPU seconds (user + system, the process's and its
children's) of each and their ratio, and, from the same command run again with
``dataclasses._process_class`` timed in its process, how many dataclasses it makes and the
median CPU milliseconds that takes with and without the store (the part the store changes,
free of the rest of the run's noise). It is written between the ``bench-classcode`` markers
of docs/speed.md::

    python bench/bench_classcode.py            # make bench-classcode
    python bench/bench_classcode.py --runs 3 --no-doc
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402

from onnxmem.core.classcode import STORE, SWITCH, load  # noqa: E402

DOC = ROOT / "docs" / "speed.md"
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", SWITCH)}
#: zoo models planned (the smallest ones, where start-up is most of the run) and verified
PLANNED = ("onnx_squeezenet", "onnx_shufflenet", "randwire_ws", "mobilenet_v2", "swin_t_legacy")
VERIFIED = ("onnx_squeezenet",)


def cpu_of(args: list[str], off: bool) -> float:
    """CPU seconds of ``python -P -m onnxmem ARGS`` (``bench_speed.timed``), which must exit 0."""
    from bench_speed import timed

    return timed([sys.executable, "-P", "-m", "onnxmem", *args], {**ENV, SWITCH: "off"} if off else ENV)["cpu"]


#: the command line run with the CPU time spent making dataclasses (``dataclasses._process_class``)
#: summed and printed at exit: ``classes SECONDS COUNT`` on stderr
_PROBE = r"""
import atexit, dataclasses, sys, time
made, spent = [0], [0.0]
real = dataclasses._process_class
def timed(*args, **kwargs):
    t = time.process_time()
    try:
        return real(*args, **kwargs)
    finally:
        spent[0] += time.process_time() - t
        made[0] += 1
dataclasses._process_class = timed
atexit.register(lambda: print(f"classes {spent[0]:.6f} {made[0]}", file=sys.stderr))
sys.argv = ["onnxmem", *sys.argv[1:]]
from onnxmem.cli.main import run
run()
"""


def class_seconds(args: list[str], off: bool) -> tuple[float, int]:
    """CPU seconds a command spends making dataclasses, and how many it makes."""
    env = {**ENV, SWITCH: "off"} if off else ENV
    out = subprocess.run([sys.executable, "-P", "-c", _PROBE, *args], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=True)
    _, seconds, count = out.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(count)


def commands(tmp: Path) -> dict[str, list[str]]:
    from onnxmem.zoo import load_zoo
    from onnxmem.zoo.fixtures import materialize

    out: dict[str, list[str]] = {}
    entries = {e.name: e for e in load_zoo(ROOT / "models" / "zoo")}
    for name in PLANNED:
        path = materialize(entries[name].path, tmp / name)
        out[f"plan {name} -o plan.json"] = ["plan", str(path), "-o", str(tmp / "plan.json")]
    for name in VERIFIED:
        path = materialize(entries[name].path, tmp / name)
        out[f"verify {name}"] = ["verify", str(path)]
    small = tmp / "small.csv"
    small.write_text("id,lower,upper,size\na,0,2,64\nb,1,3,128\nc,2,4,64\n")
    out["pack small.csv"] = ["pack", str(small)]
    out["--help"] = ["--help"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="alternated runs of each command, with and without")
    parser.add_argument("--no-doc", action="store_true", help="print the table only")
    opts = parser.parse_args(argv)
    stored = len(load())
    if not stored:
        print(f"error: {STORE.name} is missing or unreadable; run `make install` (or "
              "`python -m onnxmem.core.classcode`) first", file=sys.stderr)
        return 2
    start = time.time()
    from bench_scale import machine

    where = machine()  # with the load average at the start
    lines = ["| command | CPU s without the store | CPU s with it | with / without | range without | range with | "
             "dataclasses made | CPU ms making them, without | with |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="onnxmem-classcode-") as tmp:
        for label, args in commands(Path(tmp)).items():
            cpu_of(args, off=True)
            cpu_of(args, off=False)
            off, on, c_off, c_on = [], [], [], []
            count = 0
            for _ in range(opts.runs):
                off.append(cpu_of(args, off=True))
                on.append(cpu_of(args, off=False))
                seconds, count = class_seconds(args, off=True)
                c_off.append(seconds)
                c_on.append(class_seconds(args, off=False)[0])
            a, b = statistics.median(off), statistics.median(on)
            lines.append(f"| `{label}` | {a:.3f} | {b:.3f} | {b / a:.2f} | {min(off):.3f}-{max(off):.3f} | "
                         f"{min(on):.3f}-{max(on):.3f} | {count} | {1000 * statistics.median(c_off):.1f} | "
                         f"{1000 * statistics.median(c_on):.1f} |")
            print(lines[-1], flush=True)
    header = [
        f"- command: `python bench/bench_classcode.py --runs {opts.runs}` (whole run {time.time() - start:.0f} s)",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))}",
        f"- machine: {where}",
        f"- store: {STORE.name}, {stored} texts",
        "",
    ]
    text = "\n".join([*header, *lines]) + "\n"
    return publish(DOC, "bench-classcode", text, not opts.no_doc)


if __name__ == "__main__":
    sys.exit(main())
