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
``[A-Za-z0-9_]`` (every other character becomes ``_``), with each run of ``_`` made one and
none at either end (so no name the header defines holds ``__``, which C++ reserves, and none
would start with ``_`` and a capital, which C reserves), are cut to 48
characters and made unique with a ``_2``, ``_3``, ... suffix (in place of their last
characters: at most 48 with it, so unique in the 63 characters C99 compares); string literals
escape every byte outside printable ASCII, and ``"``, ``\\`` and ``?``, as
three-digit octal; no name is written into a comment. A name of more than
4,095 UTF-8 bytes (the longest string literal C99 promises to compile) is an
array of character constants instead, ``onnxmem_name_<i>[]`` for table row
``i``, that the row points to. A name with a NUL byte is refused: a C string
ends there, so the table could not name the tensor.

A name prefix (:func:`c_prefix`, ``--prefix enc``) replaces ``onnxmem`` in every name the
header defines: the guard ``ENC_PLAN_H``, the macros ``ENC_...`` (the prefix in upper
case), the type ``enc_tensor``, the table ``enc_tensors`` and the name arrays (in lower
case), so headers of several plans, each with its own prefix, go into one translation
unit. Without one the names are ``ONNXMEM_``/``onnxmem_``, as above.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from onnxmem.core.errors import OnnxmemError, PlanError, show_name
from onnxmem.export.registry import register_prefixed
from onnxmem.plans.point import MemoryPlan

if TYPE_CHECKING:
    import onnx

__all__ = ["DEFAULT_PREFIX", "MAX_PREFIX", "c_header", "c_identifiers", "c_prefix", "c_string", "ident_limit"]

#: longest identifier part kept from a tensor name (the prefix comes on top)
MAX_IDENT = 48

#: the longest string literal, in bytes, that a C99 compiler must accept (gcc -pedantic refuses longer)
MAX_C_STRING = 4095

#: the characters of an identifier with internal linkage, or of a macro name, a C99 compiler compares
C99_SIGNIFICANT = 63

#: the prefix of the names a header defines when none is given: ``ONNXMEM_`` macros, ``onnxmem_`` names
DEFAULT_PREFIX = "onnxmem"

#: the longest text a header puts between its prefix and a tensor's identifier part
_OFFSET = "_OFFSET_"

#: the fewest characters a tensor's identifier part may be cut to, to leave room for a long prefix
MIN_IDENT = 24

#: the longest prefix: ``<PREFIX>_OFFSET_<id>`` keeps ``MIN_IDENT`` characters of a tensor's name in 63
MAX_PREFIX = C99_SIGNIFICANT - len(_OFFSET) - MIN_IDENT

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
_UNDERSCORES = re.compile(r"__+")
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def c_identifiers(names: Sequence[str], limit: int = MAX_IDENT) -> list[str]:
    """One unique C identifier part per name, in order, of at most ``limit`` characters
    (a suffix shortens the name before it), so that with a 15-character prefix
    (``ONNXMEM_OFFSET_``, :func:`ident_limit` for another) every identifier is unique in
    its first 63 characters, all C99 promises to compare.

    >>> c_identifiers(["conv/out", "conv.out", "", "x"])
    ['conv_out', 'conv_out_2', 'tensor', 'x']

    An identifier starts with a letter or digit, holds no ``__`` and does not end in ``_``: after
    the prefix's ``_`` (``ONNXMEM_OFFSET_``) none makes a name C or C++ reserves.

    >>> c_identifiers(["_Foo", "a__b", "x/", "x."])
    ['Foo', 'a_b', 'x', 'x_2']

    Each base remembers the last suffix it took, so names that all become one base
    take linear time, not quadratic.
    """
    used: set[str] = set()
    last: dict[str, int] = {}  # base -> the last suffix number tried
    out: list[str] = []
    for name in names:
        base = _UNDERSCORES.sub("_", _NOT_IDENT.sub("_", name)).strip("_")[:limit].rstrip("_") or "tensor"
        ident, k = base, last.get(base, 1)
        while ident in used:
            k += 1
            sfx = f"_{k}"
            ident = base[:limit - len(sfx)].rstrip("_") + sfx
        last[base] = k
        used.add(ident)
        out.append(ident)
    return out


def c_prefix(prefix: str | None) -> str:
    """The name prefix of a C header, checked: ``prefix``, or :data:`DEFAULT_PREFIX` for ``None``.

    The header writes it in upper case before its macros and in lower case before its other
    names (so ``Enc`` and ``enc`` name the same symbols). ``OnnxmemError`` for a prefix that is
    not a C identifier, starts with ``_`` (C reserves those names), makes a name holding
    ``__`` (C++ reserves those: the header compiles as C++ too), or is longer than
    :data:`MAX_PREFIX` characters.

    >>> c_prefix("enc"), c_prefix(None)
    ('enc', 'onnxmem')
    """
    if prefix is None:
        return DEFAULT_PREFIX
    shown = show_name(prefix, 80)
    if prefix.startswith("_"):
        raise OnnxmemError(f"--prefix {shown} starts with '_': C reserves such names at file scope; "
                           "start the prefix with a letter (e.g. --prefix enc)")
    if not _PREFIX.fullmatch(prefix):
        raise OnnxmemError(f"--prefix {shown} is not a C identifier: use ASCII letters, digits and '_', "
                           "starting with a letter (e.g. --prefix enc)")
    if "__" in prefix + "_":
        raise OnnxmemError(f"--prefix {shown} makes names holding '__', which C++ reserves (the header "
                           "adds one '_' after the prefix); leave out the doubled or trailing '_'")
    if len(prefix) > MAX_PREFIX:
        raise OnnxmemError(
            f"--prefix {shown} has {len(prefix)} characters: C99 compares only the first {C99_SIGNIFICANT} of a "
            f"name, and <PREFIX>{_OFFSET}<tensor> must keep {MIN_IDENT} of them for the tensor's name; "
            f"give a prefix of at most {MAX_PREFIX} characters")
    return prefix


def ident_limit(prefix: str) -> int:
    """The most characters of a tensor's identifier part beside ``prefix``: ``MAX_IDENT``, less what a
    prefix longer than ``onnxmem`` needs for ``<PREFIX>_OFFSET_<id>`` to fit in 63 characters."""
    return min(MAX_IDENT, C99_SIGNIFICANT - len(_OFFSET) - len(prefix))


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


def _c_char_array(ident: str, data: bytes, up: str) -> list[str]:
    """``static const char ident[] = {...};``: ``data`` and a NUL as character constants (no
    length limit, unlike a string literal), bytes outside ``[A-Za-z0-9_]`` in octal."""
    chars = [f"'{chr(b)}'" if chr(b).isascii() and (chr(b).isalnum() or b == 0x5F) else f"'\\{b:03o}'"
             for b in data] + ["0"]
    rows = [", ".join(chars[i:i + 16]) for i in range(0, len(chars), 16)]
    return [f"static const char {ident}[] {up}_UNUSED = {{"] + [f"    {r}," for r in rows] + ["};"]


def _table(plan: MemoryPlan, prefix: str) -> list[str]:
    """``<prefix>_tensors[]``, after the arrays of the names and graph paths too long for a literal."""
    low, up = prefix.lower(), prefix.upper()
    lines: list[str] = []
    graphs: dict[str, str] = {}  # graph path -> its C expression

    def text(value: str, ident: str, what: str, owner: str) -> str:
        data = name_bytes(value, what, owner)
        if len(data) <= MAX_C_STRING:
            return c_string(value)
        lines.extend(_c_char_array(ident, data, up) + [""])
        return ident

    rows = []
    for i, t in enumerate(plan.tensors):
        name = text(t.name, f"{low}_name_{i}", "plan tensor", "tensor")
        if t.graph not in graphs:
            graphs[t.graph] = text(t.graph, f"{low}_graph_{len(graphs)}", "plan graph path", "node")
        rows.append(f"    {{{name}, {int(t.offset)}u, {int(t.size)}u, {graphs[t.graph]}}},")
    return [*lines, f"static const {low}_tensor {low}_tensors[{up}_TENSOR_COUNT] {up}_UNUSED = {{", *rows, "};"]


@register_prefixed("c", "a C header: arena size, then each tensor's offset and size (#defines and a table)",
                   suffix=".h")
def c_header(plan: MemoryPlan, model: onnx.ModelProto | None, prefix: str | None = None) -> bytes:
    """The header's bytes (ASCII), its names prefixed with ``prefix`` (:func:`c_prefix`)."""
    prefix = c_prefix(prefix)
    low, up = prefix.lower(), prefix.upper()
    sha = str(plan.model.get("sha256", ""))
    sha = sha if _SHA256.fullmatch(sha) else "unknown"
    ids = c_identifiers([t.name for t in plan.tensors], ident_limit(prefix))
    lines = [
        "/* Memory plan written by onnxmem export --format c. Do not edit.",
        f" * model sha256: {sha}",
        f" * plan schema version: {int(plan.schema_version)}",
        f" * Offsets and sizes are bytes from the start of one arena of {up}_ARENA_SIZE bytes.",
        " */",
        f"#ifndef {up}_PLAN_H",
        f"#define {up}_PLAN_H",
        "",
        f"#define {up}_SCHEMA_VERSION {int(plan.schema_version)}",
        f"#define {up}_ARENA_SIZE {int(plan.arena_size)}u",
        f"#define {up}_ALIGNMENT {int(plan.alignment)}u",
        f"#define {up}_TENSOR_COUNT {len(plan.tensors)}u",
        "",
    ]
    for t, ident in zip(plan.tensors, ids):
        lines.append(f"#define {up}_OFFSET_{ident} {int(t.offset)}u")
        lines.append(f"#define {up}_SIZE_{ident} {int(t.size)}u")
    lines += [
        "",
        "#if defined(__GNUC__)",
        f"#define {up}_UNUSED __attribute__((unused))",
        "#else",
        f"#define {up}_UNUSED",
        "#endif",
        "",
        f"typedef struct {low}_tensor {{",
        "    const char *name;          /* the tensor's name in the model, exactly (UTF-8) */",
        "    unsigned long long offset; /* bytes from the start of the arena */",
        "    unsigned long long size;   /* bytes */",
        "    const char *graph;         /* \"\" in the main graph, else the path of the body holding it */",
        f"}} {low}_tensor;",
        "",
    ]
    lines += (_table(plan, prefix) if plan.tensors
              else ["/* the plan places no tensors: no table (C has no empty arrays) */"])
    lines += ["", f"#endif /* {up}_PLAN_H */", ""]
    return "\n".join(lines).encode("ascii")
