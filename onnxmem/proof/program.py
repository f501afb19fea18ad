"""The joint proof of a program plan (:class:`onnxmem.plans.program.Program`).

:func:`prove_program`: each member plan passes the static proof
(:func:`onnxmem.proof.plan.prove_plan`) in the one arena, and every handed-over tensor has
the same offset and size in the plan of the model that writes it and of the model that
reads it. That covers the joint arena: a lifetime crosses from one model to the next only
through a handover, which is live to the end of its writer (a graph output) and from the
start of its reader (a graph input), so the two members' proofs check it against every
tensor of both models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from onnxmem.core.errors import show_name
from onnxmem.graph import GraphView
from onnxmem.plans.program import Program
from onnxmem.proof.plan import Finding, prove_plan

__all__ = ["prove_program"]


def prove_program(program: Program, views: Sequence[GraphView], *, limit: int | None = None) -> list[Finding]:
    """Every rule the program breaks (the module doc); empty means proven. ``views``: each
    member's model, in the program's order; ``limit``: stop after that many findings."""
    findings: list[Finding] = []
    for k, (plan, view) in enumerate(zip(program.plans, views)):
        if plan.arena_size != program.arena_size:
            findings.append(Finding("arena", None, f"model {k}'s plan has an arena of {plan.arena_size:,} B, the "
                                    f"program's is {program.arena_size:,} B; they must be one arena"))
        findings.extend(replace(f, message=f"model {k}: {f.message}") for f in prove_plan(plan, view))
    for name, k in sorted(program.handovers.items()):
        out, into = program.plans[k].tensor(name), program.plans[k + 1].tensor(name)
        if (out.offset, out.size) != (into.offset, into.size):
            findings.append(Finding(
                "overlap", name, f"handover {show_name(name)} is written at bytes [{out.offset:,}, "
                f"{out.offset + out.size:,}) by model {k} but read at [{into.offset:,}, {into.offset + into.size:,}) "
                f"by model {k + 1}; a handed-over tensor stays where it was written",
                byte_range=(into.offset, into.offset + into.size)))
    return findings[:limit] if limit else findings
