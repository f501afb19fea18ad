"""The model zoo: real architectures planned (and verified) by one job.

- ``catalog``: which models a zoo holds and how to bind their shapes;
- ``fixtures``: the weight-free fixture format, written by ``tools/build_zoo.py`` and
  filled back into runnable models by the runner;
- ``runner``: the job, one model per child process under a time limit;
- ``results``: the per-model record, its tables and the baseline.

``export`` (PyTorch modules to zoo models) needs torch and is imported only by the builder.
"""

from .catalog import (
    LIGHT_MODELS,
    ZooModel,
    describe_inputs,
    describe_model,
    light_model_path,
    load_zoo,
    parse_list_line,
    write_catalog,
)
from .fixtures import (
    FILL_PREFIX,
    FIXTURE_MIN_BYTES,
    fill_weights,
    has_missing_weights,
    materialize,
    strip_weights,
)
from .results import (
    STATUSES,
    Regression,
    ResultsWriter,
    ZooResult,
    compare_baseline,
    machine_info,
    read_baseline,
    results_csv,
    results_markdown,
    write_baseline,
    write_results,
)
from .runner import (
    DEFAULT_MODEL_TIMEOUT,
    EXECUTORS,
    VERIFY_DEVICES,
    ZooOptions,
    run_limited,
    run_model,
    run_zoo,
)

__all__ = [
    "DEFAULT_MODEL_TIMEOUT",
    "EXECUTORS",
    "FILL_PREFIX",
    "FIXTURE_MIN_BYTES",
    "LIGHT_MODELS",
    "STATUSES",
    "VERIFY_DEVICES",
    "Regression",
    "ResultsWriter",
    "ZooModel",
    "ZooOptions",
    "ZooResult",
    "compare_baseline",
    "describe_inputs",
    "describe_model",
    "fill_weights",
    "has_missing_weights",
    "light_model_path",
    "load_zoo",
    "machine_info",
    "materialize",
    "parse_list_line",
    "read_baseline",
    "results_csv",
    "results_markdown",
    "run_limited",
    "run_model",
    "run_zoo",
    "strip_weights",
    "write_baseline",
    "write_catalog",
    "write_results",
]
