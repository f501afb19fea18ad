"""Reports: the text of ``onnxmem show`` and the pictures of ``onnxmem plot``."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.plans.point import plan_from_dict, write_plan
from onnxmem.report.text import (
    contributors,
    format_bytes,
    live_curve,
    op_colors,
    peak_tensors,
    plot_plan,
    render_summary,
)

ROOT = Path(__file__).resolve().parent.parent


def tensor(name, size, offset, start, end, op, kind="activation", group=None):
    return {
        "name": name, "dtype": "float32", "shape": [size // 4], "size": size, "offset": offset,
        "start": start, "end": end, "producer": None if op is None else f"n_{name}",
        "producer_op": op, "kind": kind, "group": group or name, "object": None,
    }


def literal_plan() -> dict:
    """x -> Conv a -> Relu b (a view of a: same group) -> Conv c -> Add y(a, c).

    Steps: 0 Conv(a), 1 Relu(b), 2 Conv(c), 3 Add(y).
    x [0,1) 400 B @0; a [0,4) 800 B @512 with b [1,3) in a's group; c [2,4) 256 B @0;
    y [3,4) 128 B @256. Live (64-aligned): step0 448+832=1280, 1: 832, 2: 832+256=1088,
    3: 832+256+128=1216.
    """
    return {
        "schema_version": 1,
        "model": {"path": "toy.onnx", "sha256": "0" * 64, "ir_version": 10, "opset": {"ai.onnx": 17}},
        "dims": {}, "input_shapes": {},
        "order": ["n_a", "n_b", "n_c", "n_y"],
        "op_types": ["Conv", "Relu", "Conv", "Add"],
        "order_strategy": "file", "io": "internal", "alignment": 64, "inplace": True,
        "form": "offsets",
        "arena_size": 1344, "lower_bound": 1280, "naive_size": 1792, "weights_size": 4096,
        "peak_step": 0,
        "solver": {"name": "greedy", "status": "feasible", "seconds": 0.001, "params": {}},
        "plan_seconds": 0.01, "warnings": [],
        "tensors": [
            tensor("x", 400, 0, 0, 1, None, kind="input"),
            tensor("a", 800, 512, 0, 4, "Conv"),
            tensor("b", 800, 512, 1, 3, "Relu", group="a"),
            tensor("c", 256, 0, 2, 4, "Conv"),
            tensor("y", 128, 256, 3, 4, "Add", kind="output"),
        ],
    }


@pytest.fixture
def plan():
    return plan_from_dict(literal_plan())


@pytest.fixture
def plan_file(tmp_path, plan):
    path = tmp_path / "toy.json"
    write_plan(plan, path)
    return path


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1024) == "1.00 KiB"
    assert format_bytes(5 * 2**20 + 2**19) == "5.50 MiB"


def test_live_curve_counts_an_alias_group_once(plan):
    # hand-computed in literal_plan's docstring
    assert live_curve(plan).tolist() == [1280, 832, 1088, 1216]
    assert live_curve(plan).max() == plan.lower_bound


def test_peak_tensors_largest_first(plan):
    assert [t.name for t in peak_tensors(plan)] == ["a", "x"]
    assert [t.name for t in peak_tensors(plan, step=2)] == ["a", "b", "c"]


def test_contributors_group_by_op_and_count_aliases_once(plan):
    rows = contributors(plan, step=2)
    # a (Conv, 800) and b (Relu, same group) count once under a's op; c is Conv too
    assert [(c.op_type, c.size, c.tensors) for c in rows] == [("Conv", 1056, 2)]
    assert rows[0].share == pytest.approx(1.0)
    shares = contributors(plan)
    assert [c.op_type for c in shares] == ["Conv", "(input)"]
    assert sum(c.share for c in shares) == pytest.approx(1.0)


def test_summary_names_the_peak_and_its_tensors(plan):
    text = render_summary(plan)
    assert "step 0: Conv 'n_a'" in text
    assert "arena/bound 1.050" in text
    live_section = text.split("tensors live at step 0")[1].split("largest contributors")[0]
    assert "a " in live_section and "x " in live_section and " c " not in live_section
    assert "(input)" in text


def test_op_colors_rank_ops_by_bytes_times_steps(plan):
    colors = op_colors(plan)
    assert list(colors)[:3] == ["Conv", "Relu", "Add"]
    assert len(set(colors[o] for o in ("Conv", "Relu", "Add", "(input)"))) == 4


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_has_the_asked_size(tmp_path, plan):
    out = plot_plan(plan, tmp_path / "p.png", width=8, height=5, dpi=50)
    assert png_size(out) == (400, 250)
    import matplotlib.image

    pixels = matplotlib.image.imread(out)
    assert pixels.shape[:2] == (250, 400)
    assert pixels.std() > 0.05  # something was drawn


def test_svg_is_xml_with_one_rectangle_per_tensor(tmp_path, plan):
    out = plot_plan(plan, tmp_path / "p.svg")
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    # matplotlib draws the PolyCollection as paths; the legend names every op
    text = out.read_text()
    for op in ("Conv", "Relu", "Add", "(input)"):
        assert op in text


def test_html_is_self_contained_with_every_tensor_name(tmp_path, plan):
    out = plot_plan(plan, tmp_path / "p.html")
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    for t in plan.tensors:
        assert f"<title>{t.name}\n" in text
    assert text.count('<rect class="t"') == len(plan.tensors)
    assert "<script" not in text and "<link" not in text
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    # the peak step and both reference lines are there
    assert "peak step 0" in text and "lower bound" in text and "arena:" in text


def test_html_escapes_names(tmp_path):
    data = literal_plan()
    data["tensors"][1]["name"] = data["tensors"][1]["group"] = "a<&>"
    data["tensors"][2]["group"] = "a<&>"
    out = plot_plan(plan_from_dict(data), tmp_path / "e.html")
    text = out.read_text()
    assert "a&lt;&amp;&gt;" in text and "a<&>" not in text


def test_unknown_suffix_is_a_user_error(tmp_path, plan):
    with pytest.raises(OnnxmemError, match=r"suffix '\.pdf'"):
        plot_plan(plan, tmp_path / "p.pdf")
    with pytest.raises(OnnxmemError, match="does not exist"):
        plot_plan(plan, tmp_path / "missing" / "p.png")


def test_progress_is_reported(tmp_path, plan):
    seen: list[str] = []
    plot_plan(plan, tmp_path / "p.html", progress=seen.append)
    assert any("live bytes" in s for s in seen) and any("5 tensors" in s for s in seen)


def test_cli_show_and_plot(tmp_path, plan_file):
    runner = CliRunner()
    result = runner.invoke(main, ["show", str(plan_file), "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "tensors live at step 0 (1 of 2" in result.output
    out = tmp_path / "toy.png"
    result = runner.invoke(main, ["plot", str(plan_file), "-o", str(out), "--size", "6x4"])
    assert result.exit_code == 0, result.output
    assert png_size(out) == (600, 400)
    result = runner.invoke(main, ["plot", str(plan_file), "-o", str(tmp_path / "x.gif")])
    assert result.exit_code == 1 and "use one of .png, .svg, .html" in result.output
    result = runner.invoke(main, ["show", str(tmp_path / "nope.json")])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_real_model_plan_report(tmp_path):
    """A plan of a committed zoo fixture: the curve's maximum is the plan's lower bound."""
    from onnxmem.planning.pipeline import plan_model

    model = ROOT / "models" / "zoo" / "mobilenet_v2.onnx"
    if not model.is_file():
        pytest.skip("zoo fixtures not built")
    planned = plan_model(model)
    p = planned.plan
    assert int(live_curve(p).max()) == p.lower_bound
    assert int(live_curve(p).argmax()) == p.peak_step
    out = plot_plan(p, tmp_path / "m.html")
    text = out.read_text()
    assert all(f"<title>{t.name}\n" in text for t in p.tensors)
    summary = render_summary(p)
    assert f"{len(p.order)} steps" in summary
    json.dumps(p.to_dict())
