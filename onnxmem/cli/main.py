"""The ``onnxmem`` command group and its error handling.

Each command lives in a module of its own (:data:`COMMANDS`), imported only when the command
runs or its help is shown, so that ``onnxmem --help`` imports neither onnx, onnxruntime,
numpy nor numba. User errors (``OnnxmemError``) become one line on stderr and the error's exit
code; anything else is a bug and keeps its traceback. Standard output that cannot be written (a
full device: ``> /dev/full``) is one line on stderr and exit 1; a reader that closed the pipe
(``| head -c1``) ends the command quietly with exit 1, as click does.
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import click

from onnxmem import __version__
from onnxmem.core.classcode import compiled_once
from onnxmem.core.errors import OnnxmemError, one_line

#: command name -> the module that defines it, as ``module:attribute``
COMMANDS: dict[str, str] = {
    "compare": "onnxmem.cli.compare:compare",
    "export": "onnxmem.cli.export:export",
    "fit": "onnxmem.cli.fit:fit",
    "generate": "onnxmem.cli.generate:generate",
    "instantiate": "onnxmem.cli.instantiate:instantiate",
    "list": "onnxmem.cli.listing:list_command",
    "pack": "onnxmem.cli.pack:pack",
    "plan": "onnxmem.cli.plan:plan",
    "plot": "onnxmem.cli.plot:plot",
    "show": "onnxmem.cli.show:show",
    "verify": "onnxmem.cli.verify:verify",
    "zoo": "onnxmem.cli.zoo:zoo",
}


#: the cyclic garbage collector's thresholds while a command runs (Python's are 700, 10, 10).
#: A command allocates millions of small objects that are not garbage (the view, the order
#: search's and the liveness's records, the plan), and with Python's thresholds the collector
#: walks them again and again: on the 100,000-node chain a quarter of ``plan``'s time, on
#: swin_t_legacy a sixth, on the smallest models 0.02 s of the start. The memory a command's
#: cycles hold meanwhile is small (the same peak resident size on those graphs). The middle
#: generation is collected after 100 young collections: at 20 it was collected three times in
#: ``plan`` of the 100,000-node transformer, each a walk of up to a million survivors, 0.1 CPU s in
#: all for the same peak resident size; runs of many models still collect, now and then, what
#: outlived a young collection. A larger young threshold saves little more and holds more (at
#: 1,000,000 the 100,000-node chain's peak grew by 5 MiB).
GC_THRESHOLDS = (50_000, 100, 100)

#: whether :func:`loading` moves what it imports to the collector's permanent generation: set while
#: a command runs in a process that had frozen nothing of its own (:meth:`LazyGroup.main`)
_FREEZE = False


@contextmanager
def loading() -> Iterator[None]:
    """Import a command's modules with the cyclic collector paused, and keep what they made out of
    its sight afterwards.

    What imports make (functions, classes, module namespaces: some 50,000 objects for numpy,
    onnx and the planner) lives until the process ends, and none of it is garbage; the collector
    walked all of it in a young collection and again in the collection at exit (together about
    0.05 CPU s of ``plan``'s start). After the block every object of the process goes to the
    permanent generation (``gc.freeze``), which collections leave alone; :meth:`LazyGroup.main`
    moves them back when the command returns (``gc.unfreeze``), and the entry point
    (:func:`run`) leaves them there, as the process ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _FREEZE:
            gc.freeze()
        if enabled:
            gc.enable()


class LazyGroup(click.Group):
    """A group whose commands are imported when first used (click's "lazily loading
    subcommands"); an ``OnnxmemError`` from any of them is shown as one line. While it runs,
    the garbage collector uses :data:`GC_THRESHOLDS`, and the dataclasses its modules define
    take their methods' code from the store compiled at install (:mod:`onnxmem.core.classcode`);
    both are restored when it returns."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.lazy_commands.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        module, _, attr = where.partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{where} is not a click command")
        return command

    def main(self, *args: Any, **kwargs: Any) -> Any:
        global _FREEZE
        if "numpy" not in sys.modules:  # its BLAS starts a spinning thread per core, which nothing here uses
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        before, freezes = gc.get_threshold(), gc.get_freeze_count() == 0 and not _FREEZE
        gc.set_threshold(*GC_THRESHOLDS)
        _FREEZE = _FREEZE or freezes
        try:
            with compiled_once():
                return super().main(*args, **kwargs)
        except OSError as exc:  # click ends the command quietly for a closed pipe (EPIPE) itself
            if not _writing_stdout(exc):
                raise
            click.echo(f"error: cannot write to standard output: {one_line(exc.strerror or str(exc))}; "
                       "send it to a file or device with room", err=True)
            _stdout_to_null()
            sys.exit(1)
        finally:
            gc.set_threshold(*before)
            if freezes:
                _FREEZE = False
                gc.unfreeze()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OnnxmemError as exc:
            click.echo(f"error: {one_line(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except MemoryError:  # in this process (the child reports its own): a value too large for the memory left
            command = ctx.invoked_subcommand or "the command"
            click.echo(f"error: onnxmem ran out of memory during {command}; "
                       f"{_MEMORY_FIX.get(command, _MEMORY_FIX[''])} or run it where more memory is free", err=True)
            sys.exit(1)


def _writing_stdout(exc: OSError) -> bool:
    """Whether ``exc`` came from writing standard output: raised in :func:`click.echo` (where every
    line of the commands, their help and the version are written) called without ``err``. A closed
    pipe is click's to handle (it exits quietly)."""
    if exc.errno == errno.EPIPE:
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is click.utils.echo.__code__ and not tb.tb_frame.f_locals.get("err")


def _stdout_to_null() -> None:
    """Point standard output at the null device, so that the flush at exit finds nothing to fail on."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):  # no file descriptor (a test's captured stream): nothing is flushed to one
        pass


#: what to give a command that ran out of memory in its own process, by command ("": one that reads a model)
_MEMORY_FIX = {
    "": "give smaller input shapes (--input-shape, --dim)",
    "pack": "give a problem with fewer buffers live at once (the solvers keep, for each buffer, the buffers "
            "live beside it: n x n where all n are)",
    **{c: "give a smaller plan file" for c in ("show", "plot", "export", "instantiate")},
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnxmem")
def main() -> None:
    """Plan the activation memory of an ONNX model ahead of time, and prove the plan."""


def run() -> None:
    """The ``onnxmem`` command's entry point: :func:`main`, then the process ends with its objects
    in the collector's permanent generation (the collection at exit has nothing to walk).

    SIGTERM (``kill``, a job's time limit) ends the command as Ctrl-C does: the ``with`` blocks
    unwind, so the temporary folders (the graph onnxruntime optimized, the outputs not yet
    moved into place) are removed, and the exit code is 143. A child process forked from this
    one keeps the default action."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
        os.register_at_fork(after_in_child=_default_sigterm)
    try:
        main()
    finally:
        gc.freeze()


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM in the command's process: unwind, as Ctrl-C does, and exit 128 + the signal."""
    _default_sigterm()  # a second SIGTERM ends the process at once
    raise SystemExit(128 + signum)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
