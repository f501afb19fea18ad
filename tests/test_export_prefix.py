"""`onnxmem export --format c --prefix NAME`: headers of two plans in one C translation unit.

Two real models are planned with the CLI and exported with two prefixes; one C file includes
both headers, is compiled with the system C compiler (C99, pedantic, warnings as errors) and
run, and what it prints is checked against each plan's JSON (a range plan: against
``instantiate`` at points of its box). The same headers without prefixes do not compile
together; a prefix that is no safe C identifier is refused on the command line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.export import export_plan
from onnxmem.export.c_header import MAX_PREFIX, c_identifiers, c_prefix, ident_limit
from onnxmem.plans import instantiate, read_plan

from .helpers import batch_chain, chain, diamond_model, make_model, vi

CC = shutil.which("cc")
CXX = shutil.which("c++")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc)")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def planned(tmp_path, stem: str, model: onnx.ModelProto, *flags: str):
    """``model`` saved as ``stem.onnx`` and planned with the CLI: the plan file's path."""
    mpath, ppath = tmp_path / f"{stem}.onnx", tmp_path / f"{stem}.plan.json"
    onnx.save(model, mpath)
    r = run("plan", str(mpath), "-o", str(ppath), *flags)
    assert r.exit_code == 0, r.output
    return ppath


def exported(tmp_path, ppath, name: str, *flags: str):
    """``ppath`` exported as the C header ``name``: its path."""
    out = tmp_path / name
    r = run("export", str(ppath), "--format", "c", "-o", str(out), *flags)
    assert r.exit_code == 0, r.output
    return out


def compile_c(tmp_path, headers: list[str], body: str):
    """``main.c`` including ``headers`` around ``body``, compiled: the compiler's result and the program."""
    src = tmp_path / "main.c"
    src.write_text("#include <stdio.h>\n" + "".join(f'#include "{h}"\n' for h in headers)
                   + "int main(void) {\n" + body + "return 0;\n}\n")
    exe = tmp_path / "main"
    cc = subprocess.run([CC, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)],
                        capture_output=True, text=True, cwd=tmp_path)
    return cc, exe


def point_program(prefix: str, names: list[str]) -> str:
    """C statements printing, under ``prefix``, the arena, every tensor's #defines and every table row."""
    low, up = prefix.lower(), prefix.upper()
    lines = [f'printf("{low} arena %llu count %llu\\n", (unsigned long long){up}_ARENA_SIZE, '
             f"(unsigned long long){up}_TENSOR_COUNT);"]
    for ident in c_identifiers(names, ident_limit(prefix)):
        lines.append(f'printf("{low} define %llu %llu\\n", (unsigned long long){up}_OFFSET_{ident}, '
                     f"(unsigned long long){up}_SIZE_{ident});")
    lines.append(f"{{ size_t i; for (i = 0; i < {up}_TENSOR_COUNT; i++) "
                 f'printf("{low} row %s %llu %llu\\n", {low}_tensors[i].name, {low}_tensors[i].offset, '
                 f"{low}_tensors[i].size); }}")
    return "\n".join(lines) + "\n"


def point_expected(prefix: str, ppath) -> list[str]:
    data = json.loads(ppath.read_text())
    tensors = data["tensors"]
    return ([f"{prefix} arena {data['arena_size']} count {len(tensors)}"]
            + [f"{prefix} define {t['offset']} {t['size']}" for t in tensors]
            + [f"{prefix} row {t['name']} {t['offset']} {t['size']}" for t in tensors])


def two_plans(tmp_path):
    """The plans of two different models (whose tensors share the names x and y)."""
    return planned(tmp_path, "enc", chain(4, (1, 16))), planned(tmp_path, "dec", diamond_model(8, 4))


@needs_cc
def test_two_point_headers_in_one_c_file(tmp_path):
    enc, dec = two_plans(tmp_path)
    exported(tmp_path, enc, "enc.h", "--prefix", "enc")
    exported(tmp_path, dec, "dec.h", "--prefix", "Dec")  # letters' case does not matter
    names = {p: [t["name"] for t in json.loads(f.read_text())["tensors"]] for p, f in (("enc", enc), ("dec", dec))}
    assert "sig" in names["dec"] and "sig" not in names["enc"]
    cc, exe = compile_c(tmp_path, ["enc.h", "dec.h"], point_program("enc", names["enc"])
                        + point_program("dec", names["dec"]))
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == point_expected("enc", enc) + point_expected("dec", dec)
    # the arenas differ, so each header's values reached the program from its own plan
    assert json.loads(enc.read_text())["arena_size"] != json.loads(dec.read_text())["arena_size"]
    if CXX is not None:  # the pair is valid C++ too
        (tmp_path / "main.cpp").write_text('#include "enc.h"\n#include "dec.h"\n'
                                           "int main() { return enc_tensors[0].size == dec_tensors[0].size; }\n")
        cxx = subprocess.run([CXX, "-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
                              "main.cpp"], capture_output=True, text=True, cwd=tmp_path)
        assert cxx.returncode == 0, cxx.stderr


@needs_cc
def test_the_same_headers_without_prefixes_do_not_compile_together(tmp_path):
    enc, dec = two_plans(tmp_path)
    exported(tmp_path, enc, "enc.h")
    dec_h = exported(tmp_path, dec, "dec.h")
    # the second header's shared guard hides it: its tensors are undeclared
    body = 'printf("%llu %llu\\n", (unsigned long long)ONNXMEM_OFFSET_t0, (unsigned long long)ONNXMEM_OFFSET_sig);\n'
    cc, _ = compile_c(tmp_path, ["enc.h", "dec.h"], body)
    assert cc.returncode != 0 and "ONNXMEM_OFFSET_sig" in cc.stderr
    # and a guard of its own is not enough: the table, the type and the macros collide
    dec_h.write_bytes(dec_h.read_bytes().replace(b"ONNXMEM_PLAN_H", b"DEC_PLAN_H"))
    cc, _ = compile_c(tmp_path, ["enc.h", "dec.h"], body)
    assert cc.returncode != 0 and "onnxmem_tensors" in cc.stderr


@needs_cc
def test_two_range_headers_and_a_point_header_in_one_c_file(tmp_path):
    enc = planned(tmp_path, "enc", batch_chain(8), "--dim", "batch=1:16")
    dec = planned(tmp_path, "dec", batch_chain(24), "--dim", "batch=1:8")
    point = planned(tmp_path, "pt", chain(3, (1, 16)))
    exported(tmp_path, enc, "enc.h", "--prefix", "enc")
    exported(tmp_path, dec, "dec.h", "--prefix", "dec")
    exported(tmp_path, point, "pt.h", "--prefix", "pt")
    body, want = [], []
    plans = {"enc": read_plan(enc, "range"), "dec": read_plan(dec, "range")}
    for prefix, rp in plans.items():
        for batch in (1, 5, 8, 16, 17):
            body.append(f'printf("%lld\\n", {prefix}_arena_size({batch}));')
            body += [f'printf("%lld %lld\\n", {prefix}_offset_{n}({batch}), {prefix}_size_{n}({batch}));'
                     for n in ("x", "h", "y")]
            inside = batch <= rp.box["batch"][1]
            concrete = instantiate(rp, {"batch": batch}) if inside else None
            want.append(str(concrete.arena_size) if concrete else "-1")
            want += [f"{concrete.tensor(n).offset} {concrete.tensor(n).size}" if concrete else "-1 -1"
                     for n in ("x", "h", "y")]
    pt_names = [t["name"] for t in json.loads(point.read_text())["tensors"]]
    cc, exe = compile_c(tmp_path, ["enc.h", "dec.h", "pt.h"], "\n".join(body) + "\n" + point_program("pt", pt_names))
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == want + point_expected("pt", point)
    # without prefixes the two range headers share their guard: the second one's dims are not its own
    exported(tmp_path, enc, "enc0.h")
    exported(tmp_path, dec, "dec0.h")
    text = (tmp_path / "dec0.h").read_bytes().replace(b"ONNXMEM_RANGE_PLAN_H", b"DEC_RANGE_PLAN_H")
    (tmp_path / "dec0.h").write_bytes(text)
    cc, _ = compile_c(tmp_path, ["enc0.h", "dec0.h"], 'printf("%lld\\n", onnxmem_arena_size(1));\n')
    assert cc.returncode != 0 and "onnxmem_arena_size" in cc.stderr


@needs_cc
def test_the_longest_prefix_keeps_every_name_within_63_characters(tmp_path):
    long = ["n" * 60 + s for s in "abc"]  # equal in their first 60 characters
    nodes = [helper.make_node("Relu", [a], [b], name=f"relu{i}") for i, (a, b) in enumerate(zip(["x", *long], long))]
    ppath = planned(tmp_path, "long", make_model(nodes, [vi("x", [1, 4])], [vi(long[-1], [1, 4])]))
    prefix = "p" * MAX_PREFIX
    header = exported(tmp_path, ppath, "long.h", "--prefix", prefix).read_text()
    defined = re.findall(r"#define (\w+)", header) + re.findall(r"\b(p+_\w+)\b", header)
    assert max(map(len, defined)) == 63
    assert len({d[:63] for d in set(defined)}) == len(set(defined))  # distinct in what C99 compares
    names = [t["name"] for t in json.loads(ppath.read_text())["tensors"]]
    cc, exe = compile_c(tmp_path, ["long.h"], point_program(prefix, names))
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == point_expected(prefix, ppath)


@pytest.mark.parametrize(("prefix", "rule"), [
    ("enc-1", "is not a C identifier"), ("9enc", "is not a C identifier"), ("", "is not a C identifier"),
    ("énc", "is not a C identifier"), ("a\nb", "is not a C identifier"), ("_enc", "starts with '_'"),
    ("__enc", "starts with '_'"), ("enc_", "'__'"), ("a__b", "'__'"), ("x" * (MAX_PREFIX + 1), "at most 31"),
])
def test_a_bad_prefix_is_refused_in_one_line(tmp_path, prefix, rule):
    ppath = planned(tmp_path, "m", chain(2))
    out = tmp_path / "m.h"
    r = run("export", str(ppath), "--format", "c", "-o", str(out), "--prefix", prefix)
    assert r.exit_code == 2
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: --prefix ") and rule in errors[0], r.output
    assert not out.exists()
    with pytest.raises(OnnxmemError, match=re.escape(rule)):
        c_prefix(prefix)


def test_prefix_only_for_formats_that_define_names(tmp_path):
    ppath = planned(tmp_path, "m", chain(2))
    out = tmp_path / "m.json"
    r = run("export", str(ppath), "--format", "json", "-o", str(out), "--prefix", "enc")
    assert r.exit_code == 2 and "Error: format 'json' defines no C names; leave --prefix out" in r.output
    assert not out.exists()
    plan = read_plan(ppath)
    with pytest.raises(OnnxmemError, match="leave --prefix out"):
        export_plan(plan, "tflm", prefix="enc")
    # the default prefix is the header without one, byte for byte
    assert export_plan(plan, "c", prefix="onnxmem") == export_plan(plan, "c")
    assert b"ENC_ARENA_SIZE" in export_plan(plan, "c", prefix="enc")
