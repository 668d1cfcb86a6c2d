# The two commands: `make run` (the default grid) and `make test` (the test suite).
# Both first create or update the pinned environment in .venv (bin/setup, idempotent).
JOBS ?= 2
SNAKEMAKE_ARGS ?=

.PHONY: run test setup lint bench bench-gpu

setup:
	bin/setup

# after a kill -9 the killed run's lock is removed first, once no process of it is left
run: setup
	.venv/bin/python -m zoomattn unlock-stale -- $(SNAKEMAKE_ARGS)
	.venv/bin/snakemake -j $(JOBS) $(SNAKEMAKE_ARGS)

test: setup
	.venv/bin/python -m pytest -q

lint: setup
	.venv/bin/ruff check zoomattn tests benchmarks && .venv/bin/ruff format --check zoomattn tests benchmarks
	.venv/bin/snakemake --lint

bench: setup
	.venv/bin/python benchmarks/opamp_attention.py
	.venv/bin/python benchmarks/rectified_attention.py

# The paper preset's methods on a random Llama-3.1-8B-shaped model, on one CUDA GPU (~10 min on an
# H100; 16 GB of temporary disk): benchmarks/results/gpu_paper.{json,md}
bench-gpu: setup
	.venv/bin/python benchmarks/gpu_paper.py
