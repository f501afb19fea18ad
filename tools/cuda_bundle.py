"""Pack onnxruntime-gpu small enough to carry to a GPU machine that reaches no package index.

The onnxruntime-gpu wheel holds GPU code for every architecture it supports (its CUDA
provider library is 271 MiB for 1.31.1); a machine of one architecture needs one. This
tool downloads the wheel, zeroes in ``libonnxruntime_providers_cuda.so`` the compiled GPU
code (cubins of the ``.nv_fatbin`` section) of every other architecture and, unless
``--keep-contrib``, that of the kernels no standard op runs (cubins of CUTLASS, flash
attention, MoE, XQA or the weight-only GEMMs with no kernel of the ``onnxruntime::cuda``
namespace), leaves out the libraries the Python module does not load, and writes
``ort-gpu.tar.xz`` (22 MB for 1.31.1 and sm_90, where the wheel is 256 MB) with the
wheels of onnxmem's pure-Python needs the GPU image lacks. A kernel whose code was zeroed
fails to load on the device; it never computes anything.

    python tools/cuda_bundle.py .gpu                 # sm_90 (H100, H200), Python 3.12
    python tools/cuda_bundle.py .gpu --arch 80 --python 3.11

On the GPU machine (``.gpu`` carried there)::

    mkdir -p /tmp/ortg && tar -C /tmp/ortg -xJf .gpu/ort-gpu.tar.xz
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl
    export PYTHONPATH=/tmp/ortg:/tmp/site:$PWD

with the CUDA libraries' folders on ``LD_LIBRARY_PATH`` (docs/cuda.md). Needs ``pip`` and
the ``zstd`` command (the cubins are zstd-compressed) on this machine.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FATBIN_MAGIC = 0xBA55ED50
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: pure-Python needs of onnxmem (and one of theirs) missing from the GPU image
EXTRA = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "fastjsonschema")
#: the Python module loads neither: the C API library and the TensorRT provider
LEFT_OUT = ("libonnxruntime.so.", "libonnxruntime_providers_tensorrt.so")
STANDARD_KERNELS = b"11onnxruntime4cuda"  # the mangled namespace onnxruntime::cuda
#: in a kernel's mangled name, a library that only contrib ops use: CUTLASS, flash attention,
#: XQA, the weight-only GEMMs (onnxruntime::llm), mixture of experts, fused attention
CONTRIB_ONLY = (b"cutlass", b"flash", b"xqa", b"3llm", b"moe", b"Moe", b"fmha", b"lean")


class BundleError(Exception):
    """A one-line reason the bundle cannot be made."""


def fatbin_section(data: bytes | bytearray) -> tuple[int, int]:
    """``(offset, size)`` of the ``.nv_fatbin`` section of the ELF64 file ``data``."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise BundleError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)

    names = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        start = names + h[0]
        if bytes(data[start:data.index(0, start)]) == b".nv_fatbin":
            return h[4], h[5]
    raise BundleError("no .nv_fatbin section: no GPU code to select")


def cubins(data: bytes | bytearray) -> Iterator[tuple[int, int, int]]:
    """``(architecture, payload offset, payload size)`` of each entry of every fatbin container
    in the ``.nv_fatbin`` section (containers start 8-byte aligned)."""
    off, size = fatbin_section(data)
    p, end = off, off + size
    while p + 16 <= end:
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, p)
        if magic != FATBIN_MAGIC:
            p += 8
            continue
        q, stop = p + hsize, p + hsize + fsize
        while q < stop:
            _kind, _unused, ehs, esize = struct.unpack_from("<HHIQ", data, q)
            arch = struct.unpack_from("<I", data, q + 28)[0]
            yield arch, q + ehs, esize
            q += ehs + esize
        p = off + ((stop - off + 7) & ~7)


def kernel_names(payload: bytes) -> bytes:
    """The bytes of a cubin in which its kernels' mangled names appear (zstd-compressed ones
    decompressed by the ``zstd`` command)."""
    if not payload.startswith(ZSTD_MAGIC):
        return payload
    got = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload, capture_output=True, check=False)
    return got.stdout


def select(data: bytearray, keep: set[int], wanted: Callable[[bytes], bool] | None = None) -> dict[str, int]:
    """Zero in ``data`` every cubin of an architecture not in ``keep``, and of the kept ones
    those whose payload ``wanted`` refuses; bytes kept and zeroed."""
    kept = zeroed = 0
    for arch, start, size in list(cubins(data)):
        if arch in keep and (wanted is None or wanted(bytes(data[start:start + size]))):
            kept += size
            continue
        data[start:start + size] = bytes(size)
        zeroed += size
    return {"kept": kept, "zeroed": zeroed}


def standard_only(payload: bytes) -> bool:
    """Whether to keep a cubin: it holds a kernel of a standard op (namespace
    ``onnxruntime::cuda``), or none of its kernels' names is of a library only contrib ops
    use (:data:`CONTRIB_ONLY`). The rule the H200 runs of docs/cuda.md were made with."""
    names = b" ".join(re.findall(rb"_Z\w{10,}", kernel_names(payload)))
    return STANDARD_KERNELS in names or not any(m in names for m in CONTRIB_ONLY)


def _pip_download(names: list[str], python: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
           "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(dest), *names]
    got = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if got.returncode:
        raise BundleError(f"pip download {' '.join(names)} failed: {(got.stderr.strip().splitlines() or ['?'])[-1]}")


def _pins(names: tuple[str, ...]) -> list[str]:
    """``NAME==VERSION`` of each of ``names`` from constraints.txt (else the name alone)."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return [f"{n}=={pins[n]}" if n in pins else n for n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write ort-gpu.tar.xz and whl/ into")
    parser.add_argument("--arch", default="90", help="comma-separated SM architectures to keep (default 90)")
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--version", default=None, help="onnxruntime-gpu version (default: constraints.txt's)")
    parser.add_argument("--keep-contrib", action="store_true", help="keep the kept architectures' contrib kernels")
    opts = parser.parse_args(argv)
    try:
        keep = {int(a) for a in opts.arch.split(",")}
    except ValueError:
        parser.error(f"--arch {opts.arch!r}: give SM numbers such as 90 or 80,90")
    if not opts.keep_contrib and shutil.which("zstd") is None:
        print("error: the zstd command is missing: install zstd, or pass --keep-contrib", file=sys.stderr)
        return 1
    ort = f"onnxruntime-gpu=={opts.version}" if opts.version else _pins(("onnxruntime-gpu",))[0]
    try:
        with tempfile.TemporaryDirectory(prefix="onnxmem-cuda-") as tmp:
            work = Path(tmp)
            _pip_download([ort], opts.python, work)
            wheel = next(work.glob("onnxruntime_gpu-*.whl"))
            site = work / "site"
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
            lib = site / "onnxruntime" / "capi" / "libonnxruntime_providers_cuda.so"
            data = bytearray(lib.read_bytes())
            sizes = select(data, keep, None if opts.keep_contrib else standard_only)
            lib.write_bytes(data)
            for f in (site / "onnxruntime" / "capi").iterdir():
                if f.name.startswith(LEFT_OUT):
                    f.unlink()
            opts.out.mkdir(parents=True, exist_ok=True)
            bundle = opts.out / "ort-gpu.tar.xz"
            part = bundle.with_suffix(".part")
            with tarfile.open(part, "w:xz", preset=9) as tar:
                for f in sorted(site.iterdir()):
                    tar.add(f, arcname=f.name)
            part.replace(bundle)
            whl = opts.out / "whl"
            whl.mkdir(exist_ok=True)
            _pip_download(_pins(EXTRA), opts.python, whl)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    mib = 2**20
    print(f"{bundle}: {bundle.stat().st_size / mib:.1f} MiB ({wheel.name}; GPU code kept "
          f"{sizes['kept'] / mib:.1f} MiB, zeroed {sizes['zeroed'] / mib:.1f} MiB, sm {opts.arch})")
    print(f"{whl}: {sum(f.stat().st_size for f in whl.iterdir()) / mib:.1f} MiB of wheels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
