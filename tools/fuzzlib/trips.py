"""The ``trips`` family: Loops with huge trip counts (10^6, 2^62, INT64_MAX) and Loops whose
condition never ends, through verify, compare and plan --measure-shapes (the commands that run
the model). Each must end as a clean one-line error or a bounded result, never a hang: where
the commands have ``--time-limit SECONDS`` the case passes a small one; without it a hang is
what the case reports."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

from .common import Base, Case
from .corpus import Corpus, _finish
from .families import _model_case

#: the commands of this family (the ones that run the model); the seed picks one
COMMANDS = ("verify", "compare", "measure")
#: seconds passed as ``--time-limit`` where the command has it
TIME_LIMIT = "2"
TRIPS = (10**6, 2**62, 2**63 - 1)
KINDS = ("trips", "trips", "endless", "endless_max", "trips_scan")


@functools.cache
def time_limit_option(command: str) -> bool:
    """Whether ``onnxmem COMMAND`` takes ``--time-limit`` in this tree."""
    import click

    import onnxmem.cli.main as cli

    name = "plan" if command == "measure" else command
    cmd = cli.main.get_command(click.Context(cli.main), name)
    return cmd is not None and any("--time-limit" in getattr(p, "opts", ()) for p in cmd.params)


def build_loop(trip: int | None, cond_always: bool, scan: bool) -> Any:
    """``y = Loop(M=trip, cond=True, v=x)`` whose body adds 1 to ``v`` (and, with ``scan``, emits
    ``v`` every iteration); ``trip`` None leaves M empty, so only the condition ends the loop,
    and ``cond_always`` makes the body's condition true forever."""
    from onnx import TensorProto, helper

    vec = [1, 8]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    body_nodes = [helper.make_node("Constant", [], ["one_b"], name="one_b", value=one),
                  helper.make_node("Add", ["v_in", "one_b"], ["v_out"], name="step")]
    if cond_always:
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"], name="keep_going"))
    else:  # stop when the carried value passes 2^24 (never, in time, for the huge counts)
        limit = helper.make_tensor("limit", TensorProto.FLOAT, [], [float(2**24)])
        body_nodes += [helper.make_node("Constant", [], ["lim"], name="lim", value=limit),
                       helper.make_node("ReduceMax", ["v_out"], ["m"], name="max", keepdims=0),
                       helper.make_node("Less", ["m", "lim"], ["c_out"], name="below")]
    outputs = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
               helper.make_tensor_value_info("v_out", TensorProto.FLOAT, vec)]
    if scan:
        body_nodes.append(helper.make_node("Identity", ["v_out"], ["s_out"], name="emit"))
        outputs.append(helper.make_tensor_value_info("s_out", TensorProto.FLOAT, vec))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, vec)], outputs)
    loop_out = ["v_end", "scanned"] if scan else ["v_end"]
    inits = [helper.make_tensor("go", TensorProto.BOOL, [], [True])]
    if trip is not None:
        inits.append(helper.make_tensor("trip", TensorProto.INT64, [], [trip]))
    nodes = [helper.make_node("Loop", ["trip" if trip is not None else "", "go", "x"], loop_out,
                              name="loop", body=body),
             helper.make_node("Relu", ["v_end"], ["y"], name="relu")]
    graph_outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, vec)]
    if scan:
        graph_outputs.append(helper.make_tensor_value_info("scanned", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "trips", [helper.make_tensor_value_info("x", TensorProto.FLOAT, vec)],
                          graph_outputs, inits)
    return _finish(g, "trips")


def trips_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    command = COMMANDS[seed % len(COMMANDS)]
    kind = rng.choice(KINDS)
    trip = rng.choice(TRIPS)
    if kind == "endless":
        model, note = build_loop(None, True, False), "no trip count, condition always true"
    elif kind == "endless_max":
        model, note = build_loop(2**63 - 1, True, rng.random() < 0.5), "INT64_MAX trips, condition always true"
    else:
        scan = kind == "trips_scan"
        model = build_loop(trip, rng.random() < 0.5, scan)
        note = f"{trip} trips" + (" with a scan output" if scan else "")
    extra = ["--time-limit", TIME_LIMIT] if time_limit_option(command) else []
    base = Base("trips", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("trips", seed, command, folder, base, dict(base.files), note, extra_args=extra)
