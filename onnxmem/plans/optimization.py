"""What a plan records of the graph it planned: the model as written, or the graph onnxruntime
built from it (``onnxmem plan --optimize LEVEL --device DEVICE``).

The record lives in the plan's ``model`` object as ``optimization`` (point plans, the point
plans of a program plan, and range plans alike), beside ``graph_sha256``, the digest of the
optimized graph's files. A plan without it was made for the graph as written (level
``none``), which holds on every provider and every onnxruntime version. A plan at another
level holds for the graph that onnxruntime ``onnxruntime`` builds at ``level`` for
``provider``; at ``all`` on CPU a graph with ops of the NCHWc layout also depends on its
block size (``nchwc_block``, the vector width of the machine's MLAS kernels: 8 with AVX2,
16 with AVX-512).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxmem.core.choices import DEVICES, OPTIMIZE_LEVELS
from onnxmem.core.errors import PlanError, flag_value, show_name

__all__ = ["AS_WRITTEN", "Optimization", "plan_optimization"]


@dataclass(frozen=True, slots=True)
class Optimization:
    """The graph a plan was made for: ``level`` (one of ``OPTIMIZE_LEVELS``) for ``provider``
    (``cpu`` or ``cuda``) by onnxruntime version ``onnxruntime``; ``nchwc_block``: the NCHWc
    block size the CPU graph at ``all`` was laid out for (``None`` elsewhere, and for a graph
    without NCHWc ops)."""

    level: str = "none"
    provider: str = "cpu"
    onnxruntime: str = ""
    nchwc_block: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``optimization`` object of the plan's ``model``."""
        d: dict[str, Any] = {"level": self.level, "provider": self.provider, "onnxruntime": self.onnxruntime}
        if self.nchwc_block is not None:
            d["nchwc_block"] = self.nchwc_block
        return d

    @property
    def kernels(self) -> str:
        """Whose kernel declarations the plan's in-place sharing may use
        (:attr:`onnxmem.graph.GraphView.kernels`): every provider's for the graph as written,
        the provider's own for the graph onnxruntime built for it."""
        return "" if self.level == "none" else self.provider

    def describe(self) -> str:
        """``all for cpu by onnxruntime 1.31.1, NCHWc block 16`` (``as written`` at level none)."""
        if self.level == "none":
            return "the graph as written"
        block = f", NCHWc block {self.nchwc_block}" if self.nchwc_block is not None else ""
        return f"level {self.level} for {self.provider} by onnxruntime {flag_value(self.onnxruntime)}{block}"


#: the record of a plan of the graph as written
AS_WRITTEN = Optimization()


def plan_optimization(model: dict[str, Any], where: str = "plan") -> Optimization:
    """The :class:`Optimization` recorded in a plan's ``model`` object (:data:`AS_WRITTEN`
    without one); ``PlanError`` when it is malformed."""
    found = model.get("optimization")
    digest = model.get("graph_sha256")
    if found is None or (isinstance(found, dict) and found.get("level") == "none"):
        if digest is not None:
            raise PlanError(f"{where}: model/graph_sha256 digests a graph onnxruntime built, but the plan records "
                            "no optimization level (the graph as written): the plan was edited; re-plan the model")
        return AS_WRITTEN
    if digest is None:
        raise PlanError(f"{where}: model/optimization says the graph onnxruntime builds at level "
                        f"{show_name(found.get('level')) if isinstance(found, dict) else '?'}, but model/graph_sha256, "
                        "its digest, is missing: re-plan the model")
    if not isinstance(found, dict):
        raise PlanError(f"{where}: model/optimization is not an object; re-plan the model")
    level, provider, version = found.get("level"), found.get("provider"), found.get("onnxruntime")
    block = found.get("nchwc_block")
    if level not in OPTIMIZE_LEVELS or provider not in DEVICES or not isinstance(version, str):
        raise PlanError(f"{where}: model/optimization {show_name(found)} needs level (one of "
                        f"{', '.join(OPTIMIZE_LEVELS)}), provider (one of {', '.join(DEVICES)}) and the "
                        "onnxruntime version; re-plan the model")
    if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 1):
        raise PlanError(f"{where}: model/optimization/nchwc_block {show_name(block)} is not a positive "
                        "integer; re-plan the model")
    return Optimization(level, provider, version, block)
