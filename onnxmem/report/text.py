"""Reports on a memory plan: the text summary of ``onnxmem show`` and the pictures of ``plot``.

Everything here reads a :class:`~onnxmem.plans.point.MemoryPlan` and returns text or writes a file;
nothing prints. Long steps call an optional ``progress(message)`` callback.

The picture (``plot_plan``) has two panels over the same step axis:

1. the layout: one rectangle per tensor, ``[start, end)`` steps wide and ``[offset,
   offset + size)`` bytes high, colored by the type of the op that produces it (graph
   inputs grey), the arena size as a line on top and the peak step marked;
2. the live bytes at each step, with the lower bound and the arena size as lines.

PNG and SVG come from matplotlib. HTML is one self-contained file (inline SVG, no script,
nothing fetched) whose rectangles name their tensor, op, size and steps on hover.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from onnxmem.analysis.lifetimes import group_span, live_profile
from onnxmem.core.errors import OnnxmemError, PlanInvalid, cut_words, one_line, show_name
from onnxmem.core.fileio import check_output_path, write_text_atomic
from onnxmem.core.sizes import format_bytes
from onnxmem.plans.point import MemoryPlan, PlannedTensor

__all__ = [
    "PLOT_FORMATS",
    "byte_scale",
    "Contributor",
    "contributors",
    "format_bytes",
    "live_curve",
    "op_colors",
    "peak_tensors",
    "plot_plan",
    "render_summary",
]

Progress = Callable[[str], None]

PLOT_FORMATS = (".png", ".svg", ".html")

#: inputs and tensors without a producing op
NO_OP = "(input)"

#: the most characters of an op type in a PNG/SVG legend (SkipSimplifiedLayerNormalization is 32): a
#: longer one is cut, so the legend leaves the panels room at every size ``plot --size`` takes
LEGEND_LABEL = 32

_PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#1f77b4", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#dbdb8d", "#9edae5", "#17becf",
)
_OTHER = "#cfcfcf"
_INPUT = "#8c8c8c"




def _op(t: PlannedTensor) -> str:
    return t.producer_op or NO_OP


def _padded(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment if alignment > 1 else size


def main_level(plan: MemoryPlan) -> MemoryPlan:
    """``plan`` with the main graph's tensors only: the steps of ``plan.order``. A body's
    tensors live in its owner's region (a main-graph tensor of kind ``region``), so the
    main graph's curve and peak account for them; :func:`subgraph_rows` details them."""
    if all(not t.graph for t in plan.tensors):
        return plan
    return replace(plan, tensors=tuple(t for t in plan.tensors if not t.graph))


def subgraph_rows(plan: MemoryPlan) -> list[list[str]]:
    """One row per planned body: path, kind, nodes, tensors, its arena and bound, its region."""
    count: dict[str, int] = {}
    for t in plan.tensors:
        count[t.graph] = count.get(t.graph, 0) + 1
    regions = {(t.graph, t.producer): t for t in plan.tensors if t.kind == "region"}
    rows = []
    for sg in plan.subgraphs:
        region = regions.get((sg.parent, sg.owner))
        where = f"{format_bytes(region.size)} at {region.offset}" if region is not None else "none"
        rows.append([sg.path, sg.kind, str(len(sg.order)), str(count.get(sg.path, 0)), format_bytes(sg.arena_size),
                     format_bytes(sg.lower_bound), str(sg.solver.get("status", "?")), where])
    return rows


def live_curve(plan: MemoryPlan) -> np.ndarray:
    """Bytes live at each step ``0 .. len(order) - 1`` of the main graph (bodies count as their regions).

    An alias group counts once, as a block of its largest member's size (rounded up to the
    plan's alignment) live from its first member's start to its last member's end.
    """
    plan = main_level(plan)
    steps = max(len(plan.order), max((t.end for t in plan.tensors), default=0))
    lifetimes = {t.name: (t.start, t.end) for t in plan.tensors}
    groups: dict[str, list[PlannedTensor]] = {}
    for t in plan.tensors:
        groups.setdefault(t.group, []).append(t)
    spans = ((*group_span(lifetimes, (t.name for t in ts)), max(_padded(t.size, plan.alignment) for t in ts))
             for ts in groups.values())
    return live_profile(spans, steps)


def peak_tensors(plan: MemoryPlan, step: int | None = None) -> list[PlannedTensor]:
    """Tensors live at ``step`` (default: the plan's peak step), largest first."""
    s = plan.peak_step if step is None else step
    live = [t for t in main_level(plan).tensors if t.start <= s < t.end]
    return sorted(live, key=lambda t: (-t.size, t.name))


@dataclass(frozen=True, slots=True)
class Contributor:
    """Bytes that tensors made by one op type hold at the peak step."""

    op_type: str
    size: int
    tensors: int
    share: float  # of the bytes live at the peak


def contributors(plan: MemoryPlan, step: int | None = None) -> list[Contributor]:
    """Live bytes at the peak step grouped by producing op type, largest first.

    Alias groups count once, under the op that produced the group's largest member.
    """
    best: dict[str, PlannedTensor] = {}
    for t in peak_tensors(plan, step):
        if t.group not in best or t.size > best[t.group].size:
            best[t.group] = t
    by_op: dict[str, list[int]] = {}
    for t in best.values():
        entry = by_op.setdefault(_op(t), [0, 0])
        entry[0] += t.size
        entry[1] += 1
    total = sum(v[0] for v in by_op.values()) or 1
    rows = [Contributor(op, size, n, size / total) for op, (size, n) in by_op.items()]
    return sorted(rows, key=lambda c: (-c.size, c.op_type))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    rows = [[one_line(c) for c in row] for row in rows]  # names from the plan file, escaped
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  " + "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def render_summary(plan: MemoryPlan, top: int = 10) -> str:
    """The text of ``onnxmem show``: summary, tensors live at the peak, largest contributors."""
    step = plan.peak_step
    node = plan.order[step] if 0 <= step < len(plan.order) else "?"
    op = plan.op_types[step] if 0 <= step < len(plan.op_types) else "?"
    live = peak_tensors(plan)
    curve = live_curve(plan)
    at_peak = int(curve[step]) if 0 <= step < len(curve) else 0
    ratio = plan.arena_size / plan.lower_bound if plan.lower_bound else float("nan")
    saved = 1 - plan.arena_size / plan.naive_size if plan.naive_size else 0.0
    dims = ", ".join(f"{k}={v}" for k, v in plan.dims.items()) or "none"
    solver = plan.solver
    lines = [
        f"model        {plan.model.get('path', '?')}",
        f"dims         {dims}",
        f"schedule     {len(plan.order)} steps (order: {plan.order_strategy}), io {plan.io}, "
        f"alignment {plan.alignment}, form {plan.form}",
        f"tensors      {len(plan.tensors)} in {len({t.group for t in plan.tensors})} buffers",
        f"arena        {format_bytes(plan.arena_size)} ({plan.arena_size} B)",
        f"lower bound  {format_bytes(plan.lower_bound)}  (arena/bound {ratio:.3f})",
        f"naive        {format_bytes(plan.naive_size)}  (arena saves {saved:.1%})",
        f"weights      {format_bytes(plan.weights_size)}",
        f"solver       {solver.get('name', '?')}: {solver.get('status', '?')} in "
        f"{float(solver.get('seconds', 0.0)):.3f} s; plan {plan.plan_seconds:.3f} s",
        f"peak         step {step}: {op} {show_name(node)}, {format_bytes(at_peak)} live in "
        f"{len(live)} tensors",
    ]
    for w in plan.warnings:
        lines.append(f"warning      {w}")

    shown = live[:top]
    lines += ["", f"tensors live at step {step} ({len(shown)} of {len(live)}, largest first):"]
    rows = [
        [
            t.name,
            _op(t),
            format_bytes(t.size),
            str(t.offset),
            f"[{t.start}, {t.end})",
            "" if t.group == t.name else f"shares {t.group}",
        ]
        for t in shown
    ]
    lines += _table(["tensor", "op", "size", "offset", "steps", "alias"], rows, {2, 3})

    lines += ["", "largest contributors at the peak (by producing op type):"]
    rows = [
        [c.op_type, format_bytes(c.size), f"{c.share:.1%}", str(c.tensors)]
        for c in contributors(plan)[:top]
    ]
    lines += _table(["op", "bytes", "share", "tensors"], rows, {1, 2, 3})

    if plan.subgraphs:
        lines += ["", f"subgraphs ({len(plan.subgraphs)}; each runs in its owner's region, in steps of its own):"]
        lines += _table(["subgraph", "kind", "nodes", "tensors", "arena", "bound", "solver", "region"],
                        subgraph_rows(plan), {2, 3, 4, 5})
    biggest = sorted(main_level(plan).tensors, key=lambda t: (-t.size, t.name))[:top]
    lines += ["", f"largest tensors of the whole run ({len(biggest)}):"]
    rows = [
        [t.name, _op(t), format_bytes(t.size), f"[{t.start}, {t.end})", str(t.end - t.start)]
        for t in biggest
    ]
    lines += _table(["tensor", "op", "size", "steps", "lifetime"], rows, {2, 4})
    # every string of the plan file reaches the terminal escaped: one line stays one line
    return "\n".join(one_line(line) for line in lines) + "\n"


# --------------------------------------------------------------------------- pictures


def op_colors(plan: MemoryPlan, limit: int = len(_PALETTE)) -> dict[str, str]:
    """A color per producing op type: the ``limit`` op types holding most bytes x steps get
    their own color (in that order), the rest share grey; graph inputs are dark grey."""
    weight: dict[str, int] = {}
    for t in plan.tensors:
        if t.producer_op:
            weight[t.producer_op] = weight.get(t.producer_op, 0) + t.size * (t.end - t.start)
    ranked = sorted(weight, key=lambda op: (-weight[op], op))
    colors = {op: _PALETTE[i] if i < limit else _OTHER for i, op in enumerate(ranked)}
    colors[NO_OP] = _INPUT
    return colors


def plot_plan(
    plan: MemoryPlan,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    width: float = 12.0,
    height: float = 7.0,
    dpi: int = 100,
    progress: Progress | None = None,
) -> Path:
    """Draw the plan to ``path``; the suffix (.png, .svg, .html) picks the format.

    PNG and SVG are ``width`` x ``height`` inches at ``dpi`` (a PNG is ``width*dpi`` by
    ``height*dpi`` pixels). Returns the path written.
    """
    out = check_output_path(path, "plot")
    suffix = out.suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise OnnxmemError(
            f"plot file '{out}' has suffix '{out.suffix}'; use one of {', '.join(PLOT_FORMATS)}"
        )
    say = progress or (lambda _msg: None)
    # a title from the plan file or the flag is shown, never interpreted: one line, escaped
    name = one_line(title or Path(str(plan.model.get("path", "plan"))).stem)
    plan = main_level(plan)  # bodies are drawn as their owners' regions
    say(f"computing live bytes over {len(plan.order)} steps")
    curve = live_curve(plan)
    if suffix == ".html":
        say(f"drawing {len(plan.tensors)} tensors as SVG")
        write_text_atomic(out, _html(plan, curve, name))
    else:
        say(f"drawing {len(plan.tensors)} tensors with matplotlib")
        _matplotlib(plan, curve, name, out, width, height, dpi, say)
    return out


def byte_scale(n: float) -> tuple[float, str]:
    """The factor and unit a byte axis reaching ``n`` is drawn in (GiB, MiB, KiB or B)."""
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= factor:
            return float(factor), unit
    return 1.0, "B"


def _matplotlib(
    plan: MemoryPlan, curve: np.ndarray, name: str, out: Path, width: float, height: float,
    dpi: int, say: Progress,
) -> None:
    """Draw with matplotlib; no text is parsed as math (``$...$``), so an op type is drawn as written."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        _draw_matplotlib(plan, curve, name, out, width, height, dpi, say)


#: the most times over a plan's rectangles may cover the layout (steps by bytes) to be drawn as
#: pixels: tensors live together never share bytes, so a valid plan covers it about once (more
#: only where views and in-place outputs share their input's bytes); the painter's work grows with
#: the area painted (50,001 copies of one rectangle over half the picture: 31 s)
MAX_COVER = 256


def _drawn_rects(plan: MemoryPlan, colors: dict[str, str], name: str, steps: int,
                 top: int) -> list[tuple[int, int, int, int, str]]:
    """Each tensor's rectangle (start, end, offset, size, colour), a rectangle drawn once however
    many tensors have it; ``PlanInvalid`` where the distinct rectangles cover the visible layout
    more than :data:`MAX_COVER` times over."""
    rects = dict.fromkeys((t.start, t.end, t.offset, t.size, colors.get(_op(t), _OTHER)) for t in plan.tensors)
    area = sum(max(min(end, steps) - max(start, 0), 0) * max(min(offset + size, top) - max(offset, 0), 0)
               for start, end, offset, size, _ in rects)
    cover = area / (steps * top)
    if cover > MAX_COVER:
        raise PlanInvalid(f"plan {show_name(name)}: its tensors cover the layout of steps by bytes {cover:,.0f} "
                          f"times over, where tensors live together never share bytes; no picture of it is "
                          f"drawn (past {MAX_COVER} times): onnxmem verify --static-only names the overlaps")
    return list(rects)


def _draw_matplotlib(
    plan: MemoryPlan, curve: np.ndarray, name: str, out: Path, width: float, height: float,
    dpi: int, say: Progress,
) -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from onnxmem.core.fileio import write_bytes_atomic

    colors = op_colors(plan)
    top = max(plan.arena_size, int(curve.max(initial=0)), 1)
    factor, unit = byte_scale(top)
    steps = max(len(curve), 1)

    rects = _drawn_rects(plan, colors, name, steps, top)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    layout, lives = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    verts = []
    faces = []
    for start, end, offset, size, face in rects:
        y0, y1 = offset / factor, (offset + size) / factor
        verts.append([(start, y0), (end, y0), (end, y1), (start, y1)])
        faces.append(face)
    thin = len(plan.tensors) > 3000
    layout.add_collection(PolyCollection(
        verts, facecolors=faces, edgecolors="white" if not thin else "none",
        linewidths=0.2, alpha=0.9,
    ))
    layout.axhline(plan.arena_size / factor, color="black", lw=1)
    layout.axvline(plan.peak_step + 0.5, color="crimson", lw=1, ls="--")
    layout.set_xlim(0, steps)
    layout.set_ylim(0, top / factor * 1.03)
    layout.set_ylabel(f"address ({unit})")
    ratio = plan.arena_size / plan.lower_bound if plan.lower_bound else float("nan")
    layout.set_title(
        f"{name}: arena {format_bytes(plan.arena_size)}, lower bound "
        f"{format_bytes(plan.lower_bound)} (x{ratio:.3f}), {len(plan.tensors)} tensors, "
        f"{len(plan.order)} steps", fontsize=10,
    )
    shown = [op for op, c in colors.items() if c != _OTHER][:14]
    handles = [Patch(color=colors[op], label=cut_words(one_line(op), LEGEND_LABEL)) for op in shown]
    if any(c == _OTHER for c in colors.values()):
        handles.append(Patch(color=_OTHER, label="other ops"))
    layout.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False, title="producing op", title_fontsize=8)

    x = np.arange(len(curve) + 1)
    y = np.append(curve, curve[-1] if len(curve) else 0) / factor
    lives.fill_between(x, y, step="post", color="#4e79a7", alpha=0.35, lw=0)
    lives.step(x, y, where="post", color="#4e79a7", lw=1, label="live bytes")
    lives.axhline(plan.arena_size / factor, color="black", lw=1, label="arena")
    lives.axhline(plan.lower_bound / factor, color="#59a14f", lw=1.5, ls=(0, (2, 2)),
                  label="lower bound", zorder=3)
    lives.axvline(plan.peak_step + 0.5, color="crimson", lw=1, ls="--", label="peak step")
    lives.set_ylim(0, top / factor * 1.08)
    lives.set_xlabel("schedule step")
    lives.set_ylabel(f"live ({unit})")
    lives.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    say(f"writing {out.name}")
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format=out.suffix[1:].lower(), dpi=dpi)
    write_bytes_atomic(out, buffer.getvalue())


@dataclass(frozen=True)
class _Canvas:
    """The picture's geometry: the layout panel (top) and the live-bytes panel (bottom)."""

    top: int  # bytes at the top of both panels
    steps: int
    w: float = 1100.0
    h1: float = 460.0
    h2: float = 150.0
    left: float = 70.0
    gap: float = 30.0

    @property
    def sx(self) -> float:
        return self.w / self.steps

    def x(self, step: float) -> float:
        return self.left + step * self.sx

    def y1(self, addr: float) -> float:
        return 10 + self.h1 - addr / self.top * self.h1

    def y2(self, size: float) -> float:
        return 10 + self.h1 + self.gap + self.h2 - size / self.top * self.h2


def _html(plan: MemoryPlan, curve: np.ndarray, name: str) -> str:
    colors = op_colors(plan)
    c = _Canvas(max(plan.arena_size, int(curve.max(initial=0)), 1), max(len(curve), 1))
    total_h = 10 + c.h1 + c.gap + c.h2 + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{c.left + c.w + 20:.0f}" '
        f'height="{total_h:.0f}" font-family="sans-serif" font-size="11">',
        *_layout_panel(plan, colors, c),
        *_live_panel(plan, curve, c),
        "</svg>",
    ]
    return _html_page(plan, colors, "".join(parts), name)


def _esc(text: str) -> str:
    """``text`` (a name from the plan file) as one line, escaped for HTML."""
    return html.escape(one_line(text))


def _layout_panel(plan: MemoryPlan, colors: dict[str, str], c: _Canvas) -> list[str]:
    """The top panel: each tensor's bytes over its steps, the arena line, the peak step."""
    esc = _esc
    x, y1, left, w, h1, sx = c.x, c.y1, c.left, c.w, c.h1, c.sx
    parts = [f'<rect x="{left}" y="10" width="{w}" height="{h1}" fill="#fafafa" stroke="#ccc"/>']
    for t in plan.tensors:
        shape = esc(f"{list(t.shape)} {t.dtype}")
        tip = (  # fields joined by newlines, each field one line
            f"{esc(t.name)}\nop: {esc(_op(t))}" + (f" ({esc(t.producer)})" if t.producer else "")
            + f"\nsize: {format_bytes(t.size)} ({t.size} B)\nshape: {shape}"
            + f"\noffset: {t.offset}\nsteps: [{t.start}, {t.end})"
            + ("" if t.group == t.name else f"\nshares bytes with: {esc(t.group)}")
        )
        ya, yb = y1(t.offset + t.size), y1(t.offset)
        parts.append(
            f'<rect class="t" x="{x(t.start):.2f}" y="{ya:.2f}" '
            f'width="{max((t.end - t.start) * sx, 0.5):.2f}" height="{max(yb - ya, 0.5):.2f}" '
            f'fill="{colors.get(_op(t), _OTHER)}"><title>{tip}</title></rect>'
        )
    ya = y1(plan.arena_size)
    parts.append(f'<line x1="{left}" x2="{left + w}" y1="{ya:.2f}" y2="{ya:.2f}" stroke="black"/>')
    px = x(plan.peak_step + 0.5)
    for top_y, bottom_y in ((10, 10 + h1), (10 + h1 + c.gap, 10 + h1 + c.gap + c.h2)):
        parts.append(
            f'<line x1="{px:.2f}" x2="{px:.2f}" y1="{top_y}" y2="{bottom_y}" stroke="crimson" '
            f'stroke-dasharray="4 3"><title>peak step {plan.peak_step}: '
            f"{esc(plan.order[plan.peak_step]) if plan.peak_step < len(plan.order) else ''}"
            "</title></line>"
        )
    parts.append(f'<text x="{left - 5}" y="{ya + 4:.2f}" text-anchor="end">arena</text>')
    parts.append(f'<text x="{left - 5}" y="{10 + h1:.2f}" text-anchor="end">0</text>')
    return parts


def _live_panel(plan: MemoryPlan, curve: np.ndarray, c: _Canvas) -> list[str]:
    """The bottom panel: bytes live per step, the lower bound and the arena."""
    x, y2, left, w, h2, steps = c.x, c.y2, c.left, c.w, c.h2, c.steps
    base = 10 + c.h1 + c.gap
    parts = [f'<rect x="{left}" y="{base}" width="{w}" height="{h2}" fill="#fafafa" stroke="#ccc"/>']
    pts = [f"{x(0):.2f},{y2(0):.2f}"]
    for i, v in enumerate(curve):
        pts.append(f"{x(i):.2f},{y2(v):.2f}")
        pts.append(f"{x(i + 1):.2f},{y2(v):.2f}")
    pts.append(f"{x(steps):.2f},{y2(0):.2f}")
    parts.append(f'<polygon points="{" ".join(pts)}" fill="#4e79a7" fill-opacity="0.35" '
                 'stroke="#4e79a7"><title>live bytes per step</title></polygon>')
    for value, color, label, dash in (
        (plan.lower_bound, "#59a14f", "lower bound", ' stroke-dasharray="2 2"'),
        (plan.arena_size, "black", "arena", ""),
    ):
        yy = y2(value)
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{yy:.2f}" y2="{yy:.2f}" stroke="{color}"{dash}>'
            f"<title>{label}: {format_bytes(value)}</title></line>"
        )
    parts.append(f'<text x="{left - 5}" y="{base + h2 / 2:.2f}" text-anchor="end">live</text>')
    parts.append(
        f'<text x="{left + w / 2:.0f}" y="{base + h2 + 25:.0f}" text-anchor="middle">'
        f"schedule step (0 to {steps - 1})</text>"
    )
    return parts


def _html_page(plan: MemoryPlan, colors: dict[str, str], svg: str, name: str) -> str:
    """The page around the picture: title, summary line, legend."""
    esc = _esc
    legend = "".join(
        f'<span class="k"><i style="background:{c}"></i>{esc(op)}</span>'
        for op, c in colors.items() if c != _OTHER
    )
    if any(c == _OTHER for c in colors.values()):
        legend += f'<span class="k"><i style="background:{_OTHER}"></i>other ops</span>'
    ratio = plan.arena_size / plan.lower_bound if plan.lower_bound else float("nan")
    summary = (
        f"arena {format_bytes(plan.arena_size)} &middot; lower bound "
        f"{format_bytes(plan.lower_bound)} (arena/bound {ratio:.3f}) &middot; naive "
        f"{format_bytes(plan.naive_size)} &middot; {len(plan.tensors)} tensors &middot; "
        f"{len(plan.order)} steps &middot; peak at step {plan.peak_step}"
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(name)}: memory plan</title><style>"
        "body{font-family:sans-serif;margin:16px;color:#222}"
        "h1{font-size:18px;margin:0 0 4px}p{margin:4px 0 10px;font-size:13px}"
        ".k{display:inline-block;margin:0 12px 4px 0;font-size:12px}"
        ".k i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}"
        "rect.t:hover{stroke:#000;stroke-width:1.5}"
        "</style></head><body>"
        f"<h1>{esc(name)}</h1><p>{summary}</p><div>{legend}</div>"
        + svg
        + "<p>Top: each tensor's bytes [offset, offset + size) over its steps [start, end); "
        "hover for details. Bottom: bytes live per step. Dashed red: the peak step.</p>"
        "</body></html>\n"
    )
