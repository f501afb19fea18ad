"""A command's whole work in its onnxruntime child process, its lines printed here.

A command that runs onnxruntime does so in its child process
(:mod:`onnxmem.runtime.isolation`), which loads numpy, onnx and onnxruntime for that.
:func:`run_in_child` sends the rest of the command's work there too (reading and
planning the model, the proof, the report's lines), so that this process loads none of
them and the model, its plan and its graph view never cross the pipe. What the work
prints comes back as text and is printed here, stdout and stderr in the order written;
stderr goes straight to the terminal where this process has one (the progress lines).
An ``OnnxmemError`` is raised here after the lines printed before it, so the exit code
is the one the command gives in one process; a crash of onnxruntime is the one-line
error of :func:`onnxmem.runtime.isolation.run_isolated`. The work runs under the garbage
collector's thresholds of the command's process (``onnxmem.cli.main.GC_THRESHOLDS``).
"""

from __future__ import annotations

import gc
import io
import sys
from collections.abc import Callable
from contextlib import nullcontext, redirect_stderr, redirect_stdout
from typing import Any, TypeVar, cast

import click

from onnxmem.core.errors import OnnxmemError

__all__ = ["run_in_child"]

T = TypeVar("T")


def run_in_child(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` in this command's child process (:func:`~onnxmem.runtime.isolation.run_isolated`:
    ``fn`` at module level, its arguments and result picklable), what it prints printed here."""
    from onnxmem.runtime.isolation import run_isolated

    chunks, result, error = run_isolated(_captured, fn, sys.stderr.isatty(), args, gc.get_threshold())
    for err, text in chunks:
        click.echo(text, nl=False, err=err)
    if error is not None:
        raise error
    return cast(T, result)


class _Sink(io.StringIO):
    """A text stream whose writes go to a list shared with the other stream, tagged with which."""

    def __init__(self, chunks: list[tuple[bool, str]], err: bool) -> None:
        super().__init__()
        self.chunks, self.err = chunks, err

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("a text stream")
        self.chunks.append((self.err, text))
        return len(text)


def _captured(fn: Callable[..., T], live_stderr: bool, args: tuple[Any, ...],
              thresholds: tuple[int, ...] | None = None) -> tuple[list[tuple[bool, str]], T | None, Exception | None]:
    """In the child: ``fn(*args)`` with its output kept; ``(chunks, result, error)``. ``thresholds``:
    the garbage collector's, as the command's process has them (``onnxmem.cli.main.GC_THRESHOLDS``)."""
    chunks: list[tuple[bool, str]] = []
    err = nullcontext() if live_stderr else redirect_stderr(_Sink(chunks, True))
    before = gc.get_threshold()
    if thresholds:
        gc.set_threshold(*thresholds)
    with redirect_stdout(_Sink(chunks, False)), err:
        try:
            return chunks, fn(*args), None
        except OnnxmemError as exc:
            return chunks, None, exc
        except click.UsageError as exc:  # its context does not cross the pipe
            return chunks, None, click.UsageError(exc.format_message())
        except click.ClickException as exc:
            return chunks, None, click.ClickException(exc.format_message())
        finally:
            gc.set_threshold(*before)
