"""How an arena run (:mod:`.arena`) binds a node's values with onnxruntime's IOBinding: weights
as OrtValues made once, values in the arena at their planned addresses, or the reference's private values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxmem.graph import Op
from onnxmem.runtime import sessions

if TYPE_CHECKING:
    from onnxmem.runtime.arena import ArenaRun

__all__ = ["bind_and_run", "make_binding", "weight_value"]


def weight_value(run: ArenaRun, name: str, host: bool) -> Any:
    """The weight ``name`` as an OrtValue on the host or the device, made once."""
    on_host = host or not run.cuda
    key = (name, on_host)
    if key not in run._weight_values:
        # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
        arr = np.require(run.weights[name], requirements="C")
        run._weight_values[key] = run.ort.OrtValue.ortvalue_from_numpy(arr, "cpu" if on_host else "cuda", 0)
    return run._weight_values[key]

def _inputs_on_host(run: ArenaRun, op: Op, sess: Any) -> list[bool]:
    if not run.cuda:
        return [True] * len(op.reads)
    return [sessions.on_host(m) for m in sess.get_input_memory_infos()]

def bind_and_run(run: ArenaRun, op: Op, sess: Any, in_arena: bool) -> Any:
    """Bind the node's values and run it: in the arena at the planned addresses and shapes,
    or (``in_arena=False``) on the private values, with outputs onnxruntime allocates."""
    binding = make_binding(run, op, sess, in_arena)
    sess.run_with_iobinding(binding)
    if run.cuda:
        binding.synchronize_outputs()
    return binding

def make_binding(run: ArenaRun, op: Op, sess: Any, in_arena: bool) -> Any:
    """The node's IOBinding for :meth:`_bind_and_run` (in the arena, it can run again and again)."""
    host = _inputs_on_host(run, op, sess)
    binding = sess.io_binding()
    for i, name in enumerate(op.reads):
        if name in run.weights:
            binding.bind_ortvalue_input(name, weight_value(run, name, host[i]))
        elif not in_arena:
            binding.bind_ortvalue_input(name, run.private[name])
        elif run.cuda and host[i] and run.slots[name].home == "arena" and name in run.feeds:
            # a graph input read on the host: its copy in the host mirror
            s = run.slots[name]
            binding.bind_input(name, "cpu", 0, sessions.binding_type(s.elem_type), list(s.shape), run.mirror.base + s.offset)
        else:
            s = run.slots[name]
            binding.bind_input(name, run._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape), run._address(s))
    for o in op.outputs:
        if not o:
            continue
        s = run.slots[o]
        if in_arena:
            binding.bind_output(o, run._device(s), 0, sessions.binding_type(s.elem_type), list(s.shape), run._address(s))
        else:
            binding.bind_output(o, run._device(s), 0)
    return binding
