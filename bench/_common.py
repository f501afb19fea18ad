"""Helpers shared by the benchmark scripts: table cells, the machine line and the
replacement of a generated section in a Markdown document."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from onnxmem.core.fileio import write_text_atomic


def mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:.2f}"


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def versions(info: dict[str, Any]) -> str:
    """onnxmem, onnx and onnxruntime versions, cpus and memory from ``onnxmem.zoo.machine_info()``."""
    return (f"onnxmem {info['onnxmem']}, onnx {info['onnx']}, onnxruntime {info['onnxruntime']}, "
            f"{info['cpus']} cpus, {info['memory_gib']} GiB")


def with_errors(lines: list[str], rows: list[dict[str, Any]]) -> str:
    """The table's lines, then a list of the rows' errors if any, as one Markdown text."""
    errors = [f"- **{r['model']}**: {r['error']}" for r in rows if r.get("error")]
    if errors:
        lines = [*lines, "", "Errors:", "", *errors]
    return "\n".join(lines) + "\n"


def replace_section(path: Path, begin: str, end: str, text: str) -> None:
    """Put ``text`` between the ``begin`` and ``end`` markers of the document at ``path``,
    appending the section when the markers are not there yet."""
    doc = path.read_text() if path.exists() else ""
    if begin in doc and end in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}{end}", doc, flags=re.S)
    else:
        doc += f"\n{begin}\n{text}{end}\n"
    write_text_atomic(path, doc)


def publish(path: Path, name: str, text: str, doc: bool = True) -> int:
    """Print a bench's ``text`` and, with ``doc``, put it between the ``<!-- NAME:begin -->`` and
    ``<!-- NAME:end -->`` markers of ``path``; the bench's exit status (0)."""
    if doc:
        replace_section(path, f"<!-- {name}:begin -->", f"<!-- {name}:end -->", text)
    print(text)
    return 0
