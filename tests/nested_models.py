"""Small models with If, Loop and Scan bodies, built with onnx.helper (tests and bench/bench_controlflow.py)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .helpers import make_model, vi

__all__ = ["CONTROL_FLOW_MODELS", "if_late_output", "if_peaks", "if_sample_rate", "decoder_in_if", "decoder_loop", "emit_loop", "if_unsized_branch", "loop_carried", "loop_nested_if", "network_in_if", "scan_cumsum",
           "scan_rnn"]


def _graph(nodes, name, inputs, outputs, inits=()) -> onnx.GraphProto:
    return helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits))


def if_peaks() -> onnx.ModelProto:
    """An If whose branches have very different peaks.

    then: ``big = Tile(x, [4, 1])`` (16 KiB), ``then_out = ReduceSum(big, axes=0)`` (4 KiB): peak 20 KiB;
    else: ``else_out = Neg(x)`` (4 KiB). Each branch writes its output into the If's ``y``, so the
    If's region is the Tile's 16,384 B; at the If's step the main graph keeps ``x`` (4,096),
    ``cond`` (64 aligned) and ``y`` (4,096) live: arena 24,640 B.
    """
    reps = numpy_helper.from_array(np.array([4, 1], dtype=np.int64), "reps")
    axes = numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")
    then_g = _graph(
        [helper.make_node("Tile", ["x", "reps"], ["big"], name="tile"),
         helper.make_node("ReduceSum", ["big", "axes"], ["then_out"], name="sum", keepdims=1)],
        "then", [], [vi("then_out", [1, 1024])], [reps, axes],
    )
    else_g = _graph([helper.make_node("Neg", ["x"], ["else_out"], name="neg")], "else", [],
                    [vi("else_out", [1, 1024])])
    node = helper.make_node("If", ["cond"], ["y"], name="choose", then_branch=then_g, else_branch=else_g)
    return make_model([node], [vi("x", [1, 1024]), vi("cond", [], TensorProto.BOOL)], [vi("y", [1, 1024])])


def if_late_output() -> onnx.ModelProto:
    """An If whose branch writes its output after its peak, so the output fits in the peak's bytes.

    :func:`if_peaks` with its then branch ending ``s = ReduceSum(big)`` (4 KiB; ``big``, 16 KiB,
    dies there), ``then_out = Relu(s)`` (in place over ``s``: Relu is in the in-place table, Neg
    is not): peak 20 KiB; else: ``else_out =
    Sigmoid(x)`` (4 KiB). Beside the region (each branch writing the If's ``y`` kept apart):
    region 20,480 B + ``y`` 4,096 + ``x`` 4,096 + ``cond`` 64 = 28,736 B. With ``y`` inside the
    region (at ``s``'s bytes, where the else branch writes it too): 24,640 B.
    """
    model = if_peaks()
    branches = {a.name: a.g for a in model.graph.node[0].attribute}
    then_g, else_g = branches["then_branch"], branches["else_branch"]
    then_g.node[-1].output[0] = "s"
    then_g.node.append(helper.make_node("Relu", ["s"], ["then_out"], name="relu"))
    else_g.node[0].CopyFrom(helper.make_node("Sigmoid", ["x"], ["else_out"], name="sigmoid"))
    return model


def if_unsized_branch() -> onnx.ModelProto:
    """An If whose else branch has no static size: ``NonZero(x)`` (its shape depends on the
    data) cast to float. The then branch is :func:`if_peaks`'s (``Tile`` to 16 KiB, then
    ``ReduceSum``). Planned with ``--branch choose=then``: the else branch is left out and the
    arena is :func:`if_peaks`'s, 24,640 B."""
    model = if_peaks()
    node = model.graph.node[0]
    else_g = _graph([helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
                     helper.make_node("Cast", ["nz"], ["else_out"], name="cast", to=TensorProto.FLOAT)],
                    "else", [], [vi("else_out", [2, None])])
    for attr in node.attribute:
        if attr.name == "else_branch":
            attr.g.CopyFrom(else_g)
    del model.graph.output[:]
    model.graph.output.append(vi("y", [None, None]))
    return model


def network_in_if() -> onnx.ModelProto:
    """The whole network inside an If (as some voice-activity models ship): a 4-layer MLP
    with its weights in the branch; the else branch returns zeros of the same shape."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(4):
        w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"matmul{i}"))
        out = "net_out" if i == 3 else f"h{i}"
        nodes.append(helper.make_node("Tanh", [f"mm{i}"], [out], name=f"tanh{i}"))
        prev = out
    then_g = _graph(nodes, "net", [], [vi("net_out", [8, 64])], inits)
    zeros = helper.make_tensor("zeros", TensorProto.FLOAT, [8, 64], [0.0] * 512)
    else_g = _graph([helper.make_node("Constant", [], ["else_out"], name="zero", value=zeros)], "none", [],
                    [vi("else_out", [8, 64])])
    sr = numpy_helper.from_array(np.array(16000, dtype=np.int64), "sr_ok")
    return make_model(
        [helper.make_node("Equal", ["sr", "sr_ok"], ["is_ok"], name="check_sr"),
         helper.make_node("If", ["is_ok"], ["y"], name="run_net", then_branch=then_g, else_branch=else_g)],
        [vi("x", [8, 64]), vi("sr", [], TensorProto.INT64)], [vi("y", [8, 64])], [sr],
    )


def if_sample_rate() -> onnx.ModelProto:
    """:func:`network_in_if` whose else branch cannot run at these shapes (as silero-vad's 8 kHz
    branch cannot at 512 samples): ``Reshape(x, [3, -1])`` of 512 elements. The If's condition is
    ``Equal(sr, 16000)``, so the value of ``sr`` (``--inputs``) decides the branch. ``x`` has
    a ``batch`` dim (plan it at ``--input-shape x=8x64``)."""
    model = network_in_if()
    shape = helper.make_tensor("thirds", TensorProto.INT64, [2], [3, -1])
    else_g = _graph([helper.make_node("Constant", [], ["thirds"], name="thirds", value=shape),
                     helper.make_node("Reshape", ["x", "thirds"], ["else_out"], name="split")], "bad", [],
                    [vi("else_out", [3, None])])
    for attr in model.graph.node[1].attribute:
        if attr.name == "else_branch":
            attr.g.CopyFrom(else_g)
    del model.graph.output[:]
    model.graph.output.append(vi("y", [None, None]))
    # a batch dim onnxruntime's load leaves open, so the else branch fails only when it runs
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def loop_carried() -> onnx.ModelProto:
    """A Loop of 4 iterations with two carried values that swap (a, b) -> (b, a + b), and a
    scan output of ``a`` each iteration."""
    body = _graph(
        [helper.make_node("Add", ["a_in", "b_in"], ["sum"], name="add"),
         helper.make_node("Identity", ["b_in"], ["a_out"], name="shift"),
         helper.make_node("Relu", ["sum"], ["b_out"], name="relu"),
         helper.make_node("Sigmoid", ["a_in"], ["trace"], name="trace"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("a_in", [1, 256]),
         vi("b_in", [1, 256])],
        [vi("cond_out", [], TensorProto.BOOL), vi("a_out", [1, 256]), vi("b_out", [1, 256]),
         vi("trace", [1, 256])],
    )
    trips = numpy_helper.from_array(np.array(4, dtype=np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    return make_model(
        [helper.make_node("Relu", ["x"], ["a0"], name="start"),
         helper.make_node("Loop", ["trips", "yes", "a0", "x"], ["a_n", "b_n", "traces"], name="loop", body=body),
         helper.make_node("Add", ["a_n", "b_n"], ["y"], name="final")],
        [vi("x", [1, 256])], [vi("y", [1, 256]), vi("traces", [4, 1, 256])], [trips, yes],
    )


def loop_nested_if() -> onnx.ModelProto:
    """A Loop of 3 iterations whose body holds an If on the iteration's parity: even
    iterations double the state, odd ones take its Relu after a Neg."""
    two = numpy_helper.from_array(np.array(2, dtype=np.int64), "two")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")
    k = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "k")
    then_g = _graph([helper.make_node("Mul", ["s_in", "k"], ["t_out"], name="double")], "then", [],
                    [vi("t_out", [2, 128])], [k])
    else_g = _graph([helper.make_node("Neg", ["s_in"], ["n"], name="neg"),
                     helper.make_node("Relu", ["n"], ["e_out"], name="relu")], "else", [], [vi("e_out", [2, 128])])
    body = _graph(
        [helper.make_node("Mod", ["i", "two"], ["parity"], name="mod"),
         helper.make_node("Equal", ["parity", "zero"], ["even"], name="even"),
         helper.make_node("If", ["even"], ["s_out"], name="step", then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("s_in", [2, 128])],
        [vi("cond_out", [], TensorProto.BOOL), vi("s_out", [2, 128])], [two, zero],
    )
    trips = numpy_helper.from_array(np.array(3, dtype=np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    return make_model(
        [helper.make_node("Loop", ["trips", "yes", "x"], ["y"], name="loop", body=body)],
        [vi("x", [2, 128])], [vi("y", [2, 128])], [trips, yes],
    )


def scan_cumsum() -> onnx.ModelProto:
    """A Scan (opset 17) over 6 rows of ``X`` [6, 32], read backwards: the state is a
    running sum, the scan output each step's Tanh of it, written along axis 1."""
    body = _graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"], name="acc"),
         helper.make_node("Tanh", ["s_out"], ["out_row"], name="squash")],
        "body", [vi("s_in", [32]), vi("row", [32])], [vi("s_out", [32]), vi("out_row", [32])],
    )
    node = helper.make_node("Scan", ["s0", "X"], ["s_n", "Y"], name="scan", body=body, num_scan_inputs=1,
                            scan_input_directions=[1], scan_output_axes=[1])
    return make_model([helper.make_node("Relu", ["X0"], ["X"], name="pre"), node],
                      [vi("s0", [32]), vi("X0", [6, 32])], [vi("s_n", [32]), vi("Y", [32, 6])])


def scan_rnn() -> onnx.ModelProto:
    """A recurrent cell as a Scan over 24 steps: ``h = Tanh(x_t Wx + h Wh)`` with its
    weights inside the body (``Wx`` [32, 64], ``Wh`` [64, 64]), every ``h`` a scan output."""
    rng = np.random.default_rng(1)
    wx = numpy_helper.from_array((rng.standard_normal((32, 64)) * 0.2).astype(np.float32), "Wx")
    wh = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2).astype(np.float32), "Wh")
    body = _graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["xw"], name="input_proj"),
         helper.make_node("MatMul", ["h_in", "Wh"], ["hw"], name="state_proj"),
         helper.make_node("Add", ["xw", "hw"], ["pre"], name="mix"),
         helper.make_node("Tanh", ["pre"], ["h_out"], name="cell"),
         helper.make_node("Identity", ["h_out"], ["y_t"], name="emit")],
        "cell", [vi("h_in", [1, 64]), vi("x_t", [1, 32])], [vi("h_out", [1, 64]), vi("y_t", [1, 64])], [wx, wh],
    )
    node = helper.make_node("Scan", ["h0", "xs"], ["h_n", "ys"], name="rnn", body=body, num_scan_inputs=1)
    return make_model([node], [vi("h0", [1, 64]), vi("xs", [24, 1, 32])], [vi("h_n", [1, 64]), vi("ys", [24, 1, 64])])


CONTROL_FLOW_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "if_peaks": if_peaks,
    "if_late_output": if_late_output,
    "network_in_if": network_in_if,
    "loop_carried": loop_carried,
    "loop_nested_if": loop_nested_if,
    "scan_cumsum": scan_cumsum,
    "scan_rnn": scan_rnn,
}


def loop_if_sample_rate() -> onnx.ModelProto:
    """A Loop of 3 iterations whose body holds two Ifs: ``by_rate`` on ``Equal(sr, 16000)``
    (``sr`` a graph input read from the outer scope: the same in every iteration), whose else
    branch cannot run at ``x`` [8, 64] (``Reshape(s, [3, -1])`` of 512 elements), and ``by_parity``
    on the iteration number's parity, which changes every iteration. The state ``s`` [8, 64]
    is carried: ``by_rate``'s then branch gives ``Tanh(s)``, ``by_parity`` then doubles it or
    takes its ``Neg``. ``x`` has a ``batch`` dim and the body leaves its first dim open, so that
    onnxruntime's load does not refuse the else branch (plan it at ``--input-shape x=8x64``)."""
    k = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "k")
    thirds = helper.make_tensor("thirds", TensorProto.INT64, [2], [3, -1])
    rate_then = _graph([helper.make_node("Tanh", ["s_in"], ["r_then"], name="squash")], "rate_then", [],
                       [vi("r_then", [None, 64])])
    rate_else = _graph([helper.make_node("Constant", [], ["thirds"], name="thirds", value=thirds),
                        helper.make_node("Reshape", ["s_in", "thirds"], ["r_else"], name="split")], "rate_else", [],
                       [vi("r_else", [3, None])])
    par_then = _graph([helper.make_node("Mul", ["r", "k"], ["p_then"], name="double")], "par_then", [],
                      [vi("p_then", [None, 64])], [k])
    par_else = _graph([helper.make_node("Neg", ["r"], ["p_else"], name="neg")], "par_else", [],
                      [vi("p_else", [None, 64])])
    two = numpy_helper.from_array(np.array(2, dtype=np.int64), "two")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")
    body = _graph(
        [helper.make_node("If", ["is_16k"], ["r"], name="by_rate", then_branch=rate_then, else_branch=rate_else),
         helper.make_node("Mod", ["i", "two"], ["parity"], name="mod"),
         helper.make_node("Equal", ["parity", "zero"], ["even"], name="even"),
         helper.make_node("If", ["even"], ["s_out"], name="by_parity", then_branch=par_then, else_branch=par_else),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("s_in", [None, 64])],
        [vi("cond_out", [], TensorProto.BOOL), vi("s_out", [None, 64])], [two, zero],
    )
    trips = numpy_helper.from_array(np.array(3, dtype=np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    sr_ok = numpy_helper.from_array(np.array(16000, dtype=np.int64), "sr_ok")
    return make_model(
        [helper.make_node("Equal", ["sr", "sr_ok"], ["is_16k"], name="check_sr"),
         helper.make_node("Loop", ["trips", "yes", "x"], ["y"], name="loop", body=body)],
        [vi("x", ["batch", 64]), vi("sr", [], TensorProto.INT64)], [vi("y", ["batch", 64])], [trips, yes, sr_ok],
    )


#: the width of :func:`decoder_loop`'s rows
DECODER_WIDTH = 16


def decoder_loop(trips: str = "const", steps: int = 6, extra: str = "") -> onnx.ModelProto:
    """An autoregressive decoder Loop whose carried sequence grows by one row per iteration.

    Body (iteration ``i``; ``seq_in`` is [1 + i, 16], ``row_in`` [1, 16]):
    ``seq_out = Concat(seq_in, row_in)`` [2 + i, 16]; attention of the row over the sequence so
    far: ``q = MatMul(row_in, wq)`` [1, 16], ``keys = Transpose(seq_out)`` [16, 2 + i],
    ``scores = MatMul(q, keys)`` [1, 2 + i], ``attn = Softmax(scores)``, ``ctx = MatMul(attn,
    seq_out)`` [1, 16], ``row_out = Tanh(ctx)``, the scan output ``step = Sigmoid(ctx)`` [1, 16].
    Main graph: ``seq0 = Relu(x)`` [1, 16], the Loop (``seq0``, ``x``) -> ``seq_n``, ``row_n``,
    ``steps`` [N, 1, 16]; ``y = ReduceSum(seq_n, axis 0)``.

    ``trips``: ``"const"`` a constant trip count ``steps``; ``"input"`` the graph input ``n``
    (int64 scalar); ``"cond"`` no trip count, the condition ``Less(i + 1, limit)`` with
    ``limit`` a graph input (int64 scalar): the run stops after ``limit`` iterations.
    ``extra``: ``"nonzero"`` adds ``hits = NonZero(GreaterOrEqual(Abs(ctx), 0))`` to the body
    (always [2, 16], but only the data says so; ``"nonzero_declared"`` declares that shape in
    the body's value_info); ``"scan_seq"`` makes the growing ``seq_out`` a scan output too.
    """
    d = DECODER_WIDTH
    rng = np.random.default_rng(7)
    wq = numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32) * 0.3, "wq")
    one = numpy_helper.from_array(np.array(1, dtype=np.int64), "one")
    nodes = [helper.make_node("Concat", ["seq_in", "row_in"], ["seq_out"], name="append", axis=0),
             helper.make_node("MatMul", ["row_in", "wq"], ["q"], name="query"),
             helper.make_node("Transpose", ["seq_out"], ["keys"], name="keys", perm=[1, 0]),
             helper.make_node("MatMul", ["q", "keys"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores"], ["attn"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["attn", "seq_out"], ["ctx"], name="context"),
             helper.make_node("Tanh", ["ctx"], ["row_out"], name="next_row"),
             helper.make_node("Sigmoid", ["ctx"], ["step"], name="emit")]
    if trips == "cond":
        nodes += [helper.make_node("Add", ["i", "one"], ["done"], name="count"),
                  helper.make_node("Less", ["done", "limit"], ["cond_out"], name="more")]
    else:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"))
    body_inits = [wq, one] if trips == "cond" else [wq]
    if extra.startswith("nonzero"):
        body_inits.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"))
        nodes += [helper.make_node("Abs", ["ctx"], ["size"], name="size"),
                  helper.make_node("GreaterOrEqual", ["size", "zero"], ["mask"], name="mask"),
                  helper.make_node("NonZero", ["mask"], ["hits"], name="hits")]
    outs = [vi("cond_out", [], TensorProto.BOOL), vi("seq_out", [None, d]), vi("row_out", [1, d]),
            vi("step", [1, d])]
    if extra == "scan_seq":
        nodes.append(helper.make_node("Identity", ["seq_out"], ["seq_copy"], name="copy"))
        outs.append(vi("seq_copy", [None, d]))
    body = _graph(
        nodes, "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("seq_in", [None, d]),
         vi("row_in", [1, d])], outs, body_inits,
    )
    if extra == "nonzero_declared":
        body.value_info.append(vi("hits", [2, d], TensorProto.INT64))
    inits = [numpy_helper.from_array(np.array(True), "yes"), numpy_helper.from_array(np.array([0], dtype=np.int64),
                                                                                      "axis0")]
    inputs = [vi("x", [1, d])]
    if trips == "const":
        inits.append(numpy_helper.from_array(np.array(steps, dtype=np.int64), "trips"))
        count = "trips"
    elif trips == "input":
        inputs.append(vi("n", [], TensorProto.INT64))
        count = "n"
    else:
        inputs.append(vi("limit", [], TensorProto.INT64))
        count = ""
    return make_model(
        [helper.make_node("Relu", ["x"], ["seq0"], name="start"),
         helper.make_node("Loop", [count, "yes", "seq0", "x"],
                          ["seq_n", "row_n", "steps"] + (["seqs"] if extra == "scan_seq" else []), name="decode",
                          body=body),
         helper.make_node("ReduceSum", ["seq_n", "axis0"], ["y"], name="pool", keepdims=0)],
        inputs, [vi("y", [d]), vi("row_n", [1, d]), vi("steps", [None, 1, d])], inits,
    )


def emit_loop() -> onnx.ModelProto:
    """A Loop whose carried state keeps its shape but whose scan output stacks one slice per
    iteration, its trip count the graph input ``n``: ``h = Tanh(MatMul(h, w))`` [1, 16] carried,
    ``tok = ArgMax(h)`` [1, 1] (int64) a scan output, so ``toks`` is [n, 1, 1]."""
    d = DECODER_WIDTH
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((d, d)).astype(np.float32) * 0.3, "w")
    body = _graph(
        [helper.make_node("MatMul", ["h_in", "w"], ["mixed"], name="mix"),
         helper.make_node("Tanh", ["mixed"], ["h_out"], name="squash"),
         helper.make_node("ArgMax", ["h_out"], ["tok"], name="pick", axis=1, keepdims=1),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h_in", [1, d])],
        [vi("cond_out", [], TensorProto.BOOL), vi("h_out", [1, d]), vi("tok", [1, 1], TensorProto.INT64)], [w],
    )
    return make_model(
        [helper.make_node("Loop", ["n", "yes", "x"], ["h_n", "toks"], name="emit", body=body)],
        [vi("x", [1, d]), vi("n", [], TensorProto.INT64)],
        [vi("h_n", [1, d]), vi("toks", [None, 1, 1], TensorProto.INT64)],
        [numpy_helper.from_array(np.array(True), "yes")],
    )


def decoder_in_if(trips: str = "const") -> onnx.ModelProto:
    """:func:`decoder_loop`'s graph as the then branch of an If on the graph input ``c``; the else
    branch sums ``x`` (both give ``out`` [16]): a growing Loop nested in a body."""
    inner = decoder_loop(trips).graph
    then_g = _graph(inner.node, "then", [], [vi("y", [16])], inner.initializer)
    else_g = _graph([helper.make_node("ReduceSum", ["x", "axis0"], ["y2"], name="sum", keepdims=0)], "else", [],
                    [vi("y2", [16])])
    inputs = [vi("x", [1, DECODER_WIDTH]), vi("c", [], TensorProto.BOOL)]
    inputs += [i for i in inner.input if i.name not in ("x",)]
    return make_model([helper.make_node("If", ["c"], ["out"], name="gate", then_branch=then_g, else_branch=else_g)],
                      inputs, [vi("out", [16])], [numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0")])
