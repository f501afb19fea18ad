"""Execution of a memory plan with nodes running at once, in one arena: the dag trials.

A plan made for ``--concurrency dag`` claims to hold under every schedule the
graph allows; :class:`ConcurrentRun` puts that to the test. It is an
:class:`onnxmem.runtime.arena.ArenaRun` (the same arena, sessions, weights and
inputs) whose nodes run on a thread pool:

1. :meth:`ConcurrentRun.prepare`, once per run whatever the number of trials
   and thread counts: every node runs once, in the plan's order, on
   onnxruntime's own buffers (the reference; shapes are checked as in the
   sequential run), and the bytes of every value are kept; each node's
   session and its binding in the arena are made here and serve every trial
   (but a node that draws random numbers, RandomNormal or Dropout: a kernel run once
   draws other numbers, so each trial makes it a fresh one, which draws the
   reference's numbers again);
2. each trial (:meth:`ConcurrentRun.trial`) fills the arena with the
   sentinel 0xFF, copies the graph inputs in, and follows the graph: a node
   is *ready* when every node it depends on has finished; while fewer than
   ``threads`` nodes run, one ready node is picked (at random from a
   generator seeded by ``seed`` and the trial's number, or the first in a
   given ``schedule``) and started on the pool; when ``threads`` run, the
   generator picks the one whose end is awaited next (the others run on). So
   the order nodes start in is the seed's at every thread count, whichever
   kernel happens to end first. onnxruntime releases the GIL while a node
   runs, so several kernels write the arena at once;
3. a node's worker checks, before it runs, that each input it reads holds
   exactly the reference's bytes, runs the node with every value bound in
   the arena (IOBinding at ``arena_base + offset``), and checks that each
   output holds the reference's bytes (the arena's bytes are compared where
   they lie, 8 at a time, with no copy). Same kernels, same inputs, one thread
   per kernel: a correct plan gives the same bits, so any difference is a
   *clobber*: another node wrote those bytes while they were live;
4. when the trial ends, every graph output in the arena must equal the
   reference's. The first difference ends the trial and is its finding, with
   the order the nodes started in.

What it shows: a plan that survives many seeded trials at several thread
counts; a plan that does not is shown wrong, with the interleaving. What it
does not: that every schedule is safe (the static proof,
:func:`onnxmem.proof.plan.prove_plan` with rule 9, does that); timing decides
which interleavings a trial meets. A given ``schedule`` (for example the one
the proof names for a bad pair) makes the start order deterministic at one
thread. CPU only, and graphs without If/Loop/Scan bodies or training steps (a
plan for one with bodies runs in its own order,
:func:`onnxmem.runtime.arena.execute_plan`; a training step's labels, seeded
dropout and stand-in kernels are :class:`onnxmem.runtime.training.TrainingRun`'s).
The reference and the trials are one bounded run (:mod:`onnxmem.runtime.isolation`):
past ``--time-limit`` it stops before the next node starts, and a kernel that
does not stop has its child killed.
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx

from onnxmem.core.errors import OnnxmemError, RuntimeBackendError, show_name
from onnxmem.graph import GraphView, Op
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import Finding
from onnxmem.runtime.arena import SENTINEL, ArenaRun, ExecutionOptions
from onnxmem.runtime.isolation import at_step, end_run, start_run
from onnxmem.runtime.reference import draws
from onnxmem.runtime.sessions import first_line, host_array
from onnxmem.runtime.training import is_training_view

__all__ = ["ConcurrentExecution", "ConcurrentOptions", "ConcurrentRun", "Trial", "run_concurrent"]


@dataclass(frozen=True, slots=True)
class ConcurrentOptions:
    """How many trials, on how many threads; ``schedule``: node names whose order decides
    which ready node starts next (in place of the seeded random pick)."""

    trials: int = 10
    threads: int = 2
    schedule: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Trial:
    """One run of every node: ``finding`` is ``None`` when every check held;
    ``started``: node names in the order they started; ``most_at_once``: the
    most nodes that ran at the same time."""

    index: int
    finding: Finding | None
    started: tuple[str, ...]
    most_at_once: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.finding is None


@dataclass(frozen=True, slots=True)
class ConcurrentExecution:
    """Every trial of a plan; ``findings``: the finding of each failed trial."""

    device: str
    threads: int
    trials: tuple[Trial, ...]
    nodes: int
    reference_seconds: float

    @property
    def failures(self) -> int:
        return sum(1 for t in self.trials if not t.ok)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(t.finding for t in self.trials if t.finding is not None)

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.trials)


class ConcurrentRun(ArenaRun):
    """The trials of ``plan`` for ``view``; see the module docstring."""

    def __init__(self, plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, options: ExecutionOptions,
                 concurrent: ConcurrentOptions, model_path: str | os.PathLike[str] | None = None) -> None:
        if options.device != "cpu":
            raise OnnxmemError(f"--concurrency dag runs its trials on the CPU, not on {options.device!r}; "
                               "pass --device cpu")
        _check_counts(concurrent.trials, concurrent.threads)
        if view.bodies:
            owner = view.ops[min(view.bodies)].name
            raise OnnxmemError(f"concurrent trials run graphs without If/Loop/Scan bodies, and node "
                               f"{show_name(owner)} has them; run the plan in its own order "
                               "(onnxmem.runtime.arena.execute_plan, as verify does for such a model)")
        if is_training_view(view):
            raise OnnxmemError("concurrent trials do not run a training graph (its labels, seeded dropout and "
                               "stand-in kernels are the sequential run's); run the plan in its own order "
                               "(onnxmem.runtime.training.TrainingRun, as verify does for such a model)")
        super().__init__(plan, model, view, options, model_path)
        self.conc = concurrent
        self.sessions: dict[int, Any] = {}
        self.bindings: dict[int, Any] = {}  # each node's IOBinding in the arena, made once
        self.reference: dict[str, np.ndarray] = {}
        self.words: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.reference_seconds: float | None = None
        self.nodes = [i for i in self.order if i not in self.weight_ops]
        live = set(self.nodes)
        self.deps = {i: [p for p in view.predecessors(i) if p in live] for i in self.nodes}
        self.users: dict[int, list[int]] = {i: [] for i in self.nodes}
        for i, ps in self.deps.items():
            for p in ps:
                self.users[p].append(i)
        #: nodes that draw random numbers: a kernel run once draws other numbers, so each trial runs
        #: a fresh one (seeded as the reference's: :func:`onnxmem.runtime.sessions.node_session`)
        self.draws = [i for i in self.nodes if draws(self.full.graph.node[i], view.ops[i], self.random_calls)]
        rank = {n: k for k, n in enumerate(concurrent.schedule or ())}
        self.priority = {i: rank.get(view.ops[i].name, len(rank) + k) for k, i in enumerate(self.nodes)}

    # -------------------------------------------------------------- the reference

    def prepare(self) -> float:
        """Step 1: every node once on onnxruntime's buffers, in the plan's order; the seconds it took
        (the first call's: a later call returns at once)."""
        if self.reference_seconds is not None:
            return self.reference_seconds
        t0 = time.perf_counter()
        self.load_inputs()
        for op_index in self.nodes:
            op = self.view.ops[op_index]
            at_step(f"the reference, node {show_name(op.name)} ({op.op_type})")
            sess = self.session(op, self.full.graph.node[op_index])
            computed = self.run_private(op, sess)
            if not self.check_shapes(op, computed):
                raise RuntimeBackendError(f"node {op.name!r} computes shapes the plan does not have: "
                                          f"{self.findings[-1]}; re-plan the model")
            self.sessions[op_index] = sess
            self.bindings[op_index] = self._binding(op, sess, in_arena=True)
        for name, slot in self.slots.items():
            if name in self.feeds:
                value = np.asarray(self.feeds[name])
            elif name in self.private:
                value = host_array(self.private[name])
            else:
                continue
            want = np.ascontiguousarray(value).reshape(-1).view(np.uint8)[: slot.size].copy()
            self.reference[name] = want
            here = slot.private[: slot.size] if slot.private is not None else self.arena.view[
                slot.offset : slot.offset + slot.size]
            self.words[name] = (*_words(here), *_words(want))
        self.reference_seconds = time.perf_counter() - t0
        return self.reference_seconds

    # -------------------------------------------------------------- one trial

    def _differs(self, name: str) -> tuple[int, int] | None:
        """Arena bytes ``[lo, hi)`` where ``name`` differs from the reference, or ``None``."""
        words = self.words.get(name)
        if words is None:
            return None
        here, here_tail, want, want_tail = words
        if bool((here == want).all()) and bool((here_tail == want_tail).all()):
            return None
        slot = self.slots[name]
        diff = np.flatnonzero(self._read(slot) != self.reference[name])
        if not diff.size:  # written back while it was compared: the whole tensor changed under it
            return slot.offset, slot.offset + slot.size
        return slot.offset + int(diff[0]), slot.offset + int(diff[-1]) + 1

    def _writers_of(self, name: str, lo: int, hi: int, started: list[int], before: int) -> str:
        """The nodes started so far (other than ``before``) whose outputs lie over ``[lo, hi)``."""
        slot = self.slots[name]
        hits: list[str] = []
        for i in started:
            if i == before:
                continue
            for o in self.view.ops[i].outputs:
                s = self.slots.get(o) if o else None
                if s is not None and o != name and s.private is None and s.home == slot.home \
                        and s.offset < hi and lo < s.offset + s.size:
                    hits.append(f"{self.view.ops[i].name!r} (output {o!r})")
        return ", ".join(hits[-3:]) if hits else "(no node started in this trial writes there)"

    def _work(self, op: Op, started: list[int]) -> Finding | None:
        """Step 3 for one node, on a worker thread."""
        for name in op.reads:
            if name in self.weights or name not in self.slots:
                continue
            bad = self._differs(name)
            if bad is not None:
                return Finding("clobber", name,
                               f"tensor {name!r} does not hold what its writer wrote when node {op.name!r} is "
                               f"about to read it: arena bytes [{bad[0]}, {bad[1]}) changed; written there by "
                               f"{self._writers_of(name, *bad, started, op.index)}",
                               node=op.name, byte_range=bad)
        try:
            self.sessions[op.index].run_with_iobinding(self.bindings[op.index])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            return Finding("clobber", None, f"node {op.name!r} failed in the arena: {first_line(exc)}", node=op.name)
        for o in op.outputs:
            if not o or o not in self.slots:
                continue
            bad = self._differs(o)
            if bad is not None:
                return Finding("clobber", o,
                               f"node {op.name!r} wrote {o!r} but arena bytes [{bad[0]}, {bad[1]}) differ from "
                               f"the reference just after: its inputs were changed while it ran, or another "
                               f"node wrote there: {self._writers_of(o, *bad, started, op.index)}",
                               node=op.name, byte_range=bad)
        return None

    def _load(self) -> None:
        """A fresh arena: the sentinel (in the caller's buffers of ``io="external"`` too), then the
        graph inputs' bytes, from the reference."""
        self.arena.view[:] = SENTINEL
        for slot in self.slots.values():
            if slot.private is not None:
                slot.private[:] = SENTINEL
        for name in self.feeds:
            slot, want = self.slots.get(name), self.reference.get(name)
            if slot is not None and want is not None:
                (slot.private if slot.private is not None else self.arena.view[slot.offset:])[: want.size] = want

    def _fresh_draws(self) -> None:
        """A fresh session and binding for each node that draws random numbers (the reference's
        draws again), made before the trial starts."""
        for i in self.draws:
            op = self.view.ops[i]
            self.sessions[i] = self.session(op, self.full.graph.node[i])
            self.bindings[i] = self._binding(op, self.sessions[i], in_arena=True)

    def trial(self, index: int, pool: ThreadPoolExecutor, threads: int | None = None) -> Trial:
        """Step 2 and 4: one run of every node on the pool, up to ``threads`` at once
        (default: the options'); :meth:`prepare` must have run."""
        threads = threads or self.conc.threads
        t0 = time.perf_counter()
        rng = random.Random(f"{self.opts.seed}:{index}")
        self._load()
        self._fresh_draws()
        waiting = {i: len(ps) for i, ps in self.deps.items()}
        ready = [i for i, w in waiting.items() if w == 0]
        running: dict[Future[Finding | None], int] = {}
        started: list[int] = []
        most = 0
        finding: Finding | None = None
        while ready or running:
            while ready and len(running) < threads and finding is None:
                if self.conc.schedule is not None:
                    k = min(range(len(ready)), key=lambda j: self.priority[ready[j]])
                else:
                    k = rng.randrange(len(ready))
                i = ready.pop(k)
                at_step(f"trial {index + 1}, node {show_name(self.view.ops[i].name)} ({self.view.ops[i].op_type})")
                started.append(i)
                running[pool.submit(self._work, self.view.ops[i], started)] = i
                most = max(most, len(running))
            if not running:
                break
            # the node whose end is taken next is the generator's pick among those running (the
            # others run on): the start order is the seed's, whichever kernel ends first
            futures = list(running)
            fut = futures[rng.randrange(len(futures))] if len(futures) > 1 else futures[0]
            i = running.pop(fut)
            result = fut.result()
            if result is not None and finding is None:
                finding = result
            for j in self.users[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    ready.append(j)
        if finding is None:
            for name in self.view.outputs:
                if name in self.slots and name not in self.weights:
                    bad = self._differs(name)
                    if bad is not None:
                        finding = Finding("output", name, f"graph output {name!r} differs from the reference at "
                                          f"arena bytes [{bad[0]}, {bad[1]}) after every node ran",
                                          byte_range=bad)
                        break
        names = tuple(self.view.ops[i].name for i in started)
        return Trial(index, finding, names, most, time.perf_counter() - t0)

    def run_trials(self, trials: int | None = None, threads: int | None = None) -> ConcurrentExecution:
        """The reference (made once per run), then every trial: ``trials`` of them on ``threads``
        threads (default: the options'). Calls with other counts share the sessions and the reference."""
        trials = self.conc.trials if trials is None else trials
        threads = self.conc.threads if threads is None else threads
        _check_counts(trials, threads)
        start_run(f"the concurrent trials ({trials:,} of them, up to {threads:,} nodes at once)")
        try:
            ref_seconds = self.prepare()
            done: list[Trial] = []
            with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="onnxmem-node") as pool:
                for k in range(trials):
                    done.append(self.trial(k, pool, threads))
        finally:
            end_run()
        return ConcurrentExecution(self.opts.device, threads, tuple(done), len(self.nodes), ref_seconds)


def _check_counts(trials: int, threads: int) -> None:
    if threads < 1 or trials < 1:
        raise OnnxmemError("--threads and --trials must be 1 or more")


def _words(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes ``a`` as views: its whole 8-byte words and the bytes after them (compared without a copy)."""
    n = a.size - a.size % 8
    return a[:n].view(np.uint64), a[n:]


def run_concurrent(plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, *,
                   options: ExecutionOptions | None = None, concurrent: ConcurrentOptions | None = None,
                   model_path: str | os.PathLike[str] | None = None) -> ConcurrentExecution:
    """The dag trials of ``plan`` (see :class:`ConcurrentRun`)."""
    return ConcurrentRun(plan, model, view, options or ExecutionOptions(), concurrent or ConcurrentOptions(),
                         model_path).run_trials()
