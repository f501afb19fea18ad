"""Range plans over strided image sizes (a lattice per residue class) and the U-Net batch from 1."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError, ShapeError
from onnxmem.graph import build_view
from onnxmem.planning import PlanOptions, plan_range
from onnxmem.plans import instantiate, range_from_dict, range_to_dict
from onnxmem.proof import prove_plan, prove_range_plan
from onnxmem.shapes import infer_shapes

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = _load("build_models", ROOT / "models" / "build_models.py")


def _save(model: onnx.ModelProto, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _concrete_findings(model, rp, point, dims=None) -> list:
    view = build_view(model, infer_shapes(model, dims={**(dims or {}), **point}))
    return prove_plan(instantiate(rp, point), view)


def test_strided_cnn_every_image_height_of_the_box_is_proven_against_the_model(tmp_path):
    """Stride 32 over H: 32 residue classes, each piece's sizes polynomials in H_q; every H of the box
    instantiates to a plan the concrete proof accepts (its shapes are the model's at that H)."""
    model = MODELS.strided_cnn()
    path = _save(model, tmp_path, "cnn.onnx")
    rp = plan_range(model, path, {"H": (64, 96)}, PlanOptions(dims={"W": 64}))
    assert rp.lattice == {"H": 32}
    assert {p.lattice["H"][1] for p in rp.pieces} == set(range(32))
    assert all(set(p.box) == {"H_q"} for p in rp.pieces)
    assert prove_range_plan(rp) == []
    for h in range(64, 97):
        assert _concrete_findings(model, rp, {"H": h}, {"W": 64}) == [], h


def test_image_sizes_with_a_step_plan_show_instantiate_verify_and_export(tmp_path):
    model = MODELS.strided_cnn()
    path = _save(model, tmp_path, "cnn.onnx")
    out = tmp_path / "r.json"
    runner = CliRunner()
    res = runner.invoke(main, ["plan", str(path), "--dim", "H=64:170:32", "--dim", "W=64:160:32", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "range        H=64:160:32 W=64:160:32" in res.output and "H=32*H_q+0 W=32*W_q+0" in res.output
    rp = range_from_dict(json.loads(out.read_text()))
    assert len(rp.pieces) == 1 and rp.steps == {"H": 32, "W": 32} and rp.box["H"] == (64, 160)
    res = runner.invoke(main, ["verify", str(path), "--plan", str(out), "--dim", "H=96", "--dim", "W=160"])
    assert res.exit_code == 0 and "verified" in res.output, res.output
    res = runner.invoke(main, ["instantiate", str(out), "--dim", "H=97", "--dim", "W=160", "-o",
                               str(tmp_path / "p.json")])
    assert res.exit_code != 0 and "--dim H=97 is off the plan's step" in res.output
    assert "e.g. --dim H=96 or --dim H=128" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "p.json").exists()
    if CC is None:
        return
    header = tmp_path / "plan.h"
    assert runner.invoke(main, ["export", str(out), "--format", "c", "-o", str(header)]).exit_code == 0
    points = [(64, 64), (160, 96), (128, 160), (97, 64), (192, 64)]
    name = rp.pieces[0].tensors[3].name
    ident = name  # the model's names are C identifiers already
    calls = [f'printf("%lld %lld %lld\\n", onnxmem_arena_size({h}, {w}), onnxmem_offset_{ident}({h}, {w}), '
             f'onnxmem_size_{ident}({h}, {w}));' for h, w in points]
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\n#include "plan.h"\nint main(void) {\n' + "\n".join(calls) + "\nreturn 0;\n}\n")
    exe = tmp_path / "main"
    cc = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o", str(exe), str(src)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    want = []
    for h, w in points:
        if h % 32 or h > 160:
            want.append("-1 -1 -1")
            continue
        concrete = instantiate(rp, {"H": h, "W": w})
        t = concrete.tensor(name)
        want.append(f"{concrete.arena_size} {t.offset} {t.size}")
    assert got == want


@pytest.mark.heavy
def test_a_skip_model_refuses_sizes_it_does_not_hold_at_and_names_the_step(tmp_path):
    """Skips concatenated after 2x upsampling match only at H multiple of 8: a range with other
    sizes is refused naming the step; on the step it plans, batch 1 included, and runs."""
    model = MODELS.skip_cnn()
    path = _save(model, tmp_path, "skip.onnx")
    with pytest.raises(ShapeError, match=r"does not hold at every size.*--dim H=16:40:8 --dim batch=1:3"):
        plan_range(model, path, {"H": (16, 40), "batch": (1, 3)}, PlanOptions(dims={"W": 16}))
    rp = plan_range(model, path, {"H": (16, 40), "batch": (1, 3)}, PlanOptions(dims={"W": 16}), steps={"H": 8})
    assert rp.lattice == {"H": 8} and prove_range_plan(rp) == []
    # at batch 1 the skips and upsampled maps sit in their Concat's slices, at offsets that move with H
    batch_one = [p for p in rp.pieces if p.box["batch"] == (1, 1) and p.box["H_q"][0] < p.box["H_q"][1]]
    assert batch_one and any(t.group_offset.names() == {"H_q", "batch"} for t in batch_one[0].tensors)
    assert range_from_dict(json.loads(json.dumps(range_to_dict(rp)))).pieces == rp.pieces
    for h in (16, 24, 40):
        for b in (1, 2, 3):
            assert _concrete_findings(model, rp, {"H": h, "batch": b}, {"W": 16}) == []
    out = tmp_path / "r.json"
    runner = CliRunner()
    res = runner.invoke(main, ["plan", str(path), "--dim", "H=16:40", "--dim", "W=16", "--dim", "batch=1:3"])
    assert res.exit_code != 0 and "--dim H=16:40:8" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(main, ["plan", str(path), "--dim", "H=16:40:8", "--dim", "W=16", "--dim", "batch=1:3",
                               "-o", str(out)])
    assert res.exit_code == 0, res.output
    for b in (1, 3):
        res = runner.invoke(main, ["verify", str(path), "--plan", str(out), "--dim", "H=40", "--dim", f"batch={b}"])
        assert res.exit_code == 0 and "verified" in res.output, res.output


def test_a_lattice_plan_round_trips_and_a_missing_residue_is_found(tmp_path):
    model = MODELS.strided_cnn()
    path = _save(model, tmp_path, "cnn.onnx")
    rp = plan_range(model, path, {"H": (64, 80)}, PlanOptions(dims={"W": 64}))
    data = json.loads(json.dumps(range_to_dict(rp)))
    back = range_from_dict(data)
    assert back.pieces == rp.pieces and back.lattice == rp.lattice
    bad = json.loads(json.dumps(data))
    bad["range"]["pieces"][0]["lattice"]["H"] = [16, 3]
    with pytest.raises(PlanError, match=r"field 'range/pieces/0/lattice/H' is not \[32, RESIDUE\]"):
        range_from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["range"]["pieces"][0]["box"] = {"H": [64, 80]}
    with pytest.raises(PlanError, match="is a dim the plan does not range"):
        range_from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["range"]["box"]["H_q"] = [0, 3]
    with pytest.raises(PlanError, match="whose quotient 'H_q' is a ranged dim too"):
        range_from_dict(bad)
    gone = next(i for i, p in enumerate(back.pieces) if p.lattice["H"][1] == 7)
    holed = back.__class__(**{**{f: getattr(back, f) for f in back.__dataclass_fields__},
                              "pieces": back.pieces[:gone] + back.pieces[gone + 1:]})
    findings = prove_range_plan(holed)
    assert findings and findings[0].kind == "cover" and findings[0].point == {"H": 71}


def _unet_batch(tmp_path: Path) -> Path:
    bench = _load("bench_range", ROOT / "bench" / "bench_range.py")
    return bench.batch_copy(ROOT / "models" / "zoo" / "unet.onnx", tmp_path / "unet_batch.onnx")


def test_unet_batch_range_from_one_is_proven_and_each_point_matches_its_own_plan(tmp_path):
    """The U-Net with its batch named, batch 1:8: batch 1 (Concat inputs in their slices) and the rest."""
    from onnxmem.model import load_model
    from onnxmem.planning import plan_loaded

    path = _unet_batch(tmp_path)
    model = load_model(path)
    rp = plan_range(model, path, {"batch": (1, 8)}, PlanOptions())
    assert prove_range_plan(rp) == []
    assert rp.pieces[0].box == {"batch": (1, 1)}
    for b in (1, 2, 8):
        assert _concrete_findings(model, rp, {"batch": b}) == []
        assert rp.arena_at({"batch": b}) <= plan_loaded(model, path, PlanOptions(dims={"batch": b})).plan.arena_size


def test_the_batch_one_corner_with_concat_slices_and_unaligned_sizes_is_not_refused(tmp_path):
    """A channel Concat of 300-byte inputs at batch 1: the corner of one point gets its buffers' exact
    rounded ends as slots (its largest member's, not its first's), and the proof does not ask a point
    for the rounding room a range needs, so batch 1:8 plans as 2:8 does."""
    from onnx import helper

    from .helpers import make_model, vi

    nodes = [helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Sigmoid", ["x"], ["q"]),
             helper.make_node("Concat", ["p", "q"], ["c"], axis=1), helper.make_node("Tanh", ["c"], ["y"])]
    model = make_model(nodes, [vi("x", ["b", 3, 5, 5])], [vi("y", ["b", 6, 5, 5])])
    path = _save(model, tmp_path, "m.onnx")
    for io in ("internal", "external"):
        rp = plan_range(model, path, {"b": (1, 8)}, PlanOptions(io=io))
        assert rp.pieces[0].box == {"b": (1, 1)}
        if io == "external":  # the Concat output shares its first input's buffer, which is smaller
            assert {t.name: t.group for t in rp.pieces[0].tensors}["c"] == "p"
        assert prove_range_plan(rp) == []
        for b in (1, 2, 8):
            assert _concrete_findings(model, rp, {"b": b}) == []
