# The two commands a newcomer runs: `make demo` and `make test`.
# Everything runs in a virtualenv this Makefile makes (.venv), so a fresh machine needs
# only python3 with venv; `make test` also installs etcd-server where it can (root + apt).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The CPU build of torch, where this machine keeps one: gloo comparisons and torch-script
# tests use it; without it they skip. Never pulls the CUDA build from the registry.
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-*+cpu-*.whl))
PYTEST_WORKERS ?= 2
# Real PaddlePaddle (CPU build, ~0.9 GB) in a side virtualenv, so that
# tests/e2e/scripts/test_paddle.py runs real Paddle scripts under the launcher. Best effort:
# without it those tests skip with a reason. `make test PADDLE=` skips the install.
PADDLE ?= paddlepaddle>=3,<4
PADDLE_VENV ?= .venv-paddle
PADDLE_STAMP := $(PADDLE_VENV)/.installed

.PHONY: env torch-env test lint demo bench log-samples clean etcd paddle-env test-gpu chaos chromium cluster-tools

$(STAMP): setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

env: $(STAMP)

# torch (CPU) for the tests that run real torch scripts and for gloo in the benchmarks;
# best effort, and not needed by `make demo`.
$(VENV)/.torch: $(STAMP)
	@if [ -n "$(TORCH_WHEEL)" ]; then $(PIP) install -q "$(TORCH_WHEEL)" || \
	  echo "torch not installed: torch tests and gloo comparisons will skip"; fi
	touch $(VENV)/.torch

torch-env: $(VENV)/.torch

$(PADDLE_STAMP): setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(PADDLE_VENV)
	$(PADDLE_VENV)/bin/python -m pip install -q --upgrade pip
	$(PADDLE_VENV)/bin/python -m pip install -q '$(PADDLE)' -e .
	touch $(PADDLE_STAMP)

paddle-env:
	@if [ -n "$(PADDLE)" ]; then $(MAKE) --no-print-directory $(PADDLE_STAMP) || \
	  echo "PaddlePaddle not installed: the real-Paddle tests will skip"; fi

# Best effort: the etcd tests skip with a reason when there is no etcd binary.
etcd:
	@command -v etcd >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server) >/dev/null 2>&1; } || \
	  echo "etcd-server not installed: etcd tests will skip"

# Best effort: the job page's browser tests (tests/logs/test_page_browser.py) skip with a
# reason when there is no chromium. Debian's package, headless; pages load from files only.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium not installed: the job page's browser tests will skip"

# Best effort: the one-command cluster tests (issue 24) start real sshd, pdsh, a real Slurm
# (slurmctld, slurmd, munge) in namespace nodes, and the NUMA tests read numactl; each skips
# with a reason when its tool is missing.
CLUSTER_TOOLS := sshd:openssh-server pdsh:pdsh slurmctld:slurm-wlm munged:munge numactl:numactl fish:fish tcsh:tcsh dash:dash
cluster-tools:
	@missing=""; for t in $(CLUSTER_TOOLS); do \
	  PATH="$$PATH:/usr/sbin" command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	[ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null 2>&1; } || \
	  echo "not installed:$$missing: the tests that need them will skip"

lint: $(STAMP)
	$(VENV)/bin/ruff check paddlike tests bench examples log_samples/regenerate.py

test: $(STAMP) torch-env etcd paddle-env chromium cluster-tools
	$(VENV)/bin/ruff check paddlike tests bench examples log_samples/regenerate.py
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup tests

# The tests marked gpu (NCCL through CuPy on this machine's NVIDIA GPU, a launch on it).
# Where $(PYTHON) already imports CuPy with NCCL (a GPU image without registry access) they
# run with it and the source tree on PYTHONPATH; otherwise the `gpu` extra (GPU_EXTRA=gpu-cuda13
# for CUDA 13) and the test tools are installed into $(GPU_VENV) first. Without a GPU they skip.
GPU_EXTRA ?= gpu
GPU_VENV ?= .venv-gpu
# The probe ignores PYTHONPATH and refuses the tests' CuPy double (tests/support/doubles, marked
# __paddlike_double__): only an interpreter with a real CuPy and the test tools will do.
GPU_TESTS ?= tests/distributed/collective/test_nccl_gpu.py tests/distributed/collective/test_nccl.py tests/distributed/global_view/test_launch.py \
	tests/distributed/collective/test_nccl_double.py
GPU_PROBE := import sys, cupy, pytest, pytest_timeout, cupy.cuda.nccl as n; \
	sys.exit(not n.available or getattr(cupy, '__paddlike_double__', False))
test-gpu:
	@if env -u PYTHONPATH $(PYTHON) -c "$(GPU_PROBE)" 2>/dev/null; \
	then py="$(PYTHON)"; \
	else \
	  $(PYTHON) -m venv $(GPU_VENV) && $(GPU_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(GPU_VENV)/bin/python -m pip install -q -e '.[$(GPU_EXTRA),test]' || exit 1; \
	  py="$(GPU_VENV)/bin/python"; \
	fi; \
	env -u PYTHONPATH $$py -c "import sys, cupy; sys.exit(getattr(cupy, '__paddlike_double__', 0))" \
	  || { echo "test-gpu: $$py has no real CuPy (the tests' double?)"; exit 1; }; \
	PYTHONPATH="$(CURDIR)" $$py -c "import sys, cupy; from cupy.cuda import nccl, runtime as r; \
	  p = r.getDeviceProperties(0) if r.getDeviceCount() else {}; \
	  print('test-gpu:', sys.executable, 'python', sys.version.split()[0], '| CuPy', cupy.__version__, \
	        '| CUDA runtime', r.runtimeGetVersion(), 'driver', r.driverGetVersion(), '| NCCL', \
	        nccl.get_version(), '|', r.getDeviceCount(), 'GPU(s):', \
	        (lambda n: n.decode() if isinstance(n, bytes) else n)(p.get('name', '-')))" \
	  || echo "test-gpu: CuPy could not read the GPU (no GPU here?); the GPU tests will skip"; \
	PYTHONPATH="$(CURDIR)" $$py -m pytest -p no:cacheprovider -m gpu -v $(GPU_TESTS)

demo: $(STAMP)
	rm -rf demo_log
	$(PY) -m paddlike.launch --devices cpu --nproc_per_node 2 --log_dir demo_log examples/hello_allreduce.py
	@echo; echo "== the log directory the job wrote: demo_log/"; ls -l demo_log
	@echo; echo "== demo_log/endpoints.log"; cat demo_log/endpoints.log; echo
	@echo; echo "== python -m paddlike.logs demo_log"; $(PY) -m paddlike.logs demo_log

bench: $(STAMP) torch-env
	@# start-up time is measured: make sure it is not compile time (PYTHONDONTWRITEBYTECODE)
	$(PY) -m compileall -q paddlike > /dev/null
	$(PY) bench/launch.py
	$(PY) bench/collectives.py
	$(PY) bench/call_path.py
	$(PY) bench/ps.py
	$(PY) bench/rendezvous.py
	$(PY) bench/elastic.py
	$(PY) bench/global_view.py
	$(PY) bench/spawn.py
	$(PY) bench/preload.py

# The fault-injection suite (issue 27): every fault x mode of tests/support/faults.py on 4 namespace
# nodes, 3 trials a cell from a fixed seed; minutes long, so not part of `make test`.
# Needs root (network namespaces); CHAOS_ARGS="--trials 5 --faults 'kill node 0'" narrows it.
chaos: $(STAMP)
	$(PY) bench/chaos.py $(CHAOS_ARGS)

log-samples: $(STAMP)
	$(PY) log_samples/regenerate.py

clean:
	rm -rf $(VENV) $(PADDLE_VENV) demo_log build *.egg-info .pytest_cache
