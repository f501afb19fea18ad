"""Reports on a plan: text summaries and pictures.

The public interface of the report layer: higher layers import from here
(``from onnxmem.report import plot_plan``). Each name loads its module on first use.

* :mod:`~onnxmem.report.text`: the summary ``onnxmem show`` prints and the plots;
* :mod:`~onnxmem.report.range`: the summary of a range plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.report.range import (
        render_range_summary,
    )
    from onnxmem.report.text import (
        PLOT_FORMATS,
        Contributor,
        contributors,
        format_bytes,
        live_curve,
        op_colors,
        peak_tensors,
        plot_plan,
        render_summary,
    )

__all__ = [
    "PLOT_FORMATS",
    "Contributor",
    "contributors",
    "format_bytes",
    "live_curve",
    "op_colors",
    "peak_tensors",
    "plot_plan",
    "render_range_summary",
    "render_summary",
]

_EXPORTS = {
    "Contributor": "onnxmem.report.text",
    "PLOT_FORMATS": "onnxmem.report.text",
    "contributors": "onnxmem.report.text",
    "format_bytes": "onnxmem.report.text",
    "live_curve": "onnxmem.report.text",
    "op_colors": "onnxmem.report.text",
    "peak_tensors": "onnxmem.report.text",
    "plot_plan": "onnxmem.report.text",
    "render_range_summary": "onnxmem.report.range",
    "render_summary": "onnxmem.report.text",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)
