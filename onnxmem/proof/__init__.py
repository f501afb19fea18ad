"""Static checkers of plans, independent of the planner.

Each checker takes a plan (and what it needs besides) and returns every rule the plan
breaks, as findings with a ``kind`` (the rule) whose ``str`` is a one-line message; an
empty list means proven. ``limit`` (keyword) stops after that many findings.

* :func:`prove_plan` (:mod:`onnxmem.proof.plan`): a point plan against its model's graph;
* :func:`prove_plan_alone` (:mod:`onnxmem.proof.alone`): a point plan without its model;
* :func:`prove_range_plan` (:mod:`onnxmem.proof.range`): a range plan on its whole box;
* :func:`prove_program` (:mod:`onnxmem.proof.program`): a program plan's joint arena;
* :func:`prove_program_alone` (:mod:`onnxmem.proof.program`): a program plan without its models.

Each name loads its module on first use (:mod:`onnxmem.core.lazy`): ``plan`` of one point
imports neither the range nor the program checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.proof.alone import prove_plan_alone
    from onnxmem.proof.plan import Finding, prove_plan, true_lifetimes, walk_bodies
    from onnxmem.proof.program import prove_program, prove_program_alone
    from onnxmem.proof.range import RangeFinding, prove_range_plan

__all__ = ["Finding", "RangeFinding", "prove_plan", "prove_plan_alone", "prove_program", "prove_program_alone",
           "prove_range_plan",
           "true_lifetimes", "walk_bodies"]

_EXPORTS = {
    "Finding": "onnxmem.proof.plan",
    "RangeFinding": "onnxmem.proof.range",
    "prove_plan": "onnxmem.proof.plan",
    "prove_plan_alone": "onnxmem.proof.alone",
    "prove_program": "onnxmem.proof.program",
    "prove_program_alone": "onnxmem.proof.program",
    "prove_range_plan": "onnxmem.proof.range",
    "true_lifetimes": "onnxmem.proof.plan",
    "walk_bodies": "onnxmem.proof.plan",
}

__getattr__ = lazy_attributes(globals(), _EXPORTS)
