"""The readers of files other than models against hostile and broken files: plan JSON (as
`show`, `plot`, `compare`, `verify --plan` and `instantiate` read it) and MiniMalloc CSV
instances (`pack`).

Each refusal is one line naming the file, exits non-zero and writes nothing; a plan that
reads but is wrong is never shown as a plan.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from onnxmem.core.errors import PlanError
from onnxmem.core.fileio import MAX_CSV_BYTES
from onnxmem.core.problem import MAX_CSV_ROWS, read_csv
from onnxmem.plans.point import parse_plan_json
from onnxmem.plans.schema import check_schema

from .conftest import MODELS
from .helpers import HANG_S
from .test_export import run

RESNET = MODELS / "resnet_cnn.onnx"


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    """A plan of the shipped CNN, as `onnxmem plan -o` wrote it."""
    out = tmp_path_factory.mktemp("plan") / "good.json"
    r = run("plan", str(RESNET), "-o", str(out))
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def refused(r, code: int = 1) -> str:
    assert r.exit_code == code, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    return r.output


def write(tmp_path: Path, data, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))
    return path


# ---------------------------------------------------------------- JSON text


@pytest.mark.parametrize("first", [True, False])
def test_a_key_given_twice_is_refused(tmp_path, good_plan, first):
    """Python's json keeps the last of two equal keys, other readers the first: the file is ambiguous."""
    text = json.dumps(good_plan, indent=1)
    twice = '"arena_size": 64, "arena_size": 196608' if first else '"arena_size": 196608, "arena_size": 64'
    path = write(tmp_path, text.replace('"arena_size": 196608', twice, 1))
    out = refused(run("show", str(path)))
    assert "p.json' is not a plan" in out and "key 'arena_size' is given twice" in out


def test_a_long_wrong_array_costs_what_one_item_costs(good_plan):
    """The schema check names the first miss without making one per wrong item (5 million
    wrong tensors took 18 GB and 4 minutes)."""
    data = dict(good_plan, tensors=[0] * 50_000)
    check_schema(good_plan, "plan")  # the compiled check is made once per process (about 11 MB at its peak)
    tracemalloc.start()
    try:
        with pytest.raises(PlanError, match="field 'tensors/0': 0 is not of type 'object'"):
            check_schema(data, "plan", "plan file 'p.json'")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20, f"{peak:,} B traced"


def test_the_depth_walk_stacks_no_numbers():
    """An array of millions of numbers is walked for depth without a stack entry per number."""
    data = {"schema_version": 2, "order": [0] * 1_000_000}
    tracemalloc.start()
    try:
        with pytest.raises(PlanError):
            check_schema(data, "plan", "plan file 'p.json'")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20, f"{peak:,} B traced"


@pytest.mark.parametrize("text, kind", [("[" + "0," * 1000 + "0]", "array"), ('"' + "a b " * 1000 + '"', "string"),
                                        ("17", "number"), ("null", "null")])
def test_a_file_that_is_not_an_object_is_named_without_its_contents(tmp_path, text, kind):
    path = write(tmp_path, text)
    out = refused(run("show", str(path)))
    assert f"a JSON {kind} is not a plan" in out and len(out) < 300, out


def test_integers_past_the_digit_bound_are_refused_where_names_hold_long_digits():
    """The digit bound holds whichever way the text is parsed."""
    with pytest.raises(PlanError, match="digits"):
        parse_plan_json(b'{"a": "' + b"1" * 200 + b'", "b": ' + b"9" * 200 + b"}", "plan file 'p.json'")
    assert parse_plan_json(b'{"a": "' + b"1" * 200 + b'", "b": 12}', "x") == {"a": "1" * 200, "b": 12}


# ---------------------------------------------------------------- plans that read but are wrong


def _live_pair(plan: dict) -> tuple[dict, dict]:
    """Two tensors of different groups live at one step, at different offsets."""
    ts = plan["tensors"]
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if (a["start"] < b["end"] and b["start"] < a["end"] and a["offset"] != b["offset"]
                    and a["size"] and b["size"] and a["group"] != b["group"]):
                return a, b
    raise AssertionError("no live pair")


def _overlapping(plan: dict) -> dict:
    bad = json.loads(json.dumps(plan))
    a, b = _live_pair(bad)
    b["offset"] = a["offset"]
    return bad


def _past_arena(plan: dict) -> dict:
    bad = json.loads(json.dumps(plan))
    bad["tensors"][3]["offset"] = bad["arena_size"]
    return bad


def _named_twice(plan: dict) -> dict:
    bad = json.loads(json.dumps(plan))
    bad["tensors"][4]["name"] = bad["tensors"][3]["name"]
    return bad


def _unaligned(plan: dict) -> dict:
    bad = json.loads(json.dumps(plan))
    bad["tensors"][3]["offset"] += 1
    return bad


WRONG = {"overlap": (_overlapping, "share bytes"), "past the arena": (_past_arena, "outside the arena"),
         "named twice": (_named_twice, "appears twice"), "unaligned": (_unaligned, "not a multiple of the alignment")}


@pytest.mark.parametrize("what", sorted(WRONG))
def test_show_and_plot_refuse_a_wrong_plan(tmp_path, good_plan, what):
    """show printed a plan whose live tensors share bytes as 'optimal'; plot drew it."""
    corrupt, says = WRONG[what]
    path = write(tmp_path, corrupt(good_plan))
    out = refused(run("show", str(path)), 3)
    assert says in out and "p.json' is not shown" in out
    png = tmp_path / "p.png"
    out = refused(run("plot", str(path), "-o", str(png)), 3)
    assert says in out and "is not drawn" in out and not png.exists()


def test_show_holds_each_size_to_its_dtype_and_shape(tmp_path, good_plan):
    """A tensor shrunk below its shape's bytes: the plan alone's proof catches it (its dtype and
    shape are in the plan), and so does the model's."""
    bad = json.loads(json.dumps(good_plan))
    t = next(t for t in bad["tensors"] if t["kind"] != "input" and t["size"] > 64)
    t["size"] = 64
    path = write(tmp_path, bad)
    out = refused(run("show", str(path)), 3)
    assert t["dtype"] == "float32" and f"has size 64 B but its dtype and shape give {_dense(t)} B" in out
    out = refused(run("show", str(path), "--model", str(RESNET)), 3)
    assert "p.json' is not shown" in out


def _dense(t: dict) -> int:
    """A float32 tensor's bytes from its shape."""
    n = 1
    for d in t["shape"]:
        n *= d
    return 4 * n


def test_compare_refuses_a_wrong_plan_before_running_onnxruntime(tmp_path, good_plan):
    """compare printed a wrong plan's arena beside onnxruntime's peak as a figure."""
    path = write(tmp_path, _overlapping(good_plan))
    out = refused(run("compare", str(RESNET), "--plan", str(path)), 3)
    assert "p.json' is not compared" in out


def test_show_refuses_a_wrong_program_plan(tmp_path):
    prog = tmp_path / "prog.json"
    r = run("plan", str(RESNET), str(MODELS / "inception_block.onnx"), "-o", str(prog))
    assert r.exit_code == 0, r.output
    assert run("show", str(prog)).exit_code == 0
    data = json.loads(prog.read_text())
    plans = data["program"]["plans"]
    plans[1] = _overlapping(plans[1])
    path = write(tmp_path, data)
    out = refused(run("show", str(path)), 3)
    assert "model 1: tensors" in out and "share bytes" in out and "is not shown" in out


def test_show_refuses_a_wrong_range_plan(tmp_path):
    rng = tmp_path / "range.json"
    r = run("plan", str(MODELS / "transformer_block.onnx"), "--dim", "batch=1:2", "--dim", "seq=8:16", "-o", str(rng))
    assert r.exit_code == 0, r.output
    data = json.loads(rng.read_text())
    for buf in data["range"]["pieces"][0]["buffers"]:
        buf["offset"] = "0"
    path = write(tmp_path, data)
    out = refused(run("show", str(path)), 3)
    assert "the range plan is wrong" in out and "is not shown" in out


# ---------------------------------------------------------------- MiniMalloc CSV (pack)


def test_a_csv_with_a_byte_order_mark_reads(tmp_path):
    """Spreadsheets save UTF-8 CSV with a byte-order mark; it was read as part of the header."""
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfid,lower,upper,size\r\na,0,2,10\r\nb,1,3,20\r\n")
    problem, offsets = read_csv(path)
    assert [(b.id, b.start, b.end, b.size) for b in problem.buffers] == [("a", 0, 2, 10), ("b", 1, 3, 20)]
    assert offsets is None
    out = tmp_path / "sol.csv"
    r = run("pack", str(path), "-o", str(out))
    assert r.exit_code == 0, r.output
    rows = [line.rsplit(",", 1)[0] for line in out.read_text().splitlines()]
    assert rows == ["id,lower,upper,size", "a,0,2,10", "b,1,3,20"]


def test_a_csv_error_names_the_line_it_is_on(tmp_path):
    """Blank lines were dropped before the rows were numbered: the error named another line."""
    path = tmp_path / "p.csv"
    path.write_text("id,lower,upper,size\n\n\na,0,2,10\n\nb,0,2,x\n")
    out = refused(run("pack", str(path)))
    assert "p.csv':6: size 'x' is not an integer" in out


def test_a_csv_error_of_the_whole_problem_names_the_file(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,lower,upper,size\na,0,2,10\na,1,3,20\n")
    out = refused(run("pack", str(path)))
    assert "CSV file '" in out and "p.csv': buffer id 'a' appears twice" in out


def test_a_csv_of_too_many_rows_is_refused(tmp_path):
    """A file of blank lines (or of empty fields) was read into a list of every row first (50
    million blank lines: 3.9 GB), then solved as a problem of no buffers (exit 0)."""
    path = tmp_path / "p.csv"
    path.write_text("id,lower,upper,size\n" + ",,,\n" * MAX_CSV_ROWS)
    out = refused(run("pack", str(path)))
    assert f"has more than {MAX_CSV_ROWS:,} rows" in out


@pytest.mark.heavy
def test_csv_rows_are_read_one_at_a_time(tmp_path):
    """All rows were held as lists before the first was read (900,000 blank lines: 60 MB more
    than the 17 MB a read holds: its 16 MB buffer and the text)."""
    path = tmp_path / "p.csv"
    path.write_text("id,lower,upper,size\n" + "\n" * 900_000 + "a,0,2,10\n")
    tracemalloc.start()
    try:
        problem, _ = read_csv(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(problem) == 1
    assert peak < 32 * 2**20, f"{peak:,} B traced"


def test_a_csv_past_the_byte_bound_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "p.csv"
    with path.open("wb") as fh:
        fh.truncate(MAX_CSV_BYTES + 1)  # sparse: no disk used
    out = refused(run("pack", str(path)))
    assert f"more than the {MAX_CSV_BYTES:,} onnxmem reads" in out


def test_compare_refuses_another_models_plan_with_this_models_record(tmp_path, good_plan):
    """A plan of another model whose ``model`` record (path, sha256) was copied from this model's
    passed the identity check, and its arena was compared with this model's run."""
    other = tmp_path / "other.json"
    r = run("plan", str(MODELS / "inception_block.onnx"), "-o", str(other))
    assert r.exit_code == 0, r.output
    data = json.loads(other.read_text())
    data["model"] = good_plan["model"]
    path = write(tmp_path, data)
    out = refused(run("compare", str(RESNET), "--plan", str(path)), 3)
    assert "which the model does not have" in out and "p.json' is not compared" in out


def test_a_lower_bound_above_the_arena_is_refused(tmp_path, good_plan):
    """show printed an arena a tenth of its own lower bound ('arena/bound 0.100'); verify passed it."""
    bad = dict(good_plan, lower_bound=good_plan["arena_size"] * 10)
    path = write(tmp_path, bad)
    out = refused(run("show", str(path)), 3)
    assert "lower bound 1,966,080 B is above its arena of 196,608 B" in out
    r = run("verify", str(RESNET), "--plan", str(path), "--static-only")
    assert r.exit_code == 3 and "error: the plan is wrong: the plan's lower bound" in r.output, r.output


def test_a_lone_surrogate_is_refused_where_a_pair_reads(tmp_path, good_plan):
    """A tensor named "\\ud800" (an escape JSON allows, no character) made plot -o .html end
    in a UnicodeEncodeError traceback; an escaped pair (ensure_ascii's astral characters) is text."""
    bad = json.loads(json.dumps(good_plan))
    old = bad["tensors"][5]["name"]
    text = json.dumps(bad).replace(json.dumps(old), '"\\ud800"')
    path = write(tmp_path, text)
    html = tmp_path / "p.html"
    out = refused(run("plot", str(path), "-o", str(html)))
    assert "holds a lone UTF-16 surrogate" in out and not html.exists()
    fine = write(tmp_path, dict(good_plan, warnings=["\U0001f600"]), "fine.json")
    assert "\\ud83d\\ude00" in fine.read_text()
    assert run("show", str(fine)).exit_code == 0


@pytest.mark.parametrize("size", ["700x700", "-5x7", "nanx7", "infx7", "0x0", "12x1e400", "1x1", "2x2", "4.9x7",
                                  "12x2.9", "12x1", "1x50", "50x51"])
def test_plot_refuses_a_picture_size_past_its_bounds(tmp_path, good_plan, size):
    """--size 700x700 drew a 70,000-pixel-square PNG (184 s, 19 GB); a side not positive and
    finite ended in matplotlib's ValueError traceback; 1x1, 2x2 or 12x1 printed matplotlib's
    warning that its layout collapsed and drew the panels over each other."""
    path = write(tmp_path, good_plan)
    png = tmp_path / "p.png"
    r = run("plot", str(path), "-o", str(png), f"--size={size}")
    assert r.exit_code == 2 and "Invalid value for --size" in r.output, r.output
    assert "the width is 5 to 50 inches and the height 3 to 50" in r.output, r.output
    assert not png.exists()


@pytest.mark.parametrize("timeout", ["nan", "inf", "1e400"])
def test_pack_refuses_a_timeout_that_is_not_finite(tmp_path, timeout):
    """--timeout nan was taken (a search stopped at once, 'status timeout', 'budget nan s'), and
    inf was a search with no end."""
    path = tmp_path / "p.csv"
    path.write_text("id,lower,upper,size\na,0,2,10\nb,1,3,20\n")
    out = refused(run("pack", str(path), "--timeout", timeout))
    assert "must be a positive, finite number of seconds (--timeout)" in out


# ---------------------------------------------------------------- .npz inputs (--inputs)


def _npy(shape: tuple[int, ...]) -> bytes:
    """An .npy header of float32 ``shape`` and no data."""
    head = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    head += " " * (64 - (10 + len(head) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode()


def test_an_npz_member_declaring_more_than_it_holds_is_refused(tmp_path):
    """A 236-byte file declaring a 4 TiB array ended as 'ran out of memory ... give smaller input
    shapes': numpy allocates the declared array before it reads a byte."""
    import zipfile

    path = tmp_path / "in.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("image.npy", _npy((2**40,)))
    r = run("verify", str(RESNET), "--inputs", str(path), "--static-only")
    out = refused(r)
    assert "member 'image.npy' declares an array of 4,398,046,511,104 B but holds 128 B" in out


def _zip_edited(path, central: dict[int, bytes], local: dict[int, bytes]) -> None:
    """Overwrite bytes of the first central directory entry and the first local header of the zip
    at ``path`` (offsets from each record's signature)."""
    data = bytearray(path.read_bytes())
    for sig, edits in ((b"PK\x01\x02", central), (b"PK\x03\x04", local)):
        at = data.index(sig)
        for off, value in edits.items():
            data[at + off:at + off + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("central, local, said", [
    ({6: (173).to_bytes(2, "little")}, {}, "is not an .npz file (a zip of .npy arrays)"),  # version 17.3
    ({8: b"\x01\x00"}, {6: b"\x01\x00"}, "has an array numpy cannot read without pickle"),  # encrypted
])
def test_an_npz_zipfile_cannot_read_is_refused_in_one_line(tmp_path, central, local, said):
    """A zip whose entry needs a later zip version made Python's reader raise NotImplementedError
    (a traceback; fuzz seed 1400000, feeds:1400522), and an encrypted member a RuntimeError."""
    path = tmp_path / "in.npz"
    np.savez(path, image=np.zeros((1, 3, 224, 224), np.float32))
    _zip_edited(path, central, local)
    r = run("verify", str(RESNET), "--inputs", str(path), "--static-only")
    assert said in refused(r)


def _false_lives(plan: dict) -> dict:
    """Every tensor a group of its own, live one step, at offset 0 (or just above the largest,
    past the order's length): the rules the plan alone can be held to pass; the graph's do not."""
    bad = json.loads(json.dumps(plan))
    n, align = len(bad["order"]), bad["alignment"]
    top = -(-max(t["size"] for t in bad["tensors"]) // align) * align
    for i, t in enumerate(bad["tensors"]):
        t.update(start=i % n, end=i % n + 1, group=t["name"], offset=0 if i < n else top)
        t["object"] = None
    return bad


def test_show_with_the_model_proves_a_plan_of_onnxruntimes_graph(tmp_path):
    """A plan made with --optimize is of the graph onnxruntime builds, not of MODEL as written:
    show and plot --model check it is MODEL's and hold it to the whole proof against that graph,
    built again as verify builds it; export --model, which reads MODEL as written, refuses it."""
    from onnxmem.plans import read_plan
    from onnxmem.proof import prove_plan_alone

    plan = tmp_path / "opt.json"
    r = run("plan", str(RESNET), "--optimize", "all", "-o", str(plan))
    assert r.exit_code == 0, r.output
    r = run("show", str(plan), "--model", str(RESNET))
    assert r.exit_code == 0, r.output
    path = write(tmp_path, _overlapping(json.loads(plan.read_text())))
    assert "the plan is wrong: tensors of alias group" in refused(run("show", str(path), "--model", str(RESNET)), 3)
    lies = write(tmp_path, _false_lives(json.loads(plan.read_text())), "lies.json")
    assert prove_plan_alone(read_plan(lies, "point")) == []  # the plan alone passes
    assert run("show", str(lies)).exit_code == 0
    for cmd in (("show", str(lies)), ("plot", str(lies), "-o", str(tmp_path / "lies.png"))):
        out = refused(run(*cmd, "--model", str(RESNET)), 3)
        assert "the plan is wrong" in out and "re-plan the model" in out
    assert not (tmp_path / "lies.png").exists()
    for fmt, out in (("tflm", "x.bin"), ("onnx", "x.onnx")):
        said = refused(run("export", str(plan), "--format", fmt, "--model", str(RESNET), "-o", str(tmp_path / out)))
        assert "is a plan of the graph onnxruntime builds (level all for cpu" in said
        assert "plan MODEL with --optimize none for this format" in said and not (tmp_path / out).exists()


# ---------------------------------------------------------------- the overlap check every reader runs


@pytest.mark.parametrize("block", [2, 512])
def test_the_overlap_sweep_finds_the_pairs_a_brute_force_finds(monkeypatch, block):
    """validate finds pairs by one sweep with a sorted active set (a plan of 60,000 tensors live
    at once took 9.3 s to prove without its model, 0.26 s now): every pair that shares a byte
    while both are live, against all pairs checked one by one; small blocks split often."""
    import random

    import onnxmem.core.sortedblocks as blocks
    from onnxmem.core.problem import Buffer, Problem, validate

    monkeypatch.setattr(blocks, "BLOCK", block)
    rng = random.Random(block)
    for _ in range(400):
        n = rng.randint(1, 30)
        bufs = []
        for k in range(n):
            start = rng.randint(0, 8)
            bufs.append(Buffer(f"b{k}", start, start + rng.randint(1, 5), rng.choice([0, 1, 2, 3, 5, 8])))
        offs = [rng.randint(0, 24) for _ in bufs]
        want = {frozenset((a.id, b.id)) for i, a in enumerate(bufs) for b in bufs[i + 1:]
                if a.size and b.size and a.start < b.end and b.start < a.end
                and offs[i] < offs[bufs.index(b)] + b.size and offs[bufs.index(b)] < offs[i] + a.size}
        got = validate(Problem(tuple(bufs)), offs)
        assert {frozenset(v.buffers) for v in got if v.kind == "overlap"} == want
        first = validate(Problem(tuple(bufs)), offs, limit=1)
        assert bool(first) == bool(got)


def test_show_of_a_point_plan_loads_no_onnx(tmp_path, good_plan):
    """The proof show runs on a plan alone needs no graph: onnx stays unloaded (it costs 0.3 s)."""
    import subprocess
    import sys

    path = write(tmp_path, good_plan)
    code = ("import sys\nfrom onnxmem.cli.main import main\n"
            f"try:\n    main(['show', {str(path)!r}])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('onnx' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"
