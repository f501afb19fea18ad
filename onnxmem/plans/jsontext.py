"""Plan JSON text: ``json.dumps(value, indent=1)``, byte for byte, in a fraction of its time.

The standard library's C encoder runs only without ``indent``; with it, every value goes
through a Python generator (about 8% of ``plan -o`` on a 100,000-node graph). :func:`dumps`
writes the same text with one append per token: strings through the C string escaper
(``ensure_ascii``, as ``json.dumps``), integers and floats by their ``repr`` (``NaN`` and
``Infinity`` as ``json.dumps`` writes them), tuples as arrays; an array of strings alone or
of integers alone (a plan's order, a shape) is one join of its items. It also takes a
generator as an array, so that a writer can stream a long list of records without holding
them all at once. :func:`dump` writes the same text into a binary file as it goes, its
tokens gathered in a list and written out joined after each streamed record once the list
is long: the whole text is never held in memory. What ``json.dumps`` refuses (a numpy
integer or array, bytes, a set) it refuses too, with ``TypeError``.

    >>> dumps({"a": [1, 2], "b": {}})
    '{\\n "a": [\\n  1,\\n  2\\n ],\\n "b": {}\\n}'
"""

from __future__ import annotations

import io
import math
from json.encoder import encode_basestring_ascii
from types import GeneratorType
from typing import Any, BinaryIO, Callable

__all__ = ["dump", "dumps", "flat", "register"]

#: tokens :func:`dump` gathers before it writes them out (a record of scalars is one token of a few
#: hundred bytes: a 100,000-node plan's tensors go out in chunks of about a MB)
_CHUNK = 1 << 12


def _float(value: float) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it (always a JSON string: a scalar's JSON, quoted)."""
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    text = _scalar(key)
    if text is None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
    return f'"{text}"'


def _scalar(value: Any) -> str | None:
    """The JSON of a scalar (``None`` when ``value`` is a container)."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


#: the writers of records of other types (:func:`register`), by type
_WRITERS: dict[type, Callable[[Any, str], Any]] = {}


def register(kind: type, writer: Callable[[Any, str], Any]) -> None:
    """Write each value of type ``kind`` (not one of the types JSON has, which are written as
    they are) by ``writer(value, pad)``: it returns the value's JSON text
    as :func:`dumps` writes it at that indent (``pad``: a newline and the value's own indent),
    or, for a value it does not write itself, something else for :func:`dumps` to write in its
    place (a dict). For a plan's 100,000 tensor records, a record's text in one formatting of
    its fields took a fifth of the time of its dict written key by key."""
    _WRITERS[kind] = writer


def _encode(value: Any, pad: str, put: Callable[[str], object], spill: Callable[[], object] = int) -> None:
    """Put the JSON of ``value`` token by token; ``spill`` is called after each item of a
    generator (where :func:`dump` writes out what it has gathered)."""
    kind = type(value)
    if kind is str:
        put(encode_basestring_ascii(value))
        return
    if kind is int:
        put(int.__repr__(value))
        return
    if kind is dict:
        if not value:
            put("{}")
            return
        inner = pad + " "
        one = _flat_record(value, inner)
        if one is not None:
            put(one)
            return
        sep = "{" + inner
        for k, v in value.items():
            head = sep + (encode_basestring_ascii(k) if type(k) is str else _key(k)) + ": "
            sep = "," + inner
            text = _plain(v)  # the plain scalars of a record in the same token as their key
            if text is not None:
                put(head + text)
            else:
                put(head)
                _encode(v, inner, put, spill)
        put(pad + "}")
        return
    if kind is list or kind is tuple:
        one = flat(value, pad + " ")
        if one is not None:
            put(one)
            return
    text = _scalar(value)
    if text is not None:
        put(text)
        return
    writer = _WRITERS.get(kind)  # after the JSON types: every value passes here, few are records
    if writer is not None:
        written = writer(value, pad)
        if type(written) is str:
            put(written)
        else:
            _encode(written, pad, put, spill)
        return
    if isinstance(value, dict):
        _encode(dict(value), pad, put, spill)
        return
    if not isinstance(value, (list, tuple, GeneratorType)):
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    inner = pad + " "
    sep = "[" + inner
    streamed = kind is GeneratorType
    for v in value:
        put(sep)
        _encode(v, inner, put, spill)
        sep = "," + inner
        if streamed:
            spill()
    put("[]" if sep[0] == "[" else pad + "]")


def _plain(value: Any) -> str | None:
    """The JSON of a string, an integer (not a bool) or ``None``, the scalars of a plan's
    records; ``None`` for anything else (:func:`_scalar` writes every scalar)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    return "null" if value is None else None


def _flat_record(record: dict[Any, Any], inner: str) -> str | None:
    """The JSON of a non-empty dict of string keys whose values are strings, integers, ``None``
    or arrays :func:`flat` writes (a plan's tensor), in one string; ``None`` for any other.
    The keys' text, separators and indent included, is made once per set of keys and depth."""
    keys = tuple(record)
    heads = _HEADS.get((keys, inner))
    if heads is None:
        if not all(type(k) is str for k in keys):
            return None
        sep = "," + inner
        heads = [sep + encode_basestring_ascii(k) + ": " for k in keys]
        heads[0] = "{" + heads[0][1:]
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        _HEADS[(keys, inner)] = heads
    parts: list[str] = []
    deeper = inner + " "
    for head, v in zip(heads, record.values()):
        text = _plain(v)
        vt = type(v)
        if text is not None:
            parts.append(head + text)
        elif vt is list or vt is tuple:
            text = flat(v, deeper) if v else "[]"
            if text is None:
                return None
            parts.append(head + text)
        else:
            return None
    parts.append(inner[:-1] + "}")
    return "".join(parts)


#: the key tokens of the records :func:`_flat_record` wrote, by their keys and depth
_HEADS: dict[tuple[tuple[str, ...], str], list[str]] = {}
#: the most sets of keys :data:`_HEADS` holds (it starts again when full)
_MAX_HEADS = 256


def flat(items: list[Any] | tuple[Any, ...], inner: str) -> str | None:
    """The JSON of a non-empty array of strings alone or of integers alone, in one string (its
    items need no recursion); ``None`` for any other array."""
    if not items:
        return None
    kind = type(items[0])
    if kind is str:
        encode: Callable[[Any], str] = encode_basestring_ascii
    elif kind is int:
        encode = int.__repr__
    else:
        return None
    if not all(type(v) is kind for v in items):
        return None
    return "[" + inner + ("," + inner).join(map(encode, items)) + inner[:-1] + "]"


def dumps(value: Any) -> str:
    """``json.dumps(value, indent=1)`` (a generator is an array too)."""
    out = io.StringIO()  # grows one buffer: a list of the tokens took 3x the text's memory
    _encode(value, "\n", out.write)
    return out.getvalue()


def dump(value: Any, fh: BinaryIO) -> None:
    """Write ``dumps(value)`` into the binary file ``fh`` (UTF-8, as ASCII), in chunks: the
    tokens are gathered in a list and written out, joined, every :data:`_CHUNK` tokens."""
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    parts: list[str] = []

    def spill() -> None:
        if len(parts) >= _CHUNK:
            text.write("".join(parts))
            parts.clear()

    try:
        _encode(value, "\n", parts.append, spill)
        text.write("".join(parts))
        text.flush()
    finally:
        text.detach()  # leave ``fh`` open: its owner closes it
