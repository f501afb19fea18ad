"""The ``zoo`` family: zoo folders holding special files (a character device with /dev/null's or
/dev/zero's numbers, a link to /dev/zero, a FIFO), links out of the folder, link loops, a folder
named ``*.onnx``, a huge sparse file; zoo lists naming such paths; and ``--write-baseline``
pointed at one of the zoo's own models (must be refused). Runs ``onnxmem zoo SOURCE --out
out/res``, with and without ``--verify cpu``, and ``--executor inline --model-timeout 0``: the models run in
the worker's own process, where the audit hook sees them (a child process would be a
``pwned`` start and out of the hook's sight)."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

from .common import CANARY, Case
from .corpus import Corpus

#: what the zoo folder holds besides one valid model
KINDS = ("chardev_null", "chardev_zero", "link_dev_zero", "fifo", "link_out", "link_folder_out",
         "link_loop", "link_folder_loop", "folder_onnx", "sparse", "absolute_link")
SPARSE_SIZES = (2**33, 2**40)
#: the canary by an absolute path that is the same in every case folder (the run's working folder)
ABS_CANARY = f"/proc/self/cwd/{CANARY}"


def _mknod(path: Path, minor: int) -> str:
    """A character device with /dev/null's (1, 3) or /dev/zero's (1, 5) numbers; a FIFO where
    the process may not create devices."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        return "character device"
    except OSError:
        os.mkfifo(path)
        return "FIFO (no permission for a device)"


def _plant(kind: str, zdir: Path, rng: random.Random) -> tuple[str, str]:
    """Put the hostile entry ``kind`` in ``zdir``; its name and a note."""
    if kind in ("chardev_null", "chardev_zero"):
        return "dev.onnx", _mknod(zdir / "dev.onnx", 3 if kind == "chardev_null" else 5)
    if kind == "link_dev_zero":
        os.symlink("/dev/zero", zdir / "zero.onnx")
        return "zero.onnx", "link to /dev/zero"
    if kind == "fifo":
        os.mkfifo(zdir / "pipe.onnx")
        return "pipe.onnx", "FIFO"
    if kind == "link_out":
        os.symlink("../../outside/canary.bin", zdir / "out.onnx")
        return "out.onnx", "link to a file outside"
    if kind == "absolute_link":
        os.symlink(ABS_CANARY, zdir / "abs.onnx")
        return "abs.onnx", "absolute link to a file outside"
    if kind == "link_folder_out":
        (zdir.parent.parent / "outside" / "more.onnx").write_bytes((zdir / "a.onnx").read_bytes())
        os.symlink("../../outside", zdir / "sub")
        return "sub/more.onnx", "link to the folder outside"
    if kind == "link_loop":
        os.symlink("loop_b.onnx", zdir / "loop_a.onnx")
        os.symlink("loop_a.onnx", zdir / "loop_b.onnx")
        return "loop_a.onnx", "link loop"
    if kind == "link_folder_loop":
        os.symlink(".", zdir / "again")
        return "again/a.onnx", "a link to the zoo folder inside it"
    if kind == "folder_onnx":
        (zdir / "dir.onnx").mkdir()
        return "dir.onnx", "folder named dir.onnx"
    size = rng.choice(SPARSE_SIZES)
    with open(zdir / "big.onnx", "wb") as fh:
        fh.truncate(size)
    return "big.onnx", f"sparse file of {size} bytes"


def zoo_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = corpus.by_name("mlp")
    mdir = folder / "model"
    zdir = mdir / "zoo"
    zdir.mkdir(parents=True, exist_ok=True)
    (zdir / "a.onnx").write_bytes(base.files[base.main])
    kind = KINDS[seed % len(KINDS)] if rng.random() < 0.6 else rng.choice(KINDS)
    name, note = _plant(kind, zdir, rng)
    how = rng.choice(("folder", "folder", "list", "baseline"))
    source = "model/zoo"
    if how == "list":
        lines = ["zoo/a.onnx", f"zoo/{name}"]
        lines += rng.sample(["../outside/canary.bin", "/dev/zero", "zoo", "zoo/../zoo/a.onnx",
                             ABS_CANARY], 2)
        (mdir / "zoo.txt").write_text("\n".join(lines) + "\n")
        source, note = "model/zoo.txt", f"{note}; list naming {lines[1:]}"
    argv = ["zoo", source, "--out", "out/res", "--executor", "inline", "--model-timeout", "0"]
    verify = rng.random() < 0.5
    if verify:
        argv += ["--verify", "cpu"]
    must_fail = how == "baseline"
    if must_fail:
        argv += ["--write-baseline", "model/zoo/a.onnx"]
        note += "; --write-baseline over a model of the zoo"
    return Case("zoo", seed, "zoo --verify" if verify else "zoo", argv, [], [], note=f"{kind}: {note}",
                ok_codes=(3,), must_fail=must_fail, output_dirs=["out/res"])
