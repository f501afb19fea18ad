"""``onnxmem list``: every name the flags accept, from the library's registries."""

from __future__ import annotations

import click

from .registries import LISTINGS


@click.command("list")
@click.argument("what", type=click.Choice(list(LISTINGS)), required=False)
def list_command(what: str | None) -> None:
    """Name every solver, order, export format and generator, with what each does.

    WHAT: only that kind. The names are the choices of --solver, --order,
    export --format and generate KIND.
    """
    for i, kind in enumerate([what] if what else LISTINGS):
        entries = LISTINGS[kind]()
        width = max(map(len, entries), default=0)
        click.echo(("\n" if i else "") + f"{kind}:")
        for name, summary in entries.items():
            click.echo(f"  {name:<{width}}  {summary}")

