"""``verify`` with shape arithmetic written from the reference (the default) against ``verify
--every-node``, on every zoo model: how many nodes each hands over, that both verify, and the
CPU seconds of each whole process.

    python bench/bench_handed.py [--runs N] [--only NAME[,NAME...]] [--no-doc]

Each model's two commands take turns for ``--runs`` rounds after an uncounted first run of each
(``bench_speed.taking_turns``); the CPU seconds are each process's and its children's, the
medians. A command that exits non-zero, or prints no ``verified``, stops the bench. The table
goes to docs/verify.md between its markers (not with ``--no-doc``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402
from bench_scale import machine  # noqa: E402
from bench_speed import ENV, onnxmem, taking_turns  # noqa: E402

DOC = ROOT / "docs" / "verify.md"


def _executed(cmd: list[str]) -> tuple[int, int]:
    """Nodes run in the arena and nodes handed over, from the ``executed`` line of ``cmd``, which
    must exit 0 and print ``verified``."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=900)
    if out.returncode != 0 or "verified" not in out.stdout.splitlines():
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {(out.stdout + out.stderr).strip()[-400:]}")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("executed"))
    words = line.split()
    handed = int(line.split(", ")[1].split()[0]) if "of shape arithmetic" in line else 0
    return int(words[1]), handed


def rows(tmp: Path, runs: int, only: str | None) -> list[str]:
    from onnxmem.zoo import load_zoo
    from onnxmem.zoo.fixtures import materialize

    lines = ["| model | nodes run | handed over | nodes run, `--every-node` | CPU s | CPU s, `--every-node` | "
             "ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for entry in load_zoo(ROOT / "models" / "zoo"):
        if only and entry.name not in only.split(","):
            continue
        folder = tmp / entry.name
        path = materialize(entry.path, folder)
        flags = [a for k, v in entry.dims.items() for a in ("--dim", f"{k}={v}")]
        cmds = {"handed": onnxmem("verify", str(path), *flags), "every": onnxmem("verify", str(path), *flags,
                                                                                 "--every-node")}
        (run, handed), (every, none) = _executed(cmds["handed"]), _executed(cmds["every"])
        if none or run + handed != every:
            raise RuntimeError(f"{entry.name}: {run} run and {handed} handed over, against {every} run and "
                               f"{none} handed over with --every-node")
        fig, _ = taking_turns(runs, cmds, warm=False)  # _executed ran each once
        a, b = fig["handed"]["cpu"], fig["every"]["cpu"]
        lines.append(f"| {entry.name} | {run:,} | {handed:,} | {every:,} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
        shutil.rmtree(folder, ignore_errors=True)  # (the onnx wheel's models are read where they are)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds in which the two commands take turns")
    ap.add_argument("--only", default=None, help="zoo models, by name, comma-separated")
    ap.add_argument("--no-doc", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    started, t0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.perf_counter()
    where = machine()
    with tempfile.TemporaryDirectory(prefix="onnxmem-handed-") as tmp:
        lines = rows(Path(tmp), args.runs, args.only)
    command = "python bench/bench_handed.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = "\n".join([
        f"- command: `{command}` (whole run {time.perf_counter() - t0:.0f} s)",
        f"- date: {started}",
        f"- machine: {where}",
        "",
        "`verify MODEL` (shape arithmetic written from the reference) and `verify MODEL --every-node` on every "
        "zoo model, each a whole process, both verified; CPU seconds the medians of the rounds in which the two "
        "take turns:",
        "",
        *lines, ""])
    return publish(DOC, "bench-handed", text, doc=not args.no_doc)


if __name__ == "__main__":
    sys.exit(main())
