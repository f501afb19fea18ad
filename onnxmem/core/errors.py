"""Exception types.

``OnnxmemError`` and its subclasses are problems with the user's input (a file, a
flag, a model); the CLI prints them as one line and exits non-zero. Anything
else that escapes is a bug in onnxmem and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class OnnxmemError(Exception):
    """A user-facing problem: names the object, the rule it broke and the fix."""

    exit_code = 1


class ModelError(OnnxmemError):
    """The model file cannot be read, or its graph breaks an ONNX rule."""


class ShapeError(OnnxmemError):
    """A tensor's size cannot be determined, or is invalid."""


class ProblemError(OnnxmemError):
    """A memory-assignment problem is malformed or cannot be solved as asked."""


class PlanError(OnnxmemError):
    """A plan file is malformed or does not belong to the model."""


class PlanInvalid(OnnxmemError):
    """A plan was checked and is wrong: overlapping live tensors, bad outputs, ..."""

    exit_code = 3


class RuntimeBackendError(OnnxmemError):
    """onnxruntime cannot run what was asked (missing provider, unsupported op)."""


#: characters of a name shown in a message before it is cut
NAME_LIMIT = 200


def show_name(name: object, limit: int = NAME_LIMIT) -> str:
    """``name`` quoted and escaped as ``repr`` does, cut to ``limit`` characters.

    Every string read from a model, plan or CSV file reaches a message through
    this, so a name cannot add lines or terminal control codes to the output.

    >>> show_name("x\\ny")
    "'x\\\\ny'"
    """
    if isinstance(name, bytes):
        name = name.decode("utf-8", "backslashreplace")
    text = str(name)
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(text)


def listed(items: Sequence[T], limit: int, show: Callable[[T], str] = show_name) -> str:
    """The first ``limit`` of ``items``, each as ``show`` writes it, joined by commas, then how many
    more there are: ``'a', 'b' and 3 more``."""
    shown = ", ".join(show(item) for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def flag_value(text: str, also: str = "") -> str:
    """``text`` as it goes into a flag a message offers (``--input-shape NAME=...``): bare when
    it is word characters, ``.:/-`` and ``also``, else quoted by :func:`show_name`."""
    plain = set(".:/-") | set(also)
    return text if text and all(c.isalnum() or c == "_" or c in plain for c in text) else show_name(text)


def one_line(text: str) -> str:
    """``text`` with every non-printable character escaped as ``repr`` does, so it prints as one line.

    The CLI passes every message through this; names inside messages are
    quoted with :func:`show_name` where they are made.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def cut_words(text: str, width: int) -> str:
    """``text`` with its whitespace runs made single spaces, at most ``width`` characters:
    a longer text is cut at the last space that leaves room for ``" ..."``, never inside a
    word (unless its first word alone is longer than that).

    >>> cut_words("Got invalid dimensions\\n index: 0", 26)
    'Got invalid dimensions ...'
    """
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    room = max(width - 4, 1)  # the cut text, then " ..."
    space = text.rfind(" ", 0, room + 1)  # text[space] ends a word within the room
    cut = text[:space] if space > 0 else text[:room]
    return cut.rstrip() + " ..."
