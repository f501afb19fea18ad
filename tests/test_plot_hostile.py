"""``onnxmem plot`` of a plan whose names are hostile: drawn as written, never interpreted.

Each case builds a real model with ``onnx.helper`` (custom-domain ops whose types hold
matplotlib math (``$...$``), terminal escapes and newlines), plans it with ``onnxmem plan``
and draws it with ``onnxmem plot``, all through the real CLI, under ``tmp_path``.
"""

from __future__ import annotations

import re
import warnings
import xml.dom.minidom
from pathlib import Path

import matplotlib
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main

from .helpers import make_model, vi

FRAC = "$\\frac{a}{b}$"
HOSTILE_OPS = (FRAC, "$\\undefinedmacro$", "\x1b[31mRED", "a\nforged", "bell\x07")
#: the fields of a tensor's hover tooltip in the HTML picture, after its name
TIP_FIELDS = ("op: ", "size: ", "shape: ", "offset: ", "steps: ")


def hostile_plan(folder: Path, ops: tuple[str, ...] = HOSTILE_OPS) -> Path:
    """x -> Relu -> one node of domain ``dom`` per op type -> y; every tensor and node
    name holds the op's hostile text too. Returns the plan file ``onnxmem plan`` wrote."""
    nodes = [helper.make_node("Relu", ["x"], ["r\nforged\x1b[31m"], name="relu\x07")]
    prev = nodes[0].output[0]
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i} {op}\n\x1b"
        nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}\nforged {op}", domain="dom"))
        prev = out
    model = make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])],
                       value_info=[vi(n.output[0], [1, 4]) for n in nodes[:-1]])
    model.opset_import.append(helper.make_opsetid("dom", 1))
    path = folder / "m.onnx"
    onnx.save(model, path)
    plan = folder / "p.json"
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(plan)])
    assert r.exit_code == 0, (r.output, r.exception)
    return plan


def plot(plan: Path, out: Path, *extra: str) -> None:
    r = CliRunner().invoke(main, ["plot", str(plan), "-o", str(out), "--size", "6x4", *extra])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "Traceback" not in r.output and "\x1b" not in r.output
    assert out.is_file()


def test_png_of_hostile_op_types_and_title(tmp_path):
    plan = hostile_plan(tmp_path)
    plot(plan, tmp_path / "p.png")
    plot(plan, tmp_path / "t.png", "--title", "$\\undefinedmacro{\x1b[31mRED}$\nx")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_svg_of_hostile_op_types_is_well_formed_xml(tmp_path):
    plan = hostile_plan(tmp_path)
    out = tmp_path / "p.svg"
    plot(plan, out, "--title", "title \x1b[31m\x07")
    data = out.read_bytes()
    assert b"\x1b" not in data and b"\x07" not in data
    xml.dom.minidom.parseString(data)
    text = data.decode()
    assert "\\x1b[31mRED" in text and "a\\nforged" in text  # escaped, as one line


def test_svg_draws_math_markup_as_text(tmp_path):
    """An op type ``$\\frac{a}{b}$`` is drawn as its characters, not as a fraction: with the
    SVG's text kept as text, the legend holds the dollar signs and ``\\frac`` as written."""
    plan = hostile_plan(tmp_path, (FRAC,))
    out = tmp_path / "p.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot(plan, out)
    doc = xml.dom.minidom.parse(str(out))
    texts = ["".join(c.data for c in el.childNodes if c.nodeType == c.TEXT_NODE)
             for el in doc.getElementsByTagName("text")]
    assert FRAC in texts, texts


def test_html_names_are_one_line_each(tmp_path):
    plan = hostile_plan(tmp_path)
    out = tmp_path / "p.html"
    plot(plan, out, "--title", "page \x1b[31m\x07\nforged")
    text = out.read_text()
    assert "\x1b" not in text and "\x07" not in text
    tips = re.findall(r'<rect class="t"[^>]*><title>(.*?)</title></rect>', text, re.S)
    assert len(tips) == len(HOSTILE_OPS) + 2  # x, the Relu's output, one per hostile node
    for tip in tips:
        lines = tip.split("\n")
        assert tuple(line[: len(f)] for line, f in zip(lines[1:], TIP_FIELDS)) == TIP_FIELDS, tip
        assert len(lines) in (len(TIP_FIELDS) + 1, len(TIP_FIELDS) + 2), tip
    assert any("\\x1b[31mRED" in tip for tip in tips) and "a\\nforged" in text
    head = re.search(r"<title>(.*?)</title>", text, re.S)
    assert head is not None and "\n" not in head.group(1)



@pytest.mark.parametrize("size", ["5x3", "5x50", "50x3", "12x7"])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_no_layout_warning_at_any_size_plot_takes(tmp_path, size, suffix):
    """At the corners of --size (5 to 50 inches wide, 3 to 50 high) the panels, the legend of 14 op
    types of 300 characters each and a long title fit: matplotlib warns of no collapsed layout
    (1x1 printed its UserWarning on stderr)."""
    plan = hostile_plan(tmp_path, tuple(f"Op{i:02d}" + "x" * 300 for i in range(16)))
    out = tmp_path / f"p{suffix}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = CliRunner().invoke(main, ["plot", str(plan), "-o", str(out), "--size", size, "--title", "T" * 500])
    assert r.exit_code == 0 and r.stderr == "", (r.output, r.exception)
    assert [str(w.message) for w in caught] == []
    assert out.is_file()


def _many_copies(folder: Path, copies: int, vary: bool) -> Path:
    """The plan of x -> Relu -> Relu -> y over 256 KiB tensors, with ``copies`` more tensors, each a
    copy of its second tensor under a name of its own over every step; at 64-byte aligned offsets
    of their own where ``vary``."""
    import json

    nodes = [helper.make_node("Relu", ["x"], ["h"], name="r1"), helper.make_node("Relu", ["h"], ["y"], name="r2")]
    model = make_model(nodes, [vi("x", [1, 65536])], [vi("y", [1, 65536])])
    path = folder / "big.onnx"
    onnx.save(model, path)
    plan = folder / "big.json"
    assert CliRunner().invoke(main, ["plan", str(path), "-o", str(plan), "--io", "external"]).exit_code == 0
    data = json.loads(plan.read_text())
    base = next(t for t in data["tensors"] if t["name"] == "h")
    room = (max(data["arena_size"], 2 * base["size"]) - base["size"]) // 64
    data["arena_size"] = max(data["arena_size"], 2 * base["size"])
    for i in range(copies):
        data["tensors"].append({**base, "name": f"copy{i}", "start": 0,
                                "end": len(data["order"]), "offset": 64 * (i % (room + 1)) if vary else 0})
    out = folder / "copies.json"
    out.write_text(json.dumps(data))
    return out


def test_copies_of_one_rectangle_are_drawn_once_and_a_layout_covered_many_times_is_refused(tmp_path):
    """A plan may say anything: 50,001 copies of one rectangle over half the picture took the painter
    31 s (fuzz seed 1200000, plans:1200035). A rectangle is drawn once however many tensors have it,
    and distinct rectangles that cover the layout more than MAX_COVER times over are refused as a
    plan no valid plan can be, with exit 3, one line and no file."""
    from onnxmem.plans import read_plan
    from onnxmem.report.text import MAX_COVER, _drawn_rects, live_curve, main_level, op_colors

    same = _many_copies(tmp_path, 20_000, vary=False)
    p = main_level(read_plan(same))
    curve = live_curve(p)
    rects = _drawn_rects(p, op_colors(p), "m", len(curve), max(p.arena_size, int(curve.max(initial=0)), 1))
    assert len(p.tensors) == 20_001 and len(rects) == 1  # h and its copies: one rectangle
    plot(same, tmp_path / "same.png")
    varied = _many_copies(tmp_path, 4 * MAX_COVER, vary=True)
    out = tmp_path / "varied.png"
    r = CliRunner().invoke(main, ["plot", str(varied), "-o", str(out)])
    assert r.exit_code == 3 and r.stderr.count("\n") == 1, r.output
    assert "times over, where tensors live together never share bytes" in r.stderr
    assert not out.exists()
