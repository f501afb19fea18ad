"""The static proof a plan passes before it is exported: no unsafe plan leaves onnxmem.

:func:`prove_for_export` refuses (``PlanInvalid``, exit 3 as ``verify`` gives) a
plan that breaks a rule:

* with the model: :func:`onnxmem.proof.plan.prove_plan`, the whole proof that
  ``onnxmem verify --static-only`` runs (order, tensors, lifetimes recomputed
  from the graph, alias legality, bodies); for a plan of the graph onnxruntime builds
  (``plan --optimize``), against that graph, built again from the model and held to the
  plan's record and digest, as ``verify`` builds it;
* without it, the rules the plan alone can be held to
  (:func:`onnxmem.proof.alone.prove_plan_alone`); what needs the graph (the true
  lifetimes, the sharing rules) is not checked then: pass ``--model`` for those.

A range plan: :func:`onnxmem.proof.range.prove_range_plan` on its whole box; a program plan
without its models: :func:`onnxmem.proof.program.prove_program_alone`. ``show``, ``plot`` and
``compare`` hold the plans they read to the same policy: no wrong plan is shown as a plan.
The checkers live in :mod:`onnxmem.proof`; this module is the export's policy: which
checker runs, and the one-line refusal.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from onnxmem.core.errors import PlanInvalid, show_name

if TYPE_CHECKING:
    import onnx

    from onnxmem.plans import MemoryPlan, Program, RangePlan
    from onnxmem.plans.optimization import Optimization

__all__ = ["prove_for_export", "prove_program_for_show", "prove_range_for_export"]


def prove_for_export(plan: MemoryPlan, model: onnx.ModelProto | None = None,
                     model_path: str | os.PathLike[str] | None = None, plan_name: str = "plan", *,
                     action: str = "exporting", refusal: str = "it is not exported") -> tuple[str, ...]:
    """Raise ``PlanInvalid`` naming the first rule ``plan`` breaks (see the module docstring).

    With ``model``: first ``PlanError`` when the plan was made for another model
    (:func:`onnxmem.verify.run.check_plan_identity`); returns its warnings (a re-saved model).
    ``action`` and ``refusal`` word the refusals for a command that reads a plan to do something
    else with it (``"showing"``, ``"it is not shown"``).
    """
    said: tuple[str, ...] = ()
    if model is not None and model_path is not None:
        from onnxmem.plans.optimization import plan_optimization
        from onnxmem.proof.plan import prove_plan
        from onnxmem.verify.run import (  # onnxruntime: only with the model
            check_plan_identity,
            view_for_plan,
        )

        view, said = check_plan_identity(plan, model, model_path, plan_name=plan_name, action=action)
        recorded = plan_optimization(plan.model, f"plan {show_name(plan_name)}")
        if recorded.level != "none":
            found = _rebuilt_findings(plan, model, model_path, plan_name, recorded)
        else:
            view = view if view is not None else view_for_plan(model, plan, model_path)
            found = [str(f) for f in prove_plan(plan, view, limit=1)]
    else:
        from onnxmem.proof.alone import prove_plan_alone  # the plan alone: no onnx loaded

        found = [str(f) for f in prove_plan_alone(plan, limit=1)]
    if found:
        raise PlanInvalid(f"the plan is wrong: {found[0]}; {refusal} "
                          "('onnxmem verify MODEL --plan PLAN --static-only' lists every finding): re-plan the model")
    return said


def _rebuilt_findings(plan: MemoryPlan, model: onnx.ModelProto, model_path: str | os.PathLike[str],
                      plan_name: str, recorded: Optimization) -> list[str]:
    """The first rule a plan of onnxruntime's graph breaks, proven against that graph built again
    from ``model`` at the plan's level for its provider (``PlanError`` where the onnxruntime
    here, the CPU's NCHWc block or the graph's digest differ from the plan's record)."""
    from onnxmem.proof.plan import prove_plan
    from onnxmem.runtime.optimize import check_rebuilt, check_recorded, optimized_model
    from onnxmem.verify.run import view_for_plan

    level = check_recorded(recorded, level=None, device=recorded.provider, plan_name=plan_name)
    with optimized_model(model_path, level, recorded.provider, model=model) as built:
        check_rebuilt(recorded, plan.model.get("graph_sha256"), built, plan_name)
        view = view_for_plan(built.model, plan, built.path, caller=built.caller)
        return [str(f) for f in prove_plan(plan, view, limit=1)]


def prove_range_for_export(plan: RangePlan, refusal: str = "it is not written") -> None:
    """Raise ``PlanInvalid`` when the range plan fails its proof on its box."""
    from onnxmem.proof.range import prove_range_plan

    found = prove_range_plan(plan, limit=1)
    if found:
        raise PlanInvalid(f"the range plan is wrong: {found[0]}; {refusal}: re-plan the model")


def prove_program_for_show(program: Program, refusal: str = "it is not shown") -> None:
    """Raise ``PlanInvalid`` when a program plan breaks a rule it can be held to without its
    models (:func:`onnxmem.proof.program.prove_program_alone`)."""
    from onnxmem.proof.program import prove_program_alone

    found = prove_program_alone(program, limit=1)
    if found:
        raise PlanInvalid(f"the program plan is wrong: {found[0]}; {refusal} ('onnxmem verify A.onnx B.onnx "
                          "--plan PLAN --static-only' lists every finding): re-plan the models")
