# Two commands on a fresh machine:
#   make demo   - set up .venv and run the main job on a small built-in default
#   make test   - set up .venv and run the test suite
# (make docs: the documentation site from docs/ into site/)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip's extra index for torch==2.13.0 (empty: pip's own; docker/Dockerfile gives the CPU
# wheels' index, docker/Dockerfile.cuda the CUDA 12.6 wheels'), and the extras installed
TORCH_INDEX ?=
EXTRAS ?= dev

.PHONY: install test demo lint docs bench clean container container-cuda

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23"
	# torch: this machine's CPU wheel, or TORCH_INDEX's build (a bare `torch` pulls a multi-GB CUDA build)
	$(BIN)/python -m pip install --quiet -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==2.13.0" "numpy<2" "setuptools<81"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=20

demo: install
	$(BIN)/cl-suites run --suite Procgen6 --method ft --preset small --seed 0 --run-dir runs/demo-$(shell date +%Y%m%d-%H%M%S)

lint: install
	$(BIN)/ruff check cl_suites baselines_sb3 baselines_jax tests benchmarks examples
	$(BIN)/ruff format --check cl_suites baselines_sb3 baselines_jax tests benchmarks examples

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: install
	$(BIN)/python -m benchmarks.speed.bench_procgen

# the container images (docs/install.md, "In a container"); they run `make install` inside
container:
	docker build -f docker/Dockerfile -t cl-suites:cpu .

container-cuda:
	docker build -f docker/Dockerfile.cuda -t cl-suites:cuda .

clean:
	rm -rf $(VENV) runs report site
