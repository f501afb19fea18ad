"""Reading input files and writing output files, safely.

Inputs: :func:`read_input` reads a file the user named only when it is a
regular file (after resolving links) no larger than a bound, so a device, a
FIFO or a huge file gives a one-line error instead of a hang or running out of
memory. The file is opened without blocking and checked on the open handle, so
it cannot be swapped for a FIFO between the check and the read.

Outputs: all outputs of one command are written together at the end, or none.
An :class:`OutputSet` checks every output path up front (before any work):

1. the folder exists and the path is not a folder;
2. an existing path is a regular file (a device node or a FIFO is never replaced);
3. the path is neither an input of the command nor another output of it,
   compared after resolving links (and by inode, for hard links).

Each output's bytes are rendered first (:meth:`OutputSet.put`); :meth:`OutputSet.commit`
then writes each to a temporary file beside its target and renames them all
over their targets. A failure before the renames leaves no output and no
temporary file; a failure during them puts back the files already replaced.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

from onnxmem.core.errors import OnnxmemError, show_name

__all__ = [
    "MAX_CSV_BYTES",
    "MAX_DATA_BYTES",
    "MAX_MODEL_BYTES",
    "MAX_PLAN_BYTES",
    "OutputSet",
    "check_input",
    "check_output_path",
    "loads_json",
    "loads_json_streamed",
    "open_input",
    "read_input",
    "remove_temporaries",
    "write_bytes_atomic",
    "write_stream_atomic",
    "write_text_atomic",
]

#: largest model file read: protobuf refuses messages of 2 GiB and more
MAX_MODEL_BYTES = 2**31 - 1
#: largest plan file read
MAX_PLAN_BYTES = 256 * 2**20
#: largest CSV problem file read (a MiniMalloc row is about 30 bytes: room for millions of buffers)
MAX_CSV_BYTES = 128 * 2**20
#: largest other input read (an .npz of inputs, a zoo list, a baseline)
MAX_DATA_BYTES = 2**31


#: most digits of a JSON integer parsed (a reader's range checks then speak of its own bound)
JSON_MAX_DIGITS = 100
#: a run of digits longer than any integer :func:`loads_json` parses (a string may hold one too)
_LONG_DIGITS = re.compile(f"[0-9]{{{JSON_MAX_DIGITS + 1}}}")
#: a JSON escape of a UTF-16 surrogate (half of a pair, or a lone one)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: a surrogate left alone in a parsed string: no character, so no UTF-8 file can hold it
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > JSON_MAX_DIGITS:
        raise ValueError(f"an integer has {len(text.lstrip('-'))} digits, more than {JSON_MAX_DIGITS}")
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (a key given twice is read two ways by two readers)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {show_name(key)} is given twice in one object, which JSON readers read "
                                 "two ways")
            seen.add(key)
    return obj


def _check_text(data: Any) -> None:
    """Refuse a string (a key or a value, at any depth) that holds a lone UTF-16 surrogate."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise ValueError(f"the string {show_name(value)} holds a lone UTF-16 surrogate, which is not text")


def _json_decoder(unique_keys: bool, bounded_ints: bool) -> json.JSONDecoder:
    """The strict decoder of :func:`loads_json` (its hooks: no constants, with ``bounded_ints``
    integers of at most ``JSON_MAX_DIGITS`` digits, with ``unique_keys`` no key twice)."""
    hooks: dict[str, Any] = {"parse_constant": _no_constant}
    if bounded_ints:
        hooks["parse_int"] = _json_int
    if unique_keys:
        hooks["object_pairs_hook"] = _unique_keys
    return json.JSONDecoder(**hooks)


def loads_json(text: str, unique_keys: bool = False) -> Any:
    """JSON from a file a user gave, parsed strictly: no ``NaN`` or ``Infinity``, integers of at
    most ``JSON_MAX_DIGITS`` digits, no string holding a lone UTF-16 surrogate (``"\\ud800"``)
    and, with ``unique_keys``, no key given twice in an object. Every way it fails is a
    ``ValueError`` (``json.JSONDecodeError`` for broken syntax; a nesting too deep for the
    parser says "nests arrays or objects too deep"). The integers' digits are bounded by a hook
    only where a run of more digits is in the text (otherwise each integer would cost a Python
    call), and the strings are looked at only where the text escapes a surrogate."""
    try:
        parsed = _json_decoder(unique_keys, _LONG_DIGITS.search(text) is not None).decode(text)
    except RecursionError:
        raise ValueError("it nests arrays or objects too deep") from None
    if _SURROGATE_ESCAPE.search(text) is not None:  # a pair is one character once parsed: look for a lone one
        _check_text(parsed)
    return parsed


#: the white space JSON allows between tokens
_WS = re.compile(r"[ \t\n\r]*")
#: what follows an element of an array: a comma (group 1) or the array's end (group 2), in white space
_AFTER_ELEMENT = re.compile(r"[ \t\n\r]*(?:(,)|(\]))[ \t\n\r]*")


class _NotStreamed(Exception):
    """The text is not a plain object of the form :func:`loads_json_streamed` walks."""


def loads_json_streamed(text: str, key: str, item: Callable[[Any], Any]) -> dict[str, Any] | None:
    """A JSON object parsed as :func:`loads_json` parses it (``unique_keys``), except that each
    element of its top-level member ``key``, an array, is handed to ``item`` as soon as it is
    parsed and what ``item`` returns is kept in its place: the elements' parsed values are never
    all held at once (a plan's 100,000 tensor objects take 1 KB each, their records a tenth).

    ``item`` sees an element's integers unbounded by ``JSON_MAX_DIGITS`` (the interpreter's
    own bound on the digits it converts holds): it must refuse, with ``ValueError``, one whose
    integers it does not bound itself (the text outside the array is searched for long integers
    as :func:`loads_json` searches it; searching the whole text took 0.45 s of a 38 MB plan).

    ``None`` where the text is anything else (not an object, broken, escaping a UTF-16
    surrogate, nested too deep) or ``item`` raises ``ValueError``: the caller then parses it
    with :func:`loads_json`, which says what is wrong, or passes it."""
    if _SURROGATE_ESCAPE.search(text) is not None:
        return None
    scan = _json_decoder(unique_keys=True, bounded_ints=False).scan_once  # type: ignore[attr-defined]
    string = json.decoder.scanstring  # type: ignore[attr-defined]
    ws: Callable[[str, int], re.Match[str]] = _WS.match  # type: ignore[assignment]  # it matches anywhere
    after = _AFTER_ELEMENT.match
    span = [0, 0]  # where the streamed array is: its integers are item's to bound

    def expect(at: int, char: str) -> int:
        if text[at:at + 1] != char:
            raise _NotStreamed
        return ws(text, at + 1).end()

    def elements(at: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        span[0] = at
        at = expect(at, "[")
        if text[at:at + 1] != "]":
            while True:
                value, at = scan(text, at)
                out.append(item(value))
                sep = after(text, at)
                if sep is None:
                    raise _NotStreamed
                at = sep.end()
                if sep.lastindex == 2:  # "]"
                    break
        else:
            at += 1
        span[1] = at
        return out, at

    try:
        pairs: list[tuple[str, Any]] = []
        at = expect(ws(text, 0).end(), "{")
        if text[at:at + 1] == "}":
            at += 1
        else:
            while True:
                if text[at:at + 1] != '"':
                    raise _NotStreamed
                name, at = string(text, at + 1)
                at = expect(ws(text, at).end(), ":")
                value, at = elements(at) if name == key and text[at:at + 1] == "[" else scan(text, at)
                pairs.append((name, value))
                at = ws(text, at).end()
                if text[at:at + 1] == "}":
                    at += 1
                    break
                at = expect(at, ",")
        if ws(text, at).end() != len(text):
            return None
        if _LONG_DIGITS.search(text, 0, span[0]) or _LONG_DIGITS.search(text, span[1]):
            return None
        return _unique_keys(pairs)
    except (_NotStreamed, StopIteration, ValueError, RecursionError, IndexError):
        return None


def _label(path: str | os.PathLike[str]) -> str:
    return show_name(os.fspath(path))


def _not_a_file(mode: int, folder_fix: str, other_fix: str) -> str | None:
    """Why a path of this ``st_mode`` is not a regular file, with the fix; ``None`` if it is one."""
    if stat.S_ISDIR(mode):
        return f"is a folder; {folder_fix}"
    if not stat.S_ISREG(mode):
        return f"is not a regular file (a device, FIFO or socket); {other_fix}"
    return None


def open_input(path: str | os.PathLike[str], what: str, limit: int, error: type[OnnxmemError],
               *, links: bool = True) -> int:
    """An open descriptor of ``path`` once it is known to be a regular file of at most ``limit`` bytes;
    ``links=False``: not through a link (a file onnxmem found itself, not one the user named)."""
    name = _label(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags if links else flags | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise error(f"cannot read {what} {name}: it does not exist; check the path") from None
    except IsADirectoryError:
        raise error(f"{what} {name} is a folder; give a file") from None
    except ValueError:
        raise error(f"{what} path {name} contains a NUL byte; give a real path") from None
    except OSError as exc:
        if not links and exc.errno == errno.ELOOP:
            raise error(f"{what} {name} is a link, which onnxmem does not follow; give the file itself") from None
        raise error(f"cannot open {what} {name}: {exc.strerror}; check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        why = _not_a_file(info.st_mode, "give a file", "give a file on disk")
        if why is not None:
            raise error(f"{what} {name} {why}")
        if info.st_size > limit:
            raise error(
                f"{what} {name} has {info.st_size:,} bytes, more than the {limit:,} onnxmem "
                "reads; check that it is the right file"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_input(
    path: str | os.PathLike[str],
    what: str,
    limit: int,
    error: type[OnnxmemError] = OnnxmemError,
) -> None:
    """Refuse ``path`` unless it is a regular file of at most ``limit`` bytes (another reader reads it)."""
    os.close(open_input(path, what, limit, error))


def read_input(
    path: str | os.PathLike[str],
    what: str,
    limit: int,
    error: type[OnnxmemError] = OnnxmemError,
    *,
    links: bool = True,
) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    ``what`` names the file in messages (``"model file"``, ``"plan file"``);
    every refusal is an ``error`` that names the path, the rule and the fix.
    ``links=False``: not read through a link (:func:`open_input`).
    """
    fd = open_input(path, what, limit, error, links=links)
    try:
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(
                    f"{what} {_label(path)} grew past the {limit:,} bytes onnxmem reads while it "
                    "was read; check that it is the right file"
                )
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"cannot read {what} {_label(path)}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


@dataclass(slots=True)
class _Output:
    label: str  # the flag or argument that named it, for messages
    given: str  # the path as given
    target: Path  # the path as resolved: what is replaced
    data: bytes | None = None
    writer: Callable[[BinaryIO], object] | None = None  # writes the data itself, in pieces


class OutputSet:
    """The output files of one command: checked first, written together at the end, or none.

    >>> outs = OutputSet(inputs=["model.onnx"])            # doctest: +SKIP
    >>> outs.add("plan.json", "-o")                         # doctest: +SKIP
    >>> outs.put("plan.json", b"{}")                        # doctest: +SKIP
    >>> outs.commit()                                       # doctest: +SKIP
    """

    def __init__(self, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
        self._inputs: list[tuple[str, Path]] = []
        self._outputs: dict[str, _Output] = {}
        for p in inputs:
            self.add_input(p)

    def add_input(self, path: str | os.PathLike[str]) -> None:
        """Declare a file the command reads; no output may be it."""
        self._inputs.append((os.fspath(path), _resolved(path)))
        for out in self._outputs.values():
            self._check_not_input(out)

    def _check_not_input(self, out: _Output) -> None:
        for given, resolved in self._inputs:
            if _same_file(out.target, resolved):
                raise OnnxmemError(
                    f"{out.label} {show_name(out.given)} is the input file {show_name(given)}; "
                    "writing it would destroy the input: choose another output path"
                )

    def add(self, path: str | os.PathLike[str], label: str) -> Path:
        """Check ``path`` as an output named by ``label`` (a flag, e.g. ``-o``); returns it."""
        given = os.fspath(path)
        if not given:
            raise OnnxmemError(f"{label}: the output path is empty; give a file name")
        if "\0" in given:
            raise OnnxmemError(f"{label} {show_name(given)} contains a NUL byte; give a real path")
        if os.path.islink(given):
            raise OnnxmemError(
                f"{label} {show_name(given)} is a symbolic link; onnxmem does not write through "
                "links: give the path of a file itself"
            )
        target = _resolved(given)
        parent = target.parent
        if not parent.is_dir():
            raise OnnxmemError(
                f"{label} {show_name(given)}: folder {show_name(Path(given).parent)} does not exist; "
                "create it or choose another path"
            )
        try:
            info = os.stat(target)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise OnnxmemError(f"{label} {show_name(given)}: {exc.strerror}; choose another path") from None
        why = None if info is None else _not_a_file(
            info.st_mode, "give a file name", "onnxmem never replaces one: choose a file path"
        )
        if why is not None:
            raise OnnxmemError(f"{label} {show_name(given)} {why}")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OnnxmemError(
                f"{label} {show_name(given)}: folder {show_name(str(parent))} is not writable; "
                "choose another path"
            )
        out = _Output(label, given, target)
        self._check_not_input(out)
        for other in self._outputs.values():
            if _same_file(other.target, target):
                raise OnnxmemError(
                    f"{label} {show_name(given)} is also the output of {other.label}; "
                    "give each output its own path"
                )
        self._outputs[given] = out
        return target

    def put(self, path: str | os.PathLike[str], data: bytes | str) -> None:
        """Set the bytes of an output added before (text is written as UTF-8)."""
        out = self._outputs[os.fspath(path)]
        out.data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        out.writer = None

    def put_writer(self, path: str | os.PathLike[str], writer: Callable[[BinaryIO], object]) -> None:
        """Set an output added before to what ``writer`` writes into the open binary file it is given,
        when :meth:`commit` writes it (a long text need not be held whole in memory). Should ``writer``
        raise, the temporary file is removed and no output is written."""
        out = self._outputs[os.fspath(path)]
        out.data = None
        out.writer = writer

    def commit(self) -> None:
        """Write every output: all to temporary files first, then rename each over its target."""
        missing = [o.label for o in self._outputs.values() if o.data is None and o.writer is None]
        if missing:  # a caller bug, not a user error
            raise RuntimeError(f"outputs without data: {', '.join(missing)}")
        for out in self._outputs.values():  # the inputs may have been named since add()
            self._check_not_input(out)
        temps: list[tuple[_Output, str]] = []
        try:
            for out in self._outputs.values():
                _write_temp(out, temps)
            _rename_all(temps)
        except BaseException:
            for _, tmp in temps:
                _unlink(tmp)
            raise


def _write_temp(out: _Output, temps: list[tuple[_Output, str]]) -> None:
    """``out``'s bytes in a new file beside its target, named in ``temps`` before it is made: an
    interruption at any point (a signal's exception between two steps) leaves no file the caller
    does not remove. The name holds this process's id and random bytes, and the file is made only
    where none is (``O_EXCL``), so the name removed is never another's."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(out.target.parent, f".{out.target.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
        temps.append((out, tmp))
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            temps.pop()  # another file's name: not ours to remove
        except OSError as exc:
            temps.pop()
            raise OnnxmemError(f"cannot write {out.label} {show_name(out.given)}: {exc.strerror}") from None
    else:
        raise OnnxmemError(f"cannot write {out.label} {show_name(out.given)}: no free temporary name beside it")
    try:
        with os.fdopen(fd, "wb") as fh:
            if out.writer is not None:
                out.writer(fh)
            else:
                fh.write(out.data or b"")
            fh.flush()
            os.fsync(fh.fileno())
        # made 0600 (none may read it half written); give it the mode an ordinary open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except OSError as exc:
        raise OnnxmemError(f"cannot write {out.label} {show_name(out.given)}: {exc.strerror}") from None


def _rename_all(temps: list[tuple[_Output, str]]) -> None:
    """Rename each temporary file over its target; on a failure, put the old files back. Each
    rename is recorded before it is made (its temporary file still there says it was not), so an
    interruption between the two is undone too."""
    # (target, its temporary file, the name of a hard link to its old content or None)
    renamed: list[tuple[Path, str, str | None]] = []
    try:
        for out, tmp in temps:
            try:
                info = os.stat(out.target)
            except FileNotFoundError:
                info = None
            if info is not None and not stat.S_ISREG(info.st_mode):
                raise OnnxmemError(
                    f"{out.label} {show_name(out.given)} became a non-regular file while onnxmem "
                    "ran; onnxmem never replaces one: choose a file path"
                )
            backup = None if info is None else tmp + ".old"
            renamed.append((out.target, tmp, backup))
            if backup is not None:
                try:
                    os.link(out.target, backup)
                except OSError:
                    renamed[-1] = (out.target, tmp, None)
            try:
                os.replace(tmp, out.target)
            except OSError as exc:
                raise OnnxmemError(
                    f"cannot write {out.label} {show_name(out.given)}: {exc.strerror}"
                ) from None
    except BaseException:
        for target, tmp, old in reversed(renamed):
            if os.path.lexists(tmp):  # not renamed: the target is as it was
                if old:
                    _unlink(old)
            elif old:
                try:
                    os.replace(old, target)
                except OSError:
                    _unlink(old)
            else:
                _unlink(str(target))
        raise
    for _, _, old in renamed:
        if old:
            _unlink(old)


def remove_temporaries(folder: str | os.PathLike[str], pid: int) -> None:
    """Remove the temporary files that process ``pid``, stopped while it wrote outputs into
    ``folder``, left there (:class:`OutputSet` names them ``.NAME.PID.HEX.tmp``, and a backup
    link ``.NAME.PID.HEX.tmp.old``): the files of no other process match."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    mark = f".{pid}."
    for name in names:
        if name.startswith(".") and mark in name and name.endswith((".tmp", ".tmp.old")):
            _unlink(os.path.join(folder, name))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def check_output_path(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Fail early, before any work, when ``path`` cannot be an output (see :class:`OutputSet`)."""
    return OutputSet().add(path, what)


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes, what: str = "output",
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Write one output file atomically, with the checks of :class:`OutputSet`."""
    outs = OutputSet(inputs)
    outs.add(path, what)
    outs.put(path, data)
    outs.commit()


def write_stream_atomic(
    path: str | os.PathLike[str], writer: Callable[[BinaryIO], object], what: str = "output",
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Write one output file atomically from what ``writer`` writes into it (see
    :meth:`OutputSet.put_writer`), with the checks of :class:`OutputSet`."""
    outs = OutputSet(inputs)
    outs.add(path, what)
    outs.put_writer(path, writer)
    outs.commit()


def write_text_atomic(
    path: str | os.PathLike[str], text: str, what: str = "output",
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), what, inputs)
