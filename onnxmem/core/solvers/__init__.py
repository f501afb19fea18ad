"""Buffer-assignment solvers, by short lowercase name.

A solver is a function ``(problem, options) -> Solution``. It registers with
:func:`register`; the CLI's ``--solver`` choices come from :data:`SOLVERS`.
Solvers never import onnx or onnxruntime.

:func:`solve` owns the deadline: it turns ``options.timeout`` (or, when that is
``None``, the solver's registered ``default_timeout``, which its summary
states) into ``options.deadline``, and every solver, and every helper a solver
calls, stops by that deadline and returns the best plan it has. No solver has a
budget of its own. A solver cut off by the deadline before it could finish
says so with the status ``timeout``; see :class:`~onnxmem.core.problem.Status` for
every status and its one meaning. The budget given is in
``Solution.stats["budget_s"]``: budget seconds of counted work
(:mod:`onnxmem.core.workclock`: the same plan at any load), or wall-clock seconds
when the process uses the wall clock (the CLI's ``--timeout``).
"""

# the built-in solvers register on import: import order sets the listing order
from onnxmem.core.solvers.registry import SOLVERS, SearchSwitches, SolveOptions, SolverInfo, judge, register, solve  # noqa: I001
from onnxmem.core.solvers import baseline as _baseline  # noqa: F401
from onnxmem.core.solvers import greedy as _greedy  # noqa: F401
from onnxmem.core.solvers import exact as _exact  # noqa: F401
from onnxmem.core.solvers import shared as _shared  # noqa: F401
from onnxmem.core.solvers import conflict as _conflict  # noqa: F401

__all__ = [
    "SOLVERS",
    "SearchSwitches",
    "SolveOptions",
    "SolverInfo",
    "judge",
    "register",
    "solve",
]
