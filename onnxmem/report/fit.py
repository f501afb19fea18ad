"""The picture of ``onnxmem fit --plot``: the deployment's total against the ranged dim, with the budget.

One ranged dim: the items stacked (weights, fixed cost, inputs and outputs outside the arena,
arena) at :data:`CURVE_POINTS` values spread geometrically over the range (and the answer
and the value after it), a horizontal line at the memory and a vertical one at the answer.
A frontier (two ranged dims): the largest value of the second dim against the first.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from onnxmem.planning.fit import FitReport, log_spaced
from onnxmem.report.text import byte_scale

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CURVE_POINTS", "fit_figure", "render_fit_plot"]

#: values of the ranged dim drawn on a curve
CURVE_POINTS = 96
_COLORS = {"weights": "#4c72b0", "fixed": "#8c8c8c", "io": "#dd8452", "arena": "#55a868", "runtime": "#c44e52"}


def render_fit_plot(report: FitReport, title: str, *, width: float = 9.0, height: float = 5.5,
                    dpi: int = 100) -> bytes:
    """The PNG bytes of the picture (``title`` is shown as given: the caller escapes it)."""
    buf = io.BytesIO()
    fit_figure(report, title, width=width, height=height, dpi=dpi).savefig(buf, format="png")
    return buf.getvalue()


def fit_figure(report: FitReport, title: str, *, width: float = 9.0, height: float = 5.5,
               dpi: int = 100) -> Figure:
    """The picture as a matplotlib ``Figure`` (one axes), before it is drawn to pixels."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    ax = fig.subplots()
    if report.frontier_dim is None:
        _curve(ax, report)
    else:
        _frontier(ax, report)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig


def _curve(ax: object, report: FitReport) -> None:
    fit = report.answer
    lo, hi = report.sizes.box[fit.dim]
    base = {k: v for k, v in fit.at.point.items() if k != fit.dim}
    extra = [v for v in ((fit.value, fit.value + 1) if fit.value is not None else ()) if lo <= v <= hi]
    if report.sizes.plan is not None:
        xs = sorted({*log_spaced(lo, hi, CURVE_POINTS), *extra})
    else:  # point plans: the values planned while searching
        known = (dict(k) for k in report.sizes.known)
        xs = sorted({*(p[fit.dim] for p in known if all(p.get(k) == v for k, v in base.items())), *extra})
    feet = [report.footprint({**base, fit.dim: x}) for x in xs]
    top = max(report.memory, *(f.total for f in feet))
    factor, unit = byte_scale(top)
    layers = {"weights": [f.session - f.fixed if f.held is None else f.session for f in feet],
              "fixed": [f.fixed if f.held is None else 0 for f in feet],
              "io": [f.io for f in feet], "arena": [f.arena for f in feet], "runtime": [f.runtime for f in feet]}
    labels = {"weights": "weights" if fit.at.held is None else "session held (measured)", "fixed": "fixed cost",
              "io": "inputs and outputs outside the arena", "arena": "arena",
              "runtime": "onnxruntime's activations beyond the arena"}
    if len(xs) > 1:
        ax.stackplot(xs, *([v / factor for v in vals] for vals in layers.values()),  # type: ignore[attr-defined]
                     labels=[labels[k] for k in layers], colors=[_COLORS[k] for k in layers], alpha=0.85)
    else:  # one value (a range of one, or the one value planned): its stack as a bar
        bottom = 0.0
        for k, vals in layers.items():
            ax.bar(xs, [vals[0] / factor], 0.6, bottom=bottom, label=labels[k],  # type: ignore[attr-defined]
                   color=_COLORS[k], alpha=0.85)
            bottom += vals[0] / factor
    ax.axhline(report.memory / factor, color="crimson", lw=1.5,  # type: ignore[attr-defined]
               label=f"memory {report.memory / factor:.2f} {unit}")
    if fit.value is not None:
        ax.axvline(fit.value, color="black", lw=1, ls="--",  # type: ignore[attr-defined]
                   label=f"largest that fits: {fit.dim}={fit.value}")
    if hi / max(lo, 1) >= 16:
        if lo > 0:
            ax.set_xscale("log")  # type: ignore[attr-defined]
        else:  # a range from 0: a log axis has no 0, so linear about it
            ax.set_xscale("symlog", linthresh=1)  # type: ignore[attr-defined]
    _xlim(ax, lo, hi)
    ax.set_ylim(0, top / factor * 1.05)  # type: ignore[attr-defined]
    ax.set_xlabel(fit.dim)  # type: ignore[attr-defined]
    ax.set_ylabel(f"deployment total ({unit})")  # type: ignore[attr-defined]
    ax.legend(loc="upper left", fontsize=8)  # type: ignore[attr-defined]


def _xlim(ax: object, lo: int, hi: int) -> None:
    """The x axis from ``lo`` to ``hi``; a range of one value is drawn one unit either side."""
    ax.set_xlim(*((lo, hi) if hi > lo else (lo - 1, hi + 1)))  # type: ignore[attr-defined]


def _frontier(ax: object, report: FitReport) -> None:
    first = report.frontier_dim or ""
    second = report.fits[0].dim
    xs = [f.at.point[first] for f in report.fits if f.value is not None]
    ys = [f.value for f in report.fits if f.value is not None]
    ax.step(xs, ys, where="post", color=_COLORS["arena"], lw=2,  # type: ignore[attr-defined]
            marker="o" if len(xs) == 1 else None,  # a line of one point is a dot
            label=f"largest {second} that fits in {report.memory:,} B")
    lo, hi = report.sizes.box[first]
    _xlim(ax, lo, hi)
    ax.set_ylim(0, report.sizes.box[second][1] * 1.05)  # type: ignore[attr-defined]
    ax.set_xlabel(first)  # type: ignore[attr-defined]
    ax.set_ylabel(second)  # type: ignore[attr-defined]
    ax.legend(loc="upper right", fontsize=8)  # type: ignore[attr-defined]
