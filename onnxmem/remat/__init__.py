"""Recomputation under a memory budget: drop values and run their producers again later.

:mod:`.problem` states the rule and the model of its peak and cost;
:mod:`.cost` what a node costs; :mod:`.registry` and its algorithms
(:mod:`.heuristics`, :mod:`.exact`) choose what to drop; :mod:`.rewrite`
writes the model with the duplicated nodes; :mod:`.budget` is the step the
planner runs (``onnxmem plan --budget``).
"""

from onnxmem.remat import exact, heuristics  # noqa: F401 - fill the registry
from onnxmem.remat.problem import RematProblem, Schedule, build_problem, simulate
from onnxmem.remat.registry import ALGORITHMS, Choice, RematOptions, choose

__all__ = ["ALGORITHMS", "Choice", "RematOptions", "RematProblem", "Schedule", "build_problem", "choose", "simulate"]
