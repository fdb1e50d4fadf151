# Two commands for a fresh machine with only Python:
#   make run    run share-manager on the embedded default (SQLite + file locks under ./.state)
#   make test   run every test CI runs (lint, unit, functional, playbooks)
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
# Three workers on two cores: the functional tests mostly wait on processes
# they started (measured: -n 2 24.5 min, -n 3 19 min, -n 4 21 min: overloaded).
PYTEST_ARGS ?= -n 3 --maxschedchunk=1 --durations=40

.PHONY: run test lint genconfig bench bench-scale bench-50k clean local-packages

$(BIN)/.installed: setup.cfg pyproject.toml constraints.txt constraints-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -c constraints-dev.txt -e '.[test]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/sharectl db sync
	exec $(BIN)/share-manager $(ARGS)

# ansible-lint: the role and the playbooks, their syntax check included; offline
# (.ansible-lint). About 15 s.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	ANSIBLE_LOCALHOST_WARNING=False $(BIN)/ansible-lint playbooks/

# The Debian packages of the local driver's and etcd's tests, when root and
# missing (.ci/local-packages).
local-packages:
	.ci/local-packages

test: $(BIN)/.installed lint local-packages
	$(BIN)/pytest $(PYTEST_ARGS)

# Every benchmark at the issue's sizes (long); BENCH_ARGS=--quick for small ones.
# doc/performance.rst holds the figures and what bounds them.
bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

# One stack of N independent shares: create, 1 % update, delete; ratios in
# one run (benchmarks/bench_scale.py; doc/performance.rst, "Stacks at scale").
bench-scale: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_scale.py --sizes 1000,10000 $(BENCH_ARGS)

# The same up to 50,000 (about 35 minutes on a quiet two-core machine).
bench-50k: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_scale.py --sizes 1000,10000,50000 $(BENCH_ARGS)

genconfig: $(BIN)/.installed
	$(BIN)/oslo-config-generator --config-file etc/sharemgr-config-generator.conf

clean:
	rm -rf $(VENV) build dist *.egg-info

# Crash chaos, long version (doc/chaos.rst): KILLS kills on SQLite + file locks
# (one engine), SERVER_KILLS on PostgreSQL + Redis (two engines); SEED fixes
# the seed (default: random, printed). Each run prints a JSON summary.
KILLS ?= 1000
SERVER_KILLS ?= 300
SEED ?=
.PHONY: chaos
chaos: $(BIN)/.installed
	rc=0; \
	$(BIN)/python -m tests.functional.chaos --setup sqlite --kills $(KILLS) $(if $(SEED),--seed $(SEED)) || rc=1; \
	$(BIN)/python -m tests.functional.chaos --setup servers --kills $(SERVER_KILLS) $(if $(SEED),--seed $(SEED)) || rc=1; \
	exit $$rc

# Pause and partition faults, long version (doc/chaos.rst): FAULTS faults on
# PostgreSQL + Redis with two engines, the kinds in turn; SEED fixes the seed.
FAULTS ?= 400
.PHONY: faults
faults: $(BIN)/.installed
	$(BIN)/python -m tests.functional.faults --faults $(FAULTS) $(if $(SEED),--seed $(SEED))

# Many hosts, long version (doc/chaos.rst): HOST_FAULTS faults on three
# engines in network namespaces, PostgreSQL primary + synchronous standby,
# etcd (COORDINATION=redis for Redis); HOLD="MIN MAX" seconds a fault lasts,
# INTERVAL="MIN MAX" seconds between two; root only.
HOST_FAULTS ?= 550
COORDINATION ?= etcd
HOLD ?=
INTERVAL ?=
.PHONY: hosts
hosts: $(BIN)/.installed
	$(BIN)/python -m tests.functional.hosts --faults $(HOST_FAULTS) \
		--coordination $(COORDINATION) $(if $(SEED),--seed $(SEED)) \
		$(if $(HOLD),--hold $(HOLD)) $(if $(INTERVAL),--interval $(INTERVAL))
