"""``show --model`` and ``plot --model`` refuse a plan made for another model, as verify and compare do."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main

from .helpers import chain


@pytest.fixture
def two_models(tmp_path):
    mine, other = tmp_path / "mine.onnx", tmp_path / "other.onnx"
    onnx.save(chain(3, shape=(1, 32)), mine)
    onnx.save(chain(3, shape=(1, 64)), other)
    plan = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(mine), "-o", str(plan)])
    assert r.exit_code == 0, r.output
    return mine, other, plan


def _commands(plan, model, tmp_path):
    return {
        "show": ["show", str(plan), "--model", str(model)],
        "plot": ["plot", str(plan), "--model", str(model), "-o", str(tmp_path / "p.svg")],
    }


def test_plan_of_its_own_model_is_shown_and_drawn(two_models, tmp_path):
    mine, _, plan = two_models
    for name, cmd in _commands(plan, mine, tmp_path).items():
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 0, (name, r.output)
        assert r.stderr == ""
    assert (tmp_path / "p.svg").stat().st_size > 0


def test_plan_of_another_model_is_refused_in_one_line(two_models, tmp_path):
    _, other, plan = two_models
    for name, cmd in _commands(plan, other, tmp_path).items():
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 1, (name, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.output, r.output
        assert "was made for a model with sha256" in lines[0] and "plan this model again" in lines[0]
        assert r.stdout == ""
    assert not (tmp_path / "p.svg").exists()


def test_resaved_model_is_accepted_with_a_warning(two_models, tmp_path):
    mine, _, plan = two_models
    m = onnx.load(mine)
    m.producer_name = "re-saved"  # other bytes, the same graph
    resaved = tmp_path / "resaved.onnx"
    onnx.save(m, resaved)
    for name, cmd in _commands(plan, resaved, tmp_path).items():
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 0, (name, r.output)
        assert "(re-saved?)" in r.stderr and ("showing" if name == "show" else "drawing") in r.stderr


def test_a_model_given_as_the_plan_is_one_line(two_models, tmp_path):
    mine, _, _ = two_models
    for cmd in (["show", str(mine), "--model", str(mine)],
                ["plot", str(mine), "--model", str(mine), "-o", str(tmp_path / "p.svg")]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r.output
        assert "give the JSON plan" in r.stderr
