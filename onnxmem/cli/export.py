"""``onnxmem export``: write a plan in another format (C header, TFLite, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.fileio import OutputSet
from onnxmem.export import FORMATS, export_plan, no_prefix, prefixed_formats

from .options import RegistryChoice
from .output import echo_warnings
from .sources import add_weight_files

if TYPE_CHECKING:
    import onnx

    from onnxmem.plans import MemoryPlan


def _model_use(use: str) -> str:
    """The formats whose use of ``--model`` is ``use`` (required, optional), for the help."""
    return ", ".join(name for name, f in FORMATS.items() if f.model == use) or "none"


def _check_prefix(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--prefix``, checked when the command line is read: a usage error names the rule it breaks."""
    from onnxmem.export.c_header import c_prefix

    if value is None:
        return None
    try:
        return c_prefix(value)
    except OnnxmemError as exc:
        raise click.UsageError(one_line(str(exc)), ctx) from None


@click.command("export")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=RegistryChoice("formats"), required=True,
              help=f"Output format: {', '.join(FORMATS)}; 'onnxmem list formats' says what each writes.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="File to write (atomically).")
@click.option("--model", "model_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help=f"The ONNX model the plan was made for; needed by: {_model_use('required')}; "
                   f"used by: {_model_use('optional')} (see docs/export.md).")
@click.option("--prefix", default=None, callback=_check_prefix, metavar="NAME",
              help=f"Name prefix of every symbol the header defines, for two headers in one C file: "
                   f"--prefix enc writes ENC_PLAN_H, ENC_ARENA_SIZE, enc_tensors, ... (default onnxmem); "
                   f"for: {prefixed_formats()} (see docs/export.md).")
def export(plan_file: str, fmt: str, output: str, model_path: str | None, prefix: str | None) -> None:
    """Write the JSON plan PLAN in another format (--format) to the file -o names."""
    entry = FORMATS[fmt]
    if model_path is not None and entry.model == "none":
        raise click.UsageError(f"format '{fmt}' does not read the model; leave --model out")
    if prefix is not None and entry.prefixed is None:
        raise click.UsageError(no_prefix(fmt))
    outs = OutputSet(inputs=[plan_file] + ([model_path] if model_path else []))
    outs.add(output, "-o")
    from onnxmem.export.proof import prove_for_export, prove_range_for_export  # onnx
    from onnxmem.plans import (  # numpy
        RangePlan,
        plan_from_data,
        plan_kind,
        read_plan_data,
    )

    data, where = read_plan_data(plan_file)
    any_plan: MemoryPlan | RangePlan = (plan_from_data(data, where, "range") if plan_kind(data) == "range"
                                        else plan_from_data(data, where, "point"))
    if isinstance(any_plan, RangePlan):
        from onnxmem.export.range_c import range_c_header  # numpy

        if fmt != "c" or model_path is not None:
            raise OnnxmemError(f"a range plan exports as 'c' (without --model), not {show_name(fmt)}; "
                               "instantiate it ('onnxmem instantiate') for the other formats")
        prove_range_for_export(any_plan)
        data = range_c_header(any_plan, prefix)
    else:
        if model_path is not None:
            _as_written(any_plan, plan_file, fmt)
        model = None if model_path is None else _read_model(model_path, fmt, output, outs)
        echo_warnings(prove_for_export(any_plan, model, model_path, plan_file))
        data = export_plan(any_plan, fmt, model, prefix)
    outs.put(output, data)
    outs.commit()
    click.echo(f"{fmt:<12} {len(data):,} B -> {one_line(output)}")


def _as_written(plan: MemoryPlan, plan_file: str, fmt: str) -> None:
    """Refuse ``--model`` for a plan of the graph onnxruntime builds (``plan --optimize``): the
    formats that read the model read it as written, whose values that plan does not name."""
    from onnxmem.plans.optimization import plan_optimization

    recorded = plan_optimization(plan.model, f"plan file {show_name(plan_file)}")
    if recorded.level != "none":
        without = ("export it without --model (its entries then in the plan's order), or " if fmt == "tflm"
                   else "")
        raise OnnxmemError(f"plan file {show_name(plan_file)} is a plan of the graph onnxruntime builds "
                           f"({recorded.describe()}), and --format "
                           f"{fmt} reads MODEL as written, whose values that graph renames, fuses or drops: "
                           f"{without}plan MODEL with --optimize none for this format")


def _read_model(model_path: str, fmt: str, output: str, outs: OutputSet) -> onnx.ModelProto:
    """The model of ``--model``; its weight files become inputs, and a format written beside the
    model must be written next to it when the weights are external."""
    import onnx

    from onnxmem.model import load_model

    model = load_model(model_path)
    add_weight_files(outs, model, model_path)
    external = any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    if FORMATS[fmt].beside_model and external and Path(output).resolve().parent != Path(model_path).resolve().parent:
        raise OnnxmemError(
            f"-o {show_name(output)}: the model keeps its weights in external files, whose "
            f"references only resolve next to it; write the {fmt} output into "
            f"{show_name(str(Path(model_path).parent))}"
        )
    return model
