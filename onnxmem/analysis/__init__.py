"""Analyses of a view: lifetimes, liveness, aliasing and in-place rules, happens-before.

The public interface of the analysis layer: higher layers import from here
(``from onnxmem.analysis import alias_layout``). Each name loads its module on first use.

* :mod:`~onnxmem.analysis.lifetimes`: when each tensor is written and last read;
* :mod:`~onnxmem.analysis.liveness`: the buffers of an order, with alias groups;
* :mod:`~onnxmem.analysis.alias_rules`: which op may share which input's bytes;
* :mod:`~onnxmem.analysis.aliasing`: those rules applied along an order (groups, layouts);
* :mod:`~onnxmem.analysis.happens_before`: the partial order of a graph run with nodes at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.analysis.alias_rules import (
        CONCAT,
        DECLARED_INPLACE,
        INPLACE,
        RULES,
        VIEW,
        Alias,
        AliasRule,
        alias_rule,
        concat_slices,
    )
    from onnxmem.analysis.aliasing import (
        alias_groups,
        alias_layout,
        alias_sources,
        every_alias_source,
        find_aliases,
        group_writable,
        overwritable,
        shared_layout,
        shared_liveness,
    )
    from onnxmem.analysis.happens_before import (
        CONCURRENCY_MODES,
        HappensBefore,
        check_concurrency,
        dag_liveness,
        dag_problem,
        happens_before,
    )
    from onnxmem.analysis.lifetimes import (
        IO_MODES,
        arena_tensors,
        check_io,
        group_span,
        last_reads,
        live_profile,
        tensor_lifetimes,
    )
    from onnxmem.analysis.liveness import (
        AliasLayout,
        Interval,
        Liveness,
        build_liveness,
    )

__all__ = [
    "CONCAT",
    "CONCURRENCY_MODES",
    "DECLARED_INPLACE",
    "INPLACE",
    "IO_MODES",
    "RULES",
    "VIEW",
    "Alias",
    "AliasLayout",
    "AliasRule",
    "HappensBefore",
    "Interval",
    "Liveness",
    "alias_groups",
    "alias_layout",
    "alias_rule",
    "alias_sources",
    "arena_tensors",
    "build_liveness",
    "check_concurrency",
    "check_io",
    "concat_slices",
    "dag_liveness",
    "dag_problem",
    "every_alias_source",
    "find_aliases",
    "group_span",
    "group_writable",
    "happens_before",
    "last_reads",
    "live_profile",
    "overwritable",
    "shared_layout",
    "shared_liveness",
    "tensor_lifetimes",
]

_EXPORTS = {
    "Alias": "onnxmem.analysis.alias_rules",
    "AliasLayout": "onnxmem.analysis.liveness",
    "AliasRule": "onnxmem.analysis.alias_rules",
    "CONCAT": "onnxmem.analysis.alias_rules",
    "CONCURRENCY_MODES": "onnxmem.analysis.happens_before",
    "DECLARED_INPLACE": "onnxmem.analysis.alias_rules",
    "HappensBefore": "onnxmem.analysis.happens_before",
    "INPLACE": "onnxmem.analysis.alias_rules",
    "IO_MODES": "onnxmem.analysis.lifetimes",
    "Interval": "onnxmem.analysis.liveness",
    "Liveness": "onnxmem.analysis.liveness",
    "RULES": "onnxmem.analysis.alias_rules",
    "VIEW": "onnxmem.analysis.alias_rules",
    "alias_groups": "onnxmem.analysis.aliasing",
    "alias_layout": "onnxmem.analysis.aliasing",
    "alias_rule": "onnxmem.analysis.alias_rules",
    "alias_sources": "onnxmem.analysis.aliasing",
    "arena_tensors": "onnxmem.analysis.lifetimes",
    "build_liveness": "onnxmem.analysis.liveness",
    "check_concurrency": "onnxmem.analysis.happens_before",
    "check_io": "onnxmem.analysis.lifetimes",
    "concat_slices": "onnxmem.analysis.alias_rules",
    "dag_liveness": "onnxmem.analysis.happens_before",
    "dag_problem": "onnxmem.analysis.happens_before",
    "every_alias_source": "onnxmem.analysis.aliasing",
    "find_aliases": "onnxmem.analysis.aliasing",
    "group_span": "onnxmem.analysis.lifetimes",
    "group_writable": "onnxmem.analysis.aliasing",
    "happens_before": "onnxmem.analysis.happens_before",
    "last_reads": "onnxmem.analysis.lifetimes",
    "live_profile": "onnxmem.analysis.lifetimes",
    "overwritable": "onnxmem.analysis.aliasing",
    "shared_layout": "onnxmem.analysis.aliasing",
    "shared_liveness": "onnxmem.analysis.aliasing",
    "tensor_lifetimes": "onnxmem.analysis.lifetimes",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)
