"""The ``onnxmem`` command line: the only module that prints or exits.

Each command parses its flags, calls the library, and prints the result. User
errors (``OnnxmemError``) become one line on stderr and the error's exit code;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from . import __version__
from .errors import OnnxmemError


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an ``OnnxmemError`` into a one-line message and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OnnxmemError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnxmem")
def main() -> None:
    """Plan the activation memory of an ONNX model ahead of time, and prove the plan."""


# -- end of commands --
