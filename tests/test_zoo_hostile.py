"""Model strings made to forge the zoo's reports and the messages that quote them: names and op
types with escape sequences, line breaks, quotes and Markdown. `onnxmem zoo --verify cpu` runs on
small real models; the messages are checked where the graph view, the node sessions and the plan
proof make them."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.analysis.aliasing import AliasLayout
from onnxmem.cli.main import main
from onnxmem.core.errors import ModelError, one_line, show_name
from onnxmem.graph import build_view
from onnxmem.proof.plan import prove_plan
from onnxmem.shapes import infer_shapes
from onnxmem.zoo import ZooResult, results_csv, results_markdown
from tests.helpers import make_model, plan_layout, vi

GHOST = "gh'ost\x1b[31mRED\nforged,line"  # a value nothing writes
NODE = "n'\x1b[2J"
OP_TYPE = "Op'\x1b[31m _EMPH_ ~~STRIKE~~ www.evil.example"  # no runtime has it
TWICE = "v'\x1b[1m"
S = [1, 4]


def one_node(op_type: str, inputs: list[str], name: str = NODE) -> onnx.ModelProto:
    """y = op_type(*inputs), x [1, 4] the graph's input."""
    node = helper.make_node(op_type, inputs, ["y"], name=name)
    return make_model([node], [vi("x", S)], [vi("y", S)])


@pytest.fixture(scope="module")
def zoo_out(tmp_path_factory) -> Path:
    """The results folder of `onnxmem zoo --verify cpu` over three models: ghost (an Add of a
    value nothing writes: planning fails), optype (an op no runtime has: verifying fails), ok."""
    tmp = tmp_path_factory.mktemp("hostile")
    folder = tmp / "z"
    folder.mkdir()
    onnx.save(one_node("Add", ["x", GHOST]), folder / "ghost.onnx")
    onnx.save(one_node(OP_TYPE, ["x"]), folder / "optype.onnx")
    onnx.save(one_node("Relu", ["x"], "r"), folder / "ok.onnx")
    out = tmp / "out"
    res = CliRunner().invoke(main, ["zoo", str(folder), "--verify", "cpu", "--out", str(out),
                                    "--executor", "inline", "--model-timeout", "0"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code == 1, res.output  # two models failed, the run went on
    assert "\x1b" not in res.output
    return out


def errors(out: Path) -> dict[str, str]:
    return {m["name"]: m["error"] for m in json.loads((out / "results.json").read_text())["models"]}


# --------------------------------------------------------------------------- results.csv


def test_results_csv_holds_one_line_a_model_and_no_control_character(zoo_out):
    text = (zoo_out / "results.csv").read_text()
    table = list(csv.reader(io.StringIO(text)))
    assert len(table) == 1 + 3 and len(text.splitlines()) == 1 + 3  # no line made by a model
    assert all(cell.isprintable() for row in table for cell in row), text
    by_name = {row[0]: dict(zip(table[0], row)) for row in table[1:]}
    assert by_name["ok"]["status"] == "ok"
    assert by_name["ghost"]["status"] == by_name["optype"]["status"] == "failed"
    assert show_name(GHOST) in by_name["ghost"]["error"]


def test_results_csv_escapes_every_text_field():
    """Each text field: the name, the dims and input shapes (named by the model), the error."""
    error = "a\x1b[2J\nb,c\u2028d"
    hostile = ZooResult(name="m\r\n", path="p", status="failed", error=error, dims={"b\x1b": 1},
                        input_shapes={"x\n": (1, 2)}, solver="s\x07", worker="h\x00:1")
    text = results_csv([hostile, ZooResult(name="ok", path="q", status="ok")])
    table = list(csv.reader(io.StringIO(text)))
    assert len(text.splitlines()) == len(table) == 3
    assert all(cell.isprintable() for row in table for cell in row), text
    row = dict(zip(table[0], table[1]))
    assert row["error"] == one_line(error) and row["name"] == "m\\r\\n"
    assert row["dims"] == "b\\x1b=1" and row["input_shapes"] == "x\\n=1x2"


def test_results_csv_holds_no_formula():
    """A model named (or an error starting) like a spreadsheet formula is text in the CSV."""
    text = results_csv([ZooResult(name="=HYPERLINK(\"http://x\")", path="p", status="failed",
                                  error="@SUM(1)"), ZooResult(name="-1", path="q", status="ok")])
    header, *rows = csv.reader(io.StringIO(text))
    first, second = (dict(zip(header, row)) for row in rows)
    assert first["name"] == "'=HYPERLINK(\"http://x\")" and first["error"] == "'@SUM(1)"
    assert second["name"] == "'-1" and second["status"] == "ok"


# --------------------------------------------------------------------------- results.md


def test_results_md_shows_model_text_escaped(zoo_out):
    md = (zoo_out / "results.md").read_text()
    assert "_EMPH_" not in md and "~~" not in md and "www." not in md and "\x1b" not in md
    assert "\\_EMPH\\_ \\~\\~STRIKE\\~\\~ www\\.evil.example" in md


MARKDOWN = ("see http://evil.example/x, a@b.example, www.c.example <b>x</b> `c` | [l](u) *e* "
            "_u_ ~s~ **t** __v__ snake_case_name_ \\")


def test_results_md_cells_add_no_markdown_and_render_the_same_text():
    md = results_markdown([ZooResult(name="m_1_", path="p", status="failed", error=MARKDOWN)])
    line = next(x for x in md.splitlines() if x.startswith("- **"))
    cell = line.split("(failed): ", 1)[1]
    bare = re.sub(r"\\.", "", cell)  # the text left unescaped: no special, no "_" but in a word
    assert re.search(r"[*~\[\]|`]|(?<![^\W_])_|_(?![^\W_])", bare) is None, cell
    assert "snake_case_name\\_" in cell and "&lt;b&gt;" in cell
    assert "http\\://" in cell and "a\\@b" in cell and "www\\.c" in cell
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(line)
    assert re.findall(r"<(\w+)", rendered) == ["ul", "li", "strong"], rendered  # the name's bold
    assert html.unescape(re.sub(r"<[^>]*>", "", rendered)).strip() == f"m_1_ (failed): {MARKDOWN}"


# --------------------------------------------------------------------------- the messages


def test_the_zoo_error_of_a_node_onnxruntime_cannot_load_quotes_its_name_and_op_type(zoo_out):
    error = errors(zoo_out)["optype"]
    assert f"onnxruntime cannot load node {show_name(NODE)} ({show_name(OP_TYPE)}) alone: " in error
    assert error.isprintable(), error


def test_the_zoo_error_of_a_value_nothing_writes_quotes_the_value_and_the_node(zoo_out):
    error = errors(zoo_out)["ghost"]
    assert f"value {show_name(GHOST)} read by node {show_name(NODE)} (Add) is produced" in error
    assert error.isprintable(), error


def written_twice() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [TWICE], name="first\x1b"),
             helper.make_node("Relu", ["x"], [TWICE], name=NODE),
             helper.make_node("Add", [TWICE, "x"], ["y"], name="add")]
    return make_model(nodes, [vi("x", S)], [vi("y", S)])


def output_nothing_writes() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    return make_model(nodes, [vi("x", S)], [vi("y", S), vi(TWICE, S)])


BROKEN_GRAPHS = [
    ("read, written by none", lambda: one_node("Add", ["x", GHOST]),
     f"value {show_name(GHOST)} read by node {show_name(NODE)} (Add) is produced by no node"),
    ("written twice", written_twice,
     f"value {show_name(TWICE)} is written by node {show_name(NODE)} and also by node "
     f"{show_name('first' + chr(27))}"),
    ("an output nothing writes", output_nothing_writes,
     f"graph output {show_name(TWICE)} is produced by no node or input"),
]


@pytest.mark.parametrize("case,build,words", BROKEN_GRAPHS, ids=[c[0] for c in BROKEN_GRAPHS])
def test_the_graph_view_quotes_the_names_in_its_errors(case, build, words):
    model = build()
    with pytest.raises(ModelError) as err:
        build_view(model, infer_shapes(model))
    assert words in str(err.value) and str(err.value).isprintable(), str(err.value)


def test_the_plan_proof_quotes_the_op_type_of_a_node_that_writes_over_a_live_input(tmp_path):
    """b = OP_TYPE(a) grouped with a, which the Add after it still reads: the finding names the
    node, its op type and both tensors quoted."""
    a, b = "a'\x1b[31m", "b\x1b"
    nodes = [helper.make_node("Relu", ["x"], [a], name="ra"),
             helper.make_node(OP_TYPE, [a], [b], name=NODE),
             helper.make_node("Add", [a, b], ["y"], name="add")]
    model = make_model(nodes, [vi("x", S)], [vi("y", S)], value_info=[vi(b, S)])
    planned = plan_layout(model, tmp_path, AliasLayout({a: (a, b)}), prove=False)
    findings = prove_plan(planned.plan, planned.view)
    words = (f"node {show_name(NODE)} ({show_name(OP_TYPE)}) writes {show_name(b)} over "
             f"{show_name(a)} (alias group {show_name(a)})")
    assert any(words in f.message for f in findings), findings
    assert all(f.message.isprintable() for f in findings), findings
