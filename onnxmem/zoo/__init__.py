"""The model zoo: real architectures planned (and verified) by one job.

- ``catalog``: which models a zoo holds and how to bind their shapes;
- ``fixtures``: the weight-free fixture format, written by ``tools/build_zoo.py`` and
  filled back into runnable models by the runner;
- ``runner``: the job, one model per child process under a time limit;
- ``results``: the per-model record, its tables and the baseline.

``export`` (PyTorch modules to zoo models) needs torch and is imported only by the builder.
"""

from onnxmem.core.lazy import lazy_attributes

# Names are imported from their module on first use, so that a light import (the
# CLI reading ``onnxmem.zoo.settings`` for its help text) does not load onnx.
_HOME = {
    # catalog
    "LIGHT_MODELS": "catalog",
    "ZooModel": "catalog",
    "check_model_name": "catalog",
    "describe_inputs": "catalog",
    "describe_model": "catalog",
    "light_model_path": "catalog",
    "load_zoo": "catalog",
    "parse_list_line": "catalog",
    "write_catalog": "catalog",
    # fixtures
    "FILL_PREFIX": "fixtures",
    "FIXTURE_MIN_BYTES": "fixtures",
    "fill_weights": "fixtures",
    "has_missing_weights": "fixtures",
    "materialize": "fixtures",
    "strip_weights": "fixtures",
    # results
    "STATUSES": "results",
    "Baseline": "results",
    "Regression": "results",
    "ResultsWriter": "results",
    "ZooResult": "results",
    "baseline_notes": "results",
    "check_baseline_names": "results",
    "compare_baseline": "results",
    "machine_info": "results",
    "read_baseline": "results",
    "results_csv": "results",
    "results_markdown": "results",
    "write_baseline": "results",
    "write_results": "results",
    # runner
    "DEFAULT_MODEL_TIMEOUT": "settings",
    "EXECUTORS": "settings",
    "VERIFY_DEVICES": "runner",
    "ZooOptions": "runner",
    "ray_settings": "runner",
    "run_limited": "runner",
    "run_model": "runner",
    "run_zoo": "runner",
    "check_zoo_run": "runner",
    "verify_and_measure": "runner",
}

__all__ = [
    "DEFAULT_MODEL_TIMEOUT",
    "EXECUTORS",
    "FILL_PREFIX",
    "FIXTURE_MIN_BYTES",
    "LIGHT_MODELS",
    "STATUSES",
    "VERIFY_DEVICES",
    "Baseline",
    "Regression",
    "ResultsWriter",
    "ZooModel",
    "ZooOptions",
    "ZooResult",
    "baseline_notes",
    "check_baseline_names",
    "check_model_name",
    "check_zoo_run",
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
    "ray_settings",
    "read_baseline",
    "results_csv",
    "results_markdown",
    "run_limited",
    "run_model",
    "run_zoo",
    "verify_and_measure",
    "strip_weights",
    "write_baseline",
    "write_catalog",
    "write_results",
]


__getattr__ = lazy_attributes(globals(), {name: "." + module for name, module in _HOME.items()})
