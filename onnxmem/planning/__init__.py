"""The composition: view -> order -> liveness -> problem -> solve -> plan, for graphs, bodies, ranges and programs.

* :mod:`onnxmem.planning.compose`: the steps composed once (:func:`compose`), which every
  planner below calls;
* :mod:`onnxmem.planning.pipeline`: a model's plan (:func:`plan_model`, :func:`plan_loaded`; :func:`plan_optimized`
  for the graph onnxruntime builds);
* :mod:`onnxmem.planning.bodies`: the plans of If, Loop and Scan bodies;
* :mod:`onnxmem.planning.ranges`: a range plan over a box of dims (:func:`plan_range`);
* :mod:`onnxmem.planning.program`: several models in one arena (:func:`plan_program`);
* :mod:`onnxmem.planning.fit`: the largest batch or sequence that fits in a memory (:func:`fit_model`);
* :mod:`onnxmem.planning.dims`: the ``--dim`` flags (:func:`parse_dim_flags`, :func:`parse_point`).

Each name loads its module on first use (:mod:`onnxmem.core.lazy`): ``plan`` imports neither
the range, program nor fit planners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.planning.compose import Composed, compose, order_view, solve_layout, unsolved
    from onnxmem.planning.dims import parse_dim_flags, parse_point
    from onnxmem.planning.fit import Fit, FitReport, Footprint, fit_model, fit_to_dict
    from onnxmem.planning.pipeline import (
        Planned,
        PlanOptions,
        default_order,
        default_solver,
        optimized_record,
        plan_liveness,
        plan_loaded,
        plan_model,
        plan_optimized,
    )
    from onnxmem.planning.program import pipeline_handovers, plan_program
    from onnxmem.planning.ranges import plan_range, plan_range_optimized

__all__ = [
    "Composed",
    "Fit",
    "FitReport",
    "Footprint",
    "PlanOptions",
    "Planned",
    "compose",
    "default_order",
    "default_solver",
    "optimized_record",
    "fit_model",
    "fit_to_dict",
    "order_view",
    "parse_dim_flags",
    "parse_point",
    "pipeline_handovers",
    "plan_liveness",
    "plan_loaded",
    "plan_model",
    "plan_optimized",
    "plan_program",
    "plan_range",
    "plan_range_optimized",
    "solve_layout",
    "unsolved",
]

_EXPORTS = {
    "Composed": "onnxmem.planning.compose",
    "Fit": "onnxmem.planning.fit",
    "FitReport": "onnxmem.planning.fit",
    "Footprint": "onnxmem.planning.fit",
    "PlanOptions": "onnxmem.planning.pipeline",
    "Planned": "onnxmem.planning.pipeline",
    "compose": "onnxmem.planning.compose",
    "default_order": "onnxmem.planning.pipeline",
    "default_solver": "onnxmem.planning.pipeline",
    "fit_model": "onnxmem.planning.fit",
    "fit_to_dict": "onnxmem.planning.fit",
    "optimized_record": "onnxmem.planning.pipeline",
    "order_view": "onnxmem.planning.compose",
    "parse_dim_flags": "onnxmem.planning.dims",
    "parse_point": "onnxmem.planning.dims",
    "pipeline_handovers": "onnxmem.planning.program",
    "plan_liveness": "onnxmem.planning.pipeline",
    "plan_loaded": "onnxmem.planning.pipeline",
    "plan_model": "onnxmem.planning.pipeline",
    "plan_optimized": "onnxmem.planning.pipeline",
    "plan_program": "onnxmem.planning.program",
    "plan_range": "onnxmem.planning.ranges",
    "plan_range_optimized": "onnxmem.planning.ranges",
    "solve_layout": "onnxmem.planning.compose",
    "unsolved": "onnxmem.planning.compose",
}

__getattr__ = lazy_attributes(globals(), _EXPORTS)
