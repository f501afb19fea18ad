"""Build a large offset-assignment instance from shipped ones, each copy after the last in time.

    python tools/tile_instances.py OUT.csv IN.csv:COPIES [IN.csv:COPIES ...]

Copies never overlap in time, so the instance's lower bound is the largest bound
among its parts; the buffer count is the sum. Used for the memory figure of a
62k-buffer instance in docs/solvers.md (the 62k-buffer trace itself is not shipped):

    python tools/tile_instances.py /tmp/tiled_62k.csv \\
        ../shared/benchmarks/idealloc/iopddl_S_1.csv:2 ../shared/benchmarks/idealloc/somas_resnet50.csv:5
"""

from __future__ import annotations

import argparse
from pathlib import Path

from onnxmem.core.problem import Buffer, Problem, read_csv, write_csv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("parts", nargs="+", metavar="IN.csv:COPIES")
    args = ap.parse_args()
    tiled: list[Buffer] = []
    shift = 0
    for part in args.parts:
        path, _, copies = part.rpartition(":")
        if not path or not copies.isdigit() or int(copies) < 1:
            raise SystemExit(f"tile_instances: {part!r} is not IN.csv:COPIES (COPIES a positive integer)")
        problem, _ = read_csv(path)
        span = max(b.end for b in problem.buffers) + 1
        for _ in range(int(copies)):
            for b in problem.buffers:
                tiled.append(Buffer(str(len(tiled)), b.start + shift, b.end + shift, b.size))
            shift += span
    write_csv(Problem(tuple(tiled)), args.out)
    print(f"{args.out}: {len(tiled)} buffers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
