"""Build the kernels ahead of time: ``python -m onnxmem.core._native_build``.

Compiles every kernel :data:`onnxmem.core._native.KERNELS` declares, from its numba
source, with ``numba.pycc`` into the extension module
:data:`onnxmem.core._native.AOT_MODULE` next to the package's sources (``make
kernels`` runs this), with the hash of the sources it was built from. The
module is compiled for this machine's processor (as numba's JIT compiles;
it records :func:`onnxmem.core._native.machine_hash` and is used on no other
processor). ``--target-cpu generic`` builds
:data:`onnxmem.core._native.GENERIC_MODULE` instead, for any processor of the
architecture: the module shipped with the sources (``make kernels-generic``;
rebuild and commit it with every change of the kernel sources, a test checks
it; one module per Python version, each recorded with its sources' hash in
:data:`GENERIC_RECORD`). Built in a temporary folder, and moved into place in one step, so that a process
starting meanwhile sees either the old module or the new one. Needs numba,
setuptools and a C compiler; without them the kernels stay just in time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from onnxmem.core import _native

__all__ = ["build"]

#: the values the exported ``source_hash`` and ``machine_hash`` return (numba
#: reads them as constants)
_BUILD_HASH = -1
_MACHINE_HASH = 0


def _source_hash() -> int:
    return _BUILD_HASH


def _machine_hash() -> int:
    return _MACHINE_HASH


def build(package: Path | None = None, *, target_cpu: str = "host") -> Path:
    """Compile the kernels into ``package`` (default: this package); the module's path."""
    global _BUILD_HASH, _MACHINE_HASH
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    with warnings.catch_warnings():  # numba.pycc is marked for a future deprecation
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        pycc: Any = importlib.import_module("numba.pycc")

    package = Path(_native.__file__).resolve().parent if package is None else package
    _BUILD_HASH = _native.source_hash(package)
    # compiled for this processor: usable only here (0: any processor of the architecture)
    _MACHINE_HASH = _native.machine_hash() if target_cpu == "host" else 0
    if _BUILD_HASH < 0:
        raise RuntimeError(f"cannot read the kernel sources under {package}")
    name = (_native.AOT_MODULE if target_cpu == "host" else _native.GENERIC_MODULE).rsplit(".", 1)[1]
    with tempfile.TemporaryDirectory(prefix="onnxmem-aot-") as tmp:
        cc = pycc.CC(name)
        cc.output_dir = tmp
        cc.target_cpu = target_cpu
        cc.verbose = False
        for module, (prefix, declared) in _native.KERNELS.items():
            source = importlib.import_module(module)
            for kernel, (result, args) in declared.items():
                cc.export(f"{prefix}_{kernel}", _native.numba_signature(result, args))(
                    getattr(source, kernel).py_func
                )
        cc.export("source_hash", "int64()")(_source_hash)
        cc.export("machine_hash", "int64()")(_machine_hash)
        cc.compile()
        built = next(Path(tmp).glob(name + ".*"))
        target = package / built.name
        staged = package / f".{built.name}.{os.getpid()}.tmp"
        shutil.copyfile(built, staged)
        os.replace(staged, target)
    if target_cpu != "host":
        _record_generic(package, target.name, _BUILD_HASH)
    return target


#: the shipped generic modules, one per Python version, each with the hash of the kernel
#: sources it was built from (a module of another Python cannot be loaded to ask it)
GENERIC_RECORD = "_aot_generic.json"


def _record_generic(package: Path, filename: str, source_hash: int) -> None:
    record = package / GENERIC_RECORD
    built = json.loads(record.read_text()) if record.exists() else {}
    built[filename] = source_hash
    staged = package / f".{GENERIC_RECORD}.{os.getpid()}.tmp"
    staged.write_text(json.dumps(dict(sorted(built.items())), indent=1) + "\n")
    os.replace(staged, record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onnxmem.core._native_build",
        description="compile onnxmem's search kernels ahead of time (numba.pycc)",
    )
    parser.add_argument("--target-cpu", default="host",
                        help="LLVM CPU name to compile for (default: host; 'generic' for a portable module)")
    opts = parser.parse_args(argv)
    t0 = time.perf_counter()
    path = build(target_cpu=opts.target_cpu)
    print(f"built {path} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
