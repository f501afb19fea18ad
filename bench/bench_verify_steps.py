"""Where one ``verify`` spends its wall time: its steps timed in one process.

Runs ``onnxmem verify MODEL [ARGS...]`` in this process (no child process: ``isolate=False``)
with a timer around each step of the arena run (:class:`onnxmem.runtime.arena.ArenaRun`'s
checks, its binding, its node runs outside the arena and in it, a node session's first run
apart), every onnxruntime session built (on any thread: their seconds add up across threads),
the planning and the imports; then prints each step's wall seconds and the CPU seconds of the
thread that ran it (``time.thread_time``), summed over the nodes, how many times it ran, the
node runs' seconds by op type, and the process's CPU seconds (user and system, every thread)
with the part of them the main thread and the reference's thread (run beside the arena run,
:meth:`onnxmem.runtime.reference.PieceReference.run_all`) spent. The timers themselves cost a
few microseconds a call.

    python bench/bench_verify_steps.py MODEL --device cuda --alignment 256
    python bench/bench_verify_steps.py MODEL --alone            # no work on other threads
    python bench/bench_verify_steps.py MODEL --conv-algo DEFAULT --device cuda
    python bench/bench_verify_steps.py MODEL --cold --device cuda    # sessions built ahead not run once

``--alone``: no work beside the arena run (:mod:`onnxmem.runtime.ahead`: as on a machine
without a spare core); ``--conv-algo``: the node sessions' ``cudnn_conv_algo_search`` on
CUDA; ``--cold``: the sessions built ahead are not run once there (``ahead.WARM_UP``).
docs/speed.md ("`verify` on a GPU") quotes its figures.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

_T0 = time.perf_counter()
_C0 = time.thread_time()

import onnxruntime as ort  # noqa: E402 - timed with the imports

SPENT: dict[str, float] = {}
CPU: dict[str, float] = {}
COUNT: dict[str, int] = {}
BY_OP: dict[str, float] = {}


def _add(key: str, seconds: float, cpu: float = 0.0) -> None:
    SPENT[key] = SPENT.get(key, 0.0) + seconds
    CPU[key] = CPU.get(key, 0.0) + cpu
    COUNT[key] = COUNT.get(key, 0) + 1


def _timed(owner: object, name: str, key: str | None = None) -> None:
    real = getattr(owner, name)

    def step(*args: object, **kwargs: object) -> object:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            _add(key or name, time.perf_counter() - t, time.thread_time() - c)

    setattr(owner, name, step)


def _process_cpu() -> float:
    """The CPU seconds of this process so far, user and system, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _instrument(conv_algo: str | None, alone: bool, cold: bool) -> None:
    from onnxmem.planning import pipeline
    from onnxmem.runtime import ahead, sessions
    from onnxmem.runtime.arena import ArenaRun

    real_init = ort.InferenceSession.__init__

    def init(self: object, *args: object, **kwargs: object) -> None:
        t, c = time.perf_counter(), time.thread_time()
        try:
            real_init(self, *args, **kwargs)
        finally:
            _add("session built", time.perf_counter() - t, time.thread_time() - c)

    ort.InferenceSession.__init__ = init
    from onnxmem.runtime.reference import PieceReference

    for name in ("__init__", "load_inputs", "run_ahead", "run_beside", "run_steps", "check_inputs", "session",
                 "_binding", "check_write", "check_outputs", "retire", "compare_outputs"):
        _timed(ArenaRun, name)
    _timed(PieceReference, "run_all", "reference beside (its thread)")
    _timed(pipeline, "plan_loaded")
    _timed(ahead.SessionsAhead, "__init__", "sessions ahead: the nodes' models made, the builds started")
    _timed(ahead.SessionsAhead, "take", "waiting for a session built ahead (in the node's session step)")
    seen: set[int] = set()
    real_run = ArenaRun._bind_and_run

    def bind_and_run(self: ArenaRun, op: Any, sess: Any, in_arena: bool) -> Any:
        first = id(sess) not in seen
        seen.add(id(sess))
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real_run(self, op, sess, in_arena)
        finally:
            dt = time.perf_counter() - t
            _add(f"run {'in the arena' if in_arena else 'outside'}{', first of its session' if first else ''}", dt,
                 time.thread_time() - c)
            BY_OP[op.op_type] = BY_OP.get(op.op_type, 0.0) + dt

    ArenaRun._bind_and_run = bind_and_run  # type: ignore[method-assign,assignment]
    if alone:
        ahead.spare_core = lambda: False
    if cold:
        ahead.WARM_UP = False
    if conv_algo:
        real_setup = sessions.node_setup

        def setup(cuda: bool) -> tuple[object, list[object]]:
            options, providers = real_setup(cuda)
            return options, ([("CUDAExecutionProvider", {"cudnn_conv_algo_search": conv_algo})] if cuda else providers)

        sessions.node_setup = setup


def main(argv: list[str]) -> int:
    alone, cold = "--alone" in argv, "--cold" in argv
    argv = [a for a in argv if a not in ("--alone", "--cold")]
    conv_algo = None
    if "--conv-algo" in argv:
        i = argv.index("--conv-algo")
        conv_algo = argv[i + 1]
        del argv[i:i + 2]
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[0] + "\nusage: bench_verify_steps.py MODEL [--alone] [--cold] [--conv-algo NAME] "
              "[verify options]", file=sys.stderr)
        return 2
    _instrument(conv_algo, alone, cold)
    from onnxmem.cli.main import main as cli
    from onnxmem.runtime.isolation import run_limits

    _add("imports", time.perf_counter() - _T0, time.thread_time() - _C0)
    t0, c0 = time.perf_counter(), time.thread_time()
    code = 0
    try:
        with run_limits(isolate=False):
            cli(["verify", *argv], standalone_mode=False)
    except SystemExit as exc:
        code = int(exc.code or 0)
    _add("verify (all of it)", time.perf_counter() - t0, time.thread_time() - c0)
    print("\n| step | wall s | CPU s (its thread) | times |\n|---|---:|---:|---:|")
    for key, seconds in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"| {key} | {seconds:.3f} | {CPU[key]:.3f} | {COUNT[key]} |")
    total, main_thread = _process_cpu(), time.thread_time()
    beside = CPU.get("reference beside (its thread)", 0.0)
    print(f"\nprocess CPU {total:.3f} s (user and system, every thread): main thread {main_thread:.3f}, the "
          f"reference's thread {beside:.3f}, the rest {max(total - main_thread - beside, 0.0):.3f} (onnxruntime's "
          "and numpy's own threads, the system's work for them)")
    print("\nnode runs by op type (both runs):", ", ".join(
        f"{op} {s:.3f} s" for op, s in sorted(BY_OP.items(), key=lambda kv: -kv[1])[:8]))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
