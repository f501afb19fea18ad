"""``onnxmem generate``: write a seeded test network as a runnable ONNX model."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line
from onnxmem.core.fileio import OutputSet

from .options import RegistryChoice
from .registries import RANDWIRE_KINDS, all_generators

#: the largest --size of any KIND (attention's tokens); each KIND takes at most its own
#: (:meth:`onnxmem.model.generate.GeneratorInfo.largest`, shown by 'onnxmem list generators')
MAX_SIZE = 100_000


@click.command()
@click.argument("kind", metavar="KIND", type=RegistryChoice("generators"))
@click.argument("output", type=click.Path(dir_okay=False, path_type=str))
@click.option("--size", type=click.IntRange(min=1, max=MAX_SIZE), default=32, show_default=True,
              help="How big: what it counts, and the most it may be, depend on KIND ('onnxmem list "
                   "generators' says).")
@click.option("--graph", "graph_kind", type=RegistryChoice(names=RANDWIRE_KINDS), default="ws",
              show_default=True,
              help="randwire: Watts-Strogatz, Erdos-Renyi (its n^2/10 edges take a smaller --size) or "
                   "Barabasi-Albert.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
def generate(kind: str, output: str, size: int, graph_kind: str, seed: int) -> None:
    """Write a seeded irregular network (KIND) as a runnable ONNX model to OUTPUT.

    KIND: one of 'onnxmem list generators'.
    """
    gen = all_generators()[kind]
    most = gen.largest(graph_kind)
    if size > most:
        with_graph = f" with --graph {graph_kind}" if most != gen.most else ""
        raise click.BadParameter(f"{size:,}: {kind}{with_graph} takes at most {most:,} {gen.size} (a model of a "
                                 f"few hundred MB at most, built in seconds); give --size {most} or less",
                                 param_hint="'--size'")
    outs = OutputSet()
    outs.add(output, "OUTPUT")
    model = gen.build(size, seed, graph_kind)
    outs.put(output, model.SerializeToString())
    outs.commit()
    click.echo(f"{kind:<12} {len(model.graph.node)} nodes -> {one_line(output)}")

