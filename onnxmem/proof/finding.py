"""What a proof finds: one way a plan is wrong (:class:`Finding`), shared by every checker of point plans."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxmem.plans.point import MemoryPlan

__all__ = ["Finding", "Lifetimes", "bound_findings", "order_bound_findings"]

#: ``{value: (start, end, last reader)}``: a value's true steps ``[start, end)`` under an order
Lifetimes = Mapping[str, tuple[int, int, "int | None"]]


@dataclass(frozen=True, slots=True)
class Finding:
    """One way the plan is wrong.

    ``kind``: ``order``, ``mismatch``, ``alignment``, ``arena``, ``lifetime``,
    ``alias``, ``overlap``, ``object``, ``concurrency`` (static); ``clobber``, ``address``,
    ``shape``, ``output`` (execution). ``tensor`` is the bad tensor, ``node``
    the node involved, ``byte_range`` arena bytes ``[lo, hi)``.
    """

    kind: str
    tensor: str | None
    message: str
    node: str | None = None
    other: str | None = None
    byte_range: tuple[int, int] | None = None
    graph: str = ""  # the (sub)graph of ``tensor`` and ``node``
    #: rule 9: node names in an order the graph allows that breaks the plan
    schedule: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return self.message



def bound_findings(plan: MemoryPlan) -> list[Finding]:
    """The plan's lower bound above its arena: a claim no plan can meet (no placement uses less
    than the bytes live at its fullest step), so the figures it reports are not the plan's."""
    if plan.lower_bound <= plan.arena_size:
        return []
    return [Finding("arena", None, f"the plan's lower bound {plan.lower_bound:,} B is above its arena of "
                    f"{plan.arena_size:,} B; no plan uses less than the bytes live at its fullest step")]


def order_bound_findings(plan: MemoryPlan) -> list[Finding]:
    """The plan's bound for every order (``extra.any_order_lower_bound``) above its own order's
    bound or the file order's, which it bounds. The provers ask it last, of a plan that breaks no
    other rule: a layout that breaks one often lowers its own bound below it too, and the rule
    it breaks is the finding to read."""
    every = plan.extra.get("any_order_lower_bound")
    if not isinstance(every, int) or isinstance(every, bool):
        return []
    bounds = ((plan.lower_bound, "its own order's bound"),
              (plan.extra.get("file_order_lower_bound"), "the file order's bound"))
    return [Finding("arena", None, f"the plan's bound for every order ({every:,} B, extra.any_order_lower_bound) "
                    f"is above {what} ({own:,} B); a bound for every order holds for each of them: replan the model")
            for own, what in bounds if isinstance(own, int) and not isinstance(own, bool) and every > own]
