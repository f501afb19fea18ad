"""The ``c`` format: a C header with the arena size and each tensor's offset and size.

For a C (C99) or C++ program that lays the plan out in one static buffer::

    #include "plan.h"
    static unsigned char arena[ONNXMEM_ARENA_SIZE];
    float *x = (float *)(arena + ONNXMEM_OFFSET_x);     /* ONNXMEM_SIZE_x bytes */

What the header holds:

1. a comment with the model's sha256 and the plan's schema version (and no
   other text from the plan);
2. a header guard, ``ONNXMEM_PLAN_H``;
3. ``ONNXMEM_SCHEMA_VERSION``, ``ONNXMEM_ARENA_SIZE``, ``ONNXMEM_ALIGNMENT`` and
   ``ONNXMEM_TENSOR_COUNT``;
4. per tensor, in the plan's tensor order, ``ONNXMEM_OFFSET_<id>`` and
   ``ONNXMEM_SIZE_<id>`` (bytes), where ``<id>`` is :func:`c_identifiers`' name
   for the tensor;
5. ``onnxmem_tensors[]``, a ``static const`` table of ``{name, offset, size, graph}``
   in the same order, with each tensor's exact name as a C string literal, and
   ``graph`` the path of the If/Loop/Scan body holding it (``""`` in the main
   graph): two sibling bodies may each hold a tensor of one name.

Names come from the model file and are untrusted: identifiers keep only
``[A-Za-z0-9_]`` (every other character becomes ``_``), are cut to 48
characters and made unique with a ``_2``, ``_3``, ... suffix (in place of their last
characters: at most 48 with it, so unique in the 63 characters C99 compares); string literals
escape every byte outside printable ASCII, and ``"``, ``\\`` and ``?``, as
three-digit octal; no name is written into a comment. A name of more than
4,095 UTF-8 bytes (the longest string literal C99 promises to compile) is an
array of character constants instead, ``onnxmem_name_<i>[]`` for table row
``i``, that the row points to. A name with a NUL byte is refused: a C string
ends there, so the table could not name the tensor.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from onnxmem.core.errors import PlanError, show_name
from onnxmem.export.registry import register
from onnxmem.plans.point import MemoryPlan

if TYPE_CHECKING:
    import onnx

__all__ = ["c_header", "c_identifiers", "c_string"]

#: longest identifier part kept from a tensor name (the prefix comes on top)
MAX_IDENT = 48

#: the longest string literal, in bytes, that a C99 compiler must accept (gcc -pedantic refuses longer)
MAX_C_STRING = 4095

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def c_identifiers(names: Sequence[str]) -> list[str]:
    """One unique C identifier part per name, in order, of at most ``MAX_IDENT`` characters
    (a suffix shortens the name before it), so that with a 15-character prefix every
    identifier is unique in its first 63 characters, all C99 promises to compare.

    >>> c_identifiers(["conv/out", "conv.out", "", "x"])
    ['conv_out', 'conv_out_2', 'tensor', 'x']

    Each base remembers the last suffix it took, so names that all become one base
    take linear time, not quadratic.
    """
    used: set[str] = set()
    last: dict[str, int] = {}  # base -> the last suffix number tried
    out: list[str] = []
    for name in names:
        base = _NOT_IDENT.sub("_", name)[:MAX_IDENT] or "tensor"
        ident, k = base, last.get(base, 1)
        while ident in used:
            k += 1
            sfx = f"_{k}"
            ident = base[:MAX_IDENT - len(sfx)] + sfx
        last[base] = k
        used.add(ident)
        out.append(ident)
    return out


def c_string(text: str) -> str:
    """``text`` as a C string literal of its UTF-8 bytes.

    Printable ASCII is kept as is, except ``"``, backslash and ``?`` (which
    could start a trigraph); every other byte becomes a three-digit octal escape.
    """
    parts = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if 0x20 <= byte < 0x7F and ch not in '"\\?':
            parts.append(ch)
        else:
            parts.append(f"\\{byte:03o}")
    return '"' + "".join(parts) + '"'


def name_bytes(name: str, what: str = "plan tensor", owner: str = "tensor") -> bytes:
    """The UTF-8 bytes of a name a C string can hold; ``PlanError`` for one it cannot (``owner``:
    what to rename in the model)."""
    try:
        data = name.encode("utf-8")
    except UnicodeEncodeError:
        raise PlanError(f"{what} {show_name(name)} is not Unicode text (it holds a lone surrogate), "
                        "so it is no name of an ONNX model: re-plan the model") from None
    if b"\0" in data:
        raise PlanError(f"{what} {show_name(name)} holds a NUL byte, where a C string ends: the header "
                        f"cannot name it; rename the {owner} in the model, or export --format json or tflm")
    return data


def _c_char_array(ident: str, data: bytes) -> list[str]:
    """``static const char ident[] = {...};``: ``data`` and a NUL as character constants (no
    length limit, unlike a string literal), bytes outside ``[A-Za-z0-9_]`` in octal."""
    chars = [f"'{chr(b)}'" if chr(b).isascii() and (chr(b).isalnum() or b == 0x5F) else f"'\\{b:03o}'"
             for b in data] + ["0"]
    rows = [", ".join(chars[i:i + 16]) for i in range(0, len(chars), 16)]
    return [f"static const char {ident}[] ONNXMEM_UNUSED = {{"] + [f"    {r}," for r in rows] + ["};"]


def _table(plan: MemoryPlan) -> list[str]:
    """``onnxmem_tensors[]``, after the arrays of the names and graph paths too long for a literal."""
    lines: list[str] = []
    graphs: dict[str, str] = {}  # graph path -> its C expression

    def text(value: str, ident: str, what: str, owner: str) -> str:
        data = name_bytes(value, what, owner)
        if len(data) <= MAX_C_STRING:
            return c_string(value)
        lines.extend(_c_char_array(ident, data) + [""])
        return ident

    rows = []
    for i, t in enumerate(plan.tensors):
        name = text(t.name, f"onnxmem_name_{i}", "plan tensor", "tensor")
        if t.graph not in graphs:
            graphs[t.graph] = text(t.graph, f"onnxmem_graph_{len(graphs)}", "plan graph path", "node")
        rows.append(f"    {{{name}, {int(t.offset)}u, {int(t.size)}u, {graphs[t.graph]}}},")
    return [*lines, "static const onnxmem_tensor onnxmem_tensors[ONNXMEM_TENSOR_COUNT] ONNXMEM_UNUSED = {", *rows, "};"]


@register("c", "a C header: arena size, then each tensor's offset and size (#defines and a table)",
          suffix=".h")
def c_header(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    sha = str(plan.model.get("sha256", ""))
    sha = sha if _SHA256.fullmatch(sha) else "unknown"
    ids = c_identifiers([t.name for t in plan.tensors])
    lines = [
        "/* Memory plan written by onnxmem export --format c. Do not edit.",
        f" * model sha256: {sha}",
        f" * plan schema version: {int(plan.schema_version)}",
        " * Offsets and sizes are bytes from the start of one arena of ONNXMEM_ARENA_SIZE bytes.",
        " */",
        "#ifndef ONNXMEM_PLAN_H",
        "#define ONNXMEM_PLAN_H",
        "",
        f"#define ONNXMEM_SCHEMA_VERSION {int(plan.schema_version)}",
        f"#define ONNXMEM_ARENA_SIZE {int(plan.arena_size)}u",
        f"#define ONNXMEM_ALIGNMENT {int(plan.alignment)}u",
        f"#define ONNXMEM_TENSOR_COUNT {len(plan.tensors)}u",
        "",
    ]
    for t, ident in zip(plan.tensors, ids):
        lines.append(f"#define ONNXMEM_OFFSET_{ident} {int(t.offset)}u")
        lines.append(f"#define ONNXMEM_SIZE_{ident} {int(t.size)}u")
    lines += [
        "",
        "#if defined(__GNUC__)",
        "#define ONNXMEM_UNUSED __attribute__((unused))",
        "#else",
        "#define ONNXMEM_UNUSED",
        "#endif",
        "",
        "typedef struct onnxmem_tensor {",
        "    const char *name;          /* the tensor's name in the model, exactly (UTF-8) */",
        "    unsigned long long offset; /* bytes from the start of the arena */",
        "    unsigned long long size;   /* bytes */",
        "    const char *graph;         /* \"\" in the main graph, else the path of the body holding it */",
        "} onnxmem_tensor;",
        "",
    ]
    lines += _table(plan) if plan.tensors else ["/* the plan places no tensors: no table (C has no empty arrays) */"]
    lines += ["", "#endif /* ONNXMEM_PLAN_H */", ""]
    return "\n".join(lines).encode("ascii")
