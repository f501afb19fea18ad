"""The worker processes that run ``onnxmem.cli.main.main`` per case, and the audit hook that
records reads, writes, started processes and compiled payload text while a case runs."""
from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from .common import MARK, ROOT

# ---------------------------------------------------------------------- worker

_EXEC_EVENTS = {"os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn",
                "os.fork", "os.forkpty", "pty.spawn"}
_WRITE_EVENTS = {"os.rename", "os.replace", "os.remove", "os.rmdir", "os.mkdir", "os.truncate",
                 "os.symlink", "os.link", "os.chmod", "os.chown", "os.utime", "os.mkfifo",
                 "os.mknod", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
#: where each write event's folder descriptors sit in its audit arguments, per path argument
_DIR_FDS = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.rename": (2, 3), "os.replace": (2, 3),
            "os.symlink": (2,), "os.link": (2, 3), "os.mkfifo": (2,), "os.mknod": (3,)}
#: write events that act on the target of a link rather than on the link
_FOLLOWING = {"os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.copyfile"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: system files any program may read: devices, and the OS identity (read by ``platform``)
_DEV_OK = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/shm", "/etc/os-release",
           "/usr/lib/os-release")
#: files under /proc that hold the process's secrets; /proc is otherwise readable
_PROC_SECRETS = frozenset({"environ", "mem", "cmdline", "auxv", "maps", "pagemap"})
#: system folders a plot may read: the fonts matplotlib draws with, the time zones
_FONT_ROOTS = ("/usr/share/fonts", "/usr/local/share/fonts", "/etc/fonts", "/usr/share/fontconfig",
               "/usr/share/zoneinfo")  # and the time zone matplotlib's dates read (a PNG's metadata)


class _Audit:
    """State of the audit hook: active only while a case runs in this worker."""

    def __init__(self) -> None:
        self.active = False
        self.busy = False
        self.read_roots: tuple[str, ...] = ()
        self.write_roots: tuple[str, ...] = ()
        self.named: frozenset[str] = frozenset()
        self.code_roots: tuple[str, ...] = ()
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.execs: list[str] = []
        self.evals: list[str] = []

    @staticmethod
    def _under(path: str, roots: tuple[str, ...]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    def _cache(self, path: str) -> bool:
        """Bytecode and numba caches in ``__pycache__`` folders of the code roots, the
        process's own ``clear_refs`` (a kernel control, not a file: resetting the peak
        resident size before measuring a session), and the heap file of multiprocessing's shared
        values (``/dev/shm/pym-*``: a command that starts its onnxruntime child, under
        ``--subprocess``)."""
        if path in (f"/proc/{os.getpid()}/clear_refs", "/proc/self/clear_refs"):
            return True
        if path.startswith("/dev/shm/pym-"):  # multiprocessing's own heap of shared values (made, then removed)
            return True
        return "/__pycache__" in path and self._under(path, self.code_roots)

    def _resolve(self, p: Any, follow: bool = True) -> str | None:
        """The real path; with ``follow=False`` the last component stays unresolved
        (a rename or remove acts on a link, not on its target)."""
        if isinstance(p, int):
            return None
        try:
            s = os.fsdecode(p)
        except (TypeError, ValueError):
            return repr(p)
        if "\x00" in s:
            return s
        if follow:
            return os.path.realpath(s)
        head, tail = os.path.split(os.path.abspath(s))
        return os.path.join(os.path.realpath(head), tail)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or self.busy:
            return
        if event == "open":
            self.busy = True
            try:
                self._open(args)
            finally:
                self.busy = False
        elif event in _WRITE_EVENTS:
            self.busy = True
            try:
                fds = _DIR_FDS.get(event, ())
                for k, a in enumerate(args[:2]):
                    if isinstance(a, (str, bytes, os.PathLike)):
                        fd = args[fds[k]] if k < len(fds) and fds[k] < len(args) else None
                        if isinstance(fd, int) and not os.path.isabs(os.fsdecode(a)):
                            # relative to a folder descriptor (shutil.rmtree removes this way)
                            with contextlib.suppress(OSError):
                                a = os.path.join(os.readlink(f"/proc/self/fd/{fd}"), os.fsdecode(a))
                        path = self._resolve(a, follow=event in _FOLLOWING)
                        if path is not None and not self._under(path, self.write_roots) \
                                and not self._cache(path):
                            self.writes.append(f"{event} {path}")
            finally:
                self.busy = False
        elif event in _EXEC_EVENTS:
            self.execs.append(f"{event} {str(args)[:300]}")
        elif event == "compile":
            src = args[0] if args else None
            if isinstance(src, (bytes, bytearray)):
                src = bytes(src).decode("utf-8", "replace")
            if isinstance(src, str) and MARK in src:
                self.evals.append(src[:300])

    def _open(self, args: tuple[Any, ...]) -> None:
        path_arg, mode, flags = (list(args) + [None, None, None])[:3]
        path = self._resolve(path_arg)
        if path is None:
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writing:
            if not self._under(path, self.write_roots) and not self._cache(path):
                self.writes.append(f"open {path} {mode or flags}")
        elif not (self._under(path, self.read_roots) or path in self.named or path in _DEV_OK) \
                or (path.startswith("/proc/") and os.path.basename(path) in _PROC_SECRETS):
            self.reads.append(path)


_AUDIT = _Audit()


def _system_read_roots() -> tuple[str, ...]:
    """The Python installation, its packages, the onnxmem sources and install metadata."""
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT / "onnxmem"), "/proc", "/sys",
             *_FONT_ROOTS}
    # the package's own install metadata (an editable install keeps it beside the sources;
    # numba and click read entry points from it)
    roots.update(str(p) for p in ROOT.glob("*.egg-info"))
    roots.update(p for p in sysconfig.get_paths().values() if p)
    roots.update(site.getsitepackages())
    roots.add(os.path.realpath(os.path.dirname(os.__file__)))
    return tuple(sorted(os.path.realpath(r) for r in roots))


def _warm_compiled_code(folder: str) -> None:
    """Compile (or load from numba's cache) the compiled searches once, before any case: on a
    fresh install the first compile takes longer than a case's time bound, and it is set-up,
    not a case's work. The model is written into ``folder`` (cleared afterwards)."""
    import onnx

    from onnxmem.model.generate import randwire
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    path = os.path.join(folder, "warm.onnx")
    onnx.save(randwire(16, seed=0), path)
    for order, solver in (("exact", "exact"), ("file", "best-greedy"), ("file", "greedy")):
        plan_model(path, PlanOptions(order=order, solver=solver, timeout=60))


def _prepare(scratch: str, mem_limit: int) -> tuple[str, ...]:
    """Set up this process to run cases: limits, scratch folders, warm imports, the audit hook.

    Returns the read roots of the system.
    """
    import ctypes
    import resource
    import signal

    with contextlib.suppress(OSError, AttributeError):  # die with the parent (Linux prctl)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.makedirs(os.path.join(scratch, "tmp"), exist_ok=True)
    os.makedirs(os.path.join(scratch, "mpl"), exist_ok=True)
    os.environ["TMPDIR"] = os.path.join(scratch, "tmp")
    os.environ["MPLCONFIGDIR"] = os.path.join(scratch, "mpl")
    os.environ["MPLBACKEND"] = "Agg"
    tempfile.tempdir = None
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if mem_limit:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    os.chdir(scratch)
    # third-party imports that do work at import time happen here, once, not inside a case;
    # onnxmem first: it turns off onnxruntime's telemetry, whose files onnxruntime would
    # write as it is imported (onnxmem/__init__.py)
    import onnxmem  # noqa: F401

    # isort: split
    import matplotlib.font_manager  # noqa: F401  builds the font cache (runs fc-list) once
    import onnxruntime  # noqa: F401
    import sympy  # noqa: F401

    import onnxmem.cli.main  # noqa: F401  the imports every case shares
    import onnxmem.planning.pipeline  # noqa: F401
    import onnxmem.report.text  # noqa: F401
    import onnxmem.verify.run  # noqa: F401
    _warm_compiled_code(os.path.join(scratch, "tmp"))

    _clear(os.path.join(scratch, "tmp"))
    system_roots = _system_read_roots()
    _AUDIT.code_roots = system_roots
    sys.addaudithook(_AUDIT.hook)
    return system_roots


def _worker_main(conn: Any, scratch: str, mem_limit: int) -> None:
    """Import onnxmem once, then run each case sent on ``conn`` in this process."""
    system_roots = _prepare(scratch, mem_limit)
    conn.send("ready")
    while True:
        try:
            req = conn.recv()
        except EOFError:  # the parent is gone
            return
        if req is None:
            return
        conn.send(_run_request(req, scratch, system_roots))


def _run_once(request_path: str, scratch: str, mem_limit: int) -> None:
    """Entry of ``SubprocessWorker``: one case in a fresh interpreter, the result as JSON."""
    system_roots = _prepare(scratch, mem_limit)
    with open(request_path) as fh:
        req = json.load(fh)
    res = _run_request(req, scratch, system_roots)
    with open(os.path.join(scratch, "result.json"), "w") as fh:
        json.dump(res, fh)


def _run_request(req: dict[str, Any], scratch: str, system_roots: tuple[str, ...]) -> dict[str, Any]:
    import onnxmem.cli.main as cli

    folder = req["folder"]
    out_path = os.path.join(scratch, "stdout")
    err_path = os.path.join(scratch, "stderr")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    code = 0
    exc_name = None
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        a = _AUDIT
        a.reads, a.writes, a.execs, a.evals = [], [], [], []
        a.read_roots = (*system_roots, os.path.realpath(os.path.join(folder, "model")),
                        os.path.realpath(os.path.join(folder, "out")), os.path.realpath(scratch))
        a.write_roots = (os.path.realpath(os.path.join(folder, "out")), os.path.realpath(scratch))
        a.named = frozenset(os.path.realpath(p) for p in req["named_reads"])
        old_argv = sys.argv
        sys.argv = ["onnxmem", *req["argv"]]
        # onnxruntime would apply a model's ort_config (the payload family writes one that turns profiling on,
        # a file in the working folder): set in every case, as a user's environment may set it
        os.environ["ORT_LOAD_CONFIG_FROM_MODEL"] = "1"
        os.chdir(folder)
        started = time.perf_counter()
        a.active = True
        try:
            cli.main.main(args=list(req["argv"]), prog_name="onnxmem", standalone_mode=True)
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException as exc:  # what the interpreter would print for an uncaught error
            a.active = False
            exc_name = type(exc).__name__
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            code = 1
        finally:
            a.active = False
            seconds = time.perf_counter() - started
            sys.argv = old_argv
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.chdir(scratch)
    leftovers = _clear(os.path.join(scratch, "tmp"))
    return {
        "code": code, "exc": exc_name, "seconds": seconds,
        "stdout": _read_capped(out_path), "stderr": _read_capped(err_path),
        "reads": sorted(set(_AUDIT.reads))[:50], "writes": _AUDIT.writes[:50],
        "execs": _AUDIT.execs[:20], "evals": _AUDIT.evals[:20],
        "tmp_leftovers": leftovers[:20],
        "recycle": exc_name in ("MemoryError", "RecursionError"),
    }


def _clear(folder: str) -> list[str]:
    """Empty ``folder``; return the names it held."""
    names = sorted(os.listdir(folder))
    for name in names:
        p = os.path.join(folder, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(p)
    return names


def _read_capped(path: str, cap: int = 1 << 20) -> dict[str, Any]:
    """Head and tail of a captured stream, its size, and whether it holds a traceback."""
    size = os.path.getsize(path)
    traceback_seen = False
    with open(path, "rb") as fh:
        head = fh.read(cap)
        tail = b""
        if size > cap:
            prev = b""
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                traceback_seen = traceback_seen or b"Traceback" in prev[-16:] + chunk
                prev = chunk
            fh.seek(max(cap, size - 4096))
            tail = fh.read()
    traceback_seen = traceback_seen or b"Traceback (most recent call last)" in head
    return {"head": head.decode("utf-8", "surrogateescape"), "tail": tail.decode("utf-8", "surrogateescape"),
            "size": size, "traceback": traceback_seen}


class Worker:
    """One long-lived worker process; the parent kills and replaces it on a hang."""

    def __init__(self, scratch: Path, mem_limit: int, max_cases: int = 150) -> None:
        self.scratch = scratch
        self.mem_limit = mem_limit
        self.max_cases = max_cases
        self.proc: Any = None
        self.conn: Any = None
        self.cases = 0

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, str(self.scratch.resolve()), self.mem_limit),
                                daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(300):
            raise RuntimeError("fuzz worker did not start in 300 s")
        msg = parent.recv()
        if msg != "ready":
            raise RuntimeError(f"fuzz worker said {msg!r}")
        self.cases = 0

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
            self.proc = None

    def run(self, req: dict[str, Any], bound: float) -> dict[str, Any]:
        if self.proc is None or self.cases >= self.max_cases:
            self.stop()
            self.start()
        self.cases += 1
        self.conn.send(req)
        if not self.conn.poll(bound):
            self.kill()
            return {"code": None, "hang": True, "seconds": bound,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        try:
            res: dict[str, Any] = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join()
            code = self.proc.exitcode
            self.proc = None
            return {"code": None, "crash": f"worker died (exit {code})", "seconds": 0.0,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        if res.get("recycle"):
            self.stop()
        return res


class SubprocessWorker:
    """One fresh interpreter per case (``tools/fuzz.py --subprocess``): nothing is shared
    between cases, and the bound includes the interpreter's start and imports."""

    def __init__(self, scratch: Path, mem_limit: int) -> None:
        self.scratch = scratch
        self.mem_limit = mem_limit

    def stop(self) -> None:
        """Nothing outlives a case."""

    def run(self, req: dict[str, Any], bound: float) -> dict[str, Any]:
        import signal
        import subprocess

        self.scratch.mkdir(parents=True, exist_ok=True)
        request = self.scratch / "request.json"
        result = self.scratch / "result.json"
        request.write_text(json.dumps(req))
        with contextlib.suppress(FileNotFoundError):
            result.unlink()
        for name in ("stdout", "stderr"):
            (self.scratch / name).write_bytes(b"")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from fuzzlib.worker import _run_once; "
                "_run_once(sys.argv[2], sys.argv[3], int(sys.argv[4]))")
        proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "tools"), str(request), str(self.scratch),
                                 str(self.mem_limit)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        started = time.monotonic()
        try:
            proc.wait(bound)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"code": None, "hang": True, "seconds": bound,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        if not result.exists():
            return {"code": None, "crash": f"interpreter died (exit {proc.returncode})",
                    "seconds": time.monotonic() - started,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        res: dict[str, Any] = json.loads(result.read_text())
        res["seconds"] = time.monotonic() - started
        return res
