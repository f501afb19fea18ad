"""The joint proof of a program plan (:class:`onnxmem.plans.program.Program`).

:func:`prove_program`: each member plan passes the static proof
(:func:`onnxmem.proof.plan.prove_plan`) in the one arena, and every handed-over tensor has
the same offset and size in the plan of the model that writes it and of the model that
reads it. That covers the joint arena: a lifetime crosses from one model to the next only
through a handover, which is live to the end of its writer (a graph output) and from the
start of its reader (a graph input), so the two members' proofs check it against every
tensor of both models. :func:`prove_program_alone` is the same without the models: each
member is held to the rules its plan alone can be held to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from onnxmem.core.errors import show_name
from onnxmem.graph import GraphView
from onnxmem.plans.point import MemoryPlan
from onnxmem.plans.program import Program
from onnxmem.proof.alone import prove_plan_alone
from onnxmem.proof.plan import Finding, prove_plan

__all__ = ["prove_program", "prove_program_alone"]

T = TypeVar("T")


def prove_program(program: Program, views: Sequence[GraphView], *, limit: int | None = None) -> list[Finding]:
    """Every rule the program breaks (the module doc); empty means proven. ``views``: each
    member's model, in the program's order; ``limit``: stop after that many findings."""
    return _prove_members(program, list(zip(program.plans, views)), prove_plan, limit)


def prove_program_alone(program: Program, *, limit: int | None = None) -> list[Finding]:
    """The rules the program breaks that need no model: each member plan passes
    :func:`onnxmem.proof.alone.prove_plan_alone` in the one arena, and the handovers."""
    return _prove_members(program, [(plan, None) for plan in program.plans], lambda plan, _: prove_plan_alone(plan),
                          limit)


def _prove_members(program: Program, members: Sequence[tuple[MemoryPlan, T]],
                   prove: Callable[[MemoryPlan, T], list[Finding]], limit: int | None) -> list[Finding]:
    """Each member's findings by ``prove(plan, its model)`` and its arena, then the handovers'."""
    findings: list[Finding] = []
    for k, (plan, model) in enumerate(members):
        if plan.arena_size != program.arena_size:
            findings.append(Finding("arena", None, f"model {k}'s plan has an arena of {plan.arena_size:,} B, the "
                                    f"program's is {program.arena_size:,} B; they must be one arena"))
        findings.extend(replace(f, message=f"model {k}: {f.message}") for f in prove(plan, model))
    for name, k in sorted(program.handovers.items()):
        out, into = program.plans[k].tensor(name), program.plans[k + 1].tensor(name)
        if (out.offset, out.size) != (into.offset, into.size):
            findings.append(Finding(
                "overlap", name, f"handover {show_name(name)} is written at bytes [{out.offset:,}, "
                f"{out.offset + out.size:,}) by model {k} but read at [{into.offset:,}, {into.offset + into.size:,}) "
                f"by model {k + 1}; a handed-over tensor stays where it was written",
                byte_range=(into.offset, into.offset + into.size)))
    return findings[:limit] if limit else findings
