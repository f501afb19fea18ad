"""Verifying a program plan: the joint proof, then the models run one after the other in one arena."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnxmem.core.errors import PlanError, RuntimeBackendError
from onnxmem.graph import GraphView
from onnxmem.model import check_loops_end
from onnxmem.plans.program import Program
from onnxmem.proof.plan import Finding
from onnxmem.proof.program import prove_program
from onnxmem.runtime.ort import load_with_weights
from onnxmem.runtime.training import execute_in_one_arena, no_kernel_error
from onnxmem.verify.run import VerifyOptions, check_plan_identity, view_for_plan

if TYPE_CHECKING:
    import onnx

    from onnxmem.runtime.arena import Execution

__all__ = ["ProgramReport", "verify_program"]


@dataclass(frozen=True, slots=True)
class ProgramReport:
    """What :func:`verify_program` found: the joint static proof, each model's run in the one
    arena (``None`` when not run), and warnings (a re-saved model)."""

    static: tuple[Finding, ...]
    executions: tuple[Execution, ...] | None
    views: tuple[GraphView, ...]
    warnings: tuple[str, ...]

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.static + tuple(f for ex in self.executions or () for f in ex.findings)


def verify_program(program: Program, models: Sequence[tuple[onnx.ModelProto, str]], *,
                   options: VerifyOptions, plan_name: str | None = None,
                   views: Sequence[GraphView | None] | None = None) -> ProgramReport:
    """Prove ``program`` for ``models`` (``(model, path)`` in run order) and, when that holds
    and ``options.execute``, run them one after the other in one arena
    (:func:`onnxmem.runtime.training.execute_in_one_arena`). ``plan_name``: check first
    that each member plan was made for its model (:func:`onnxmem.verify.run.check_plan_identity`)."""
    if len(models) != len(program.plans):
        raise PlanError(f"the program plan holds {len(program.plans)} plans, for {len(models)} models given; give "
                        "the models it was made for, in its order")
    given = list(views) if views is not None else [None] * len(models)
    warnings: list[str] = []
    built: list[GraphView] = []
    for k, ((model, path), plan) in enumerate(zip(models, program.plans)):
        view = given[k]
        if plan_name is not None:
            view, said = check_plan_identity(plan, model, path, plan_name=f"{plan_name} (model {k})", view=view)
            warnings.extend(said)
        built.append(view if view is not None else view_for_plan(model, plan, path))
    static = tuple(prove_program(program, built))
    executions = None
    if options.execute and not static:
        for model, _ in models:
            check_loops_end(model.graph)
        runs = [(plan, load_with_weights(model, path), view)
                for (model, path), plan, view in zip(models, program.plans, built)]
        try:
            _, done = execute_in_one_arena(runs, options=options, handovers=program.handovers)
        except RuntimeBackendError as exc:  # no kernel for a gradient op: one line that says so
            raise no_kernel_error(exc, options.device) from None
        executions = tuple(done)
    return ProgramReport(static, executions, tuple(built), tuple(warnings))
