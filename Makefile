# Every target bootstraps its own virtual environment from pyproject.toml, so each works on a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
LOAD_STAMP := $(VENV)/.installed-load
PROFILE_STAMP := $(VENV)/.installed-profile
COMPILE_STAMP := $(VENV)/.installed-compile
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: help run reset check test test-duration lint typecheck pytest check-cluster compiled bench genbench compare scale wan loadtest-ui loadtest profile load-tools profile-tools clean

$(VENV)/bin/python:
	@echo "Creating $(VENV) and installing kvnode's dependencies into it (once; about a minute)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -e .
	touch $@

# The load tools (Locust, matplotlib) and the profiler (memray, and the load tools it runs) without the
# linters and the test tools; dev holds them all.
$(LOAD_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -e '.[load]'
	touch $@ $(RUN_STAMP)

$(PROFILE_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -e '.[load,profile]'
	touch $@ $(LOAD_STAMP) $(RUN_STAMP)

$(COMPILE_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -e '.[compile]'
	touch $@ $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -e '.[dev]'
	touch $@ $(COMPILE_STAMP) $(PROFILE_STAMP) $(LOAD_STAMP) $(RUN_STAMP)

## help: this list of targets; every duration is measured on this project's 2-core machine, plus about a
##       minute for a first install into .venv
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

# The hot path compiled for these sources (kvnode.hot_path) unless KVNODE_PURE is set; where it cannot be
# built the nodes run the pure modules, and the target goes on.
COMPILE_HOT_PATH = if [ "$${KVNODE_PURE:-0}" = 0 ]; then $(PY) -m kvnode.ops.compile \
	|| echo "kvnode: no compiled hot path: the nodes run the pure modules"; fi

## run: start the local cluster in data/: 3 nodes on 127.0.0.1:8080-8082 at first, then the members data/
##      stores (see reset); serving within seconds, after the hot path's compilation (about a minute, once per
##      change of the sources; KVNODE_PURE=1 make run skips it) (Ctrl-C stops it)
run: $(COMPILE_STAMP)
	@$(COMPILE_HOT_PATH)
	$(PY) -m kvnode --replication-factor 3

## load-tools: install the load extra into .venv (Locust, matplotlib: python -m loadtest's reports, its UI,
##             the check's plots), without the linters; the load targets below do it themselves
load-tools: $(LOAD_STAMP)

## profile-tools: install the profile extra and the load tools it runs (memray) into .venv
profile-tools: $(PROFILE_STAMP)

## reset: delete data/, make run's nodes (records, membership, secret), keeping .venv; refused while a node
##        uses it. Use it after the README's membership tour, so that make run serves 8080-8082 again
reset:
	@$(PYTHON) -m kvnode.ops.data_dir data
	rm -rf data

## check: the loop to run while you work: ruff, mypy, the unit tests (in this process only: no node is
##        started) and the doctests, on 4 workers (under a minute, idle)
UNIT_ARGS ?= -q -n 4
check: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest $(UNIT_ARGS) tests/unit tests/test_imports.py tests/test_mirror.py kvnode loadtest profiling

## test: ruff, mypy, the whole pytest suite on 4 workers and the doctests: tests/unit, tests/process (a node
##       or a command as a process), tests/cluster (the scenarios) (6 minutes; 8 beside two CPU hogs)
test: test-duration lint typecheck pytest

test-duration:
	@sed -n 's/^## test: /make test: /p' $(MAKEFILE_LIST)

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(DEV_STAMP)
	$(VENV)/bin/mypy

# Four workers (pytest-xdist): most tests wait on real nodes, so on 2 cores four keep both busy (with
# the compile step below and a lighter compare smoke test, pytest took 7.5 minutes on a fresh clone,
# idle, where it took 10.5 with two workers). Work stealing rather than a file per worker
# (--dist loadfile hands out the files with the fewest tests last, the one-test soaks among them, so one
# can end the run alone): a worker that runs out takes the back half of another's queue.
# tests/conftest.py puts the modules sharing a module-scoped fixture first, where no steal reaches.
# The sources are compiled first: where PYTHONDONTWRITEBYTECODE is set (this machine sets it) each of
# the suite's thousand Python processes, nodes mostly, compiled them again, 0.2 s of CPU a start. Test
# nodes are forked warm (tests/forkserver.py): make test on a fresh clone, idle, 8 minutes before, 5.7 after.
PYTEST_ARGS ?= -n 4 --dist worksteal
pytest: $(DEV_STAMP)
	$(PY) -m compileall -q kvnode loadtest profiling tests
	$(PY) -m pytest $(PYTEST_ARGS)

## check-cluster: python -m kvnode check --local for 5 minutes, every fault (partitions and a full disk as root only):
##                the set, register and cas workloads checked; out/check-cluster/report.md, plots and history
##                (5 minutes: 305 s measured; CHECK_ARGS="--workload set,register --seed N" to choose)
check-cluster: $(LOAD_STAMP)
	$(PY) -m kvnode check --local --time 300 --nemesis all --out out/check-cluster $(CHECK_ARGS)

## compiled: compile the hot path with mypyc (about a minute, once per change of the sources): every node
##           started from then on runs it, compiled, where its sources are the build's (KVNODE_PURE=1: not)
compiled: $(COMPILE_STAMP)
	$(PY) -m kvnode.ops.compile

## bench: every fan-out mode's 3-node cluster under wrk, next to an aiohttp hello-world, and the
##        conditional-write rows on the first cluster (2.5 minutes, after the hot path's compilation as in
##        make run; KVNODE_PURE=1 make bench measures the pure modules)
bench: $(COMPILE_STAMP)
	@$(COMPILE_HOT_PATH)
	$(PY) -m loadtest.bench $(BENCH_ARGS)

## genbench: the load generator's own capacity against a hello-world app: rate asked/achieved, lateness,
##           generator CPU per request, VALID/INVALID (about a minute; GENBENCH_ARGS=--rates 5000,10000 ...)
genbench: $(RUN_STAMP)
	$(PY) -m loadtest selfbench $(GENBENCH_ARGS)

## compare: every fan-out mode on fresh 3-node clusters (healthy, slow-replica, replica-down): latency at fixed
##          rates and the highest rate each sustains; writes out/compare/report.md (at most 40 minutes;
##          COMPARE_ARGS=--quick, a smoke check: about 4 minutes)
compare: $(LOAD_STAMP)
	$(PY) -m loadtest compare --out out/compare $(COMPARE_ARGS)

## scale: the same constant-rate load (300/s, token-aware) on fresh clusters of 3, 6 and 12 members, a member
##        per core on hosts modelled on loopback: throughput, p99, replica calls and server CPU per request;
##        writes out/scale/scale.md (4 minutes: 3 rounds, each a run of 15 s of every shape in turn on a
##        fresh cluster, after its fill, idle reading and warm-up; SCALE_ARGS="--machines 3 --per-host 1,4"
##        for machines x members)
scale: $(LOAD_STAMP)
	$(PY) -m loadtest scale --out out/scale $(SCALE_ARGS)

## wan: latency by consistency level across a WAN (root, /dev/net/tun): a cluster of one datacenter (3, N = 3)
##      and one of two (3+3, N = 3 in each) on hosts made of network namespaces, a 50 ms round trip between
##      the datacenters, PUT and GET at 300/s at each level; writes out/wan/wan.md (about 10 minutes: 3 rounds
##      of 20 s runs; WAN_ARGS="--rounds 1 --duration 5" for a quick look)
wan: $(LOAD_STAMP)
	$(PY) -m loadtest wan --out out/wan $(WAN_ARGS)

## loadtest-ui: a filled local 3-node cluster and Locust's web UI on http://127.0.0.1:8089
loadtest-ui: $(LOAD_STAMP)
	$(PY) -m loadtest ui

## loadtest: the same cluster under Locust's default workload, headless, 30 s; Locust's HTML and CSV report
##           and summary.md in out/loadtest/ (about 45 s; LOADTEST_ARGS="--duration 60 --users 50")
loadtest: $(LOAD_STAMP)
	$(PY) -m loadtest locust --out out/loadtest $(LOADTEST_ARGS)

## profile: the checked-in profile set: py-spy (CPU, waits, GIL, dumps) and memray flamegraphs of async vs
##          sync, PUT, GET and CAS, healthy and with a slow replica, 400 requests/s, and healthy PUT and GET
##          at saturation (wrk, 64 connections: CPU and batching); writes profiling/reports/<today>/report.md (about 12
##          minutes on a quiet machine; needs ptrace rights and wrk, installed if missing;
##          PROFILE_ARGS=--quick: a smoke check, about 3; PROFILE_OUT=DIR writes elsewhere)
PROFILE_OUT ?= profiling/reports/$(shell date -u +%Y-%m-%d)
profile: $(PROFILE_STAMP)
	$(PY) -m profiling compare --out $(PROFILE_OUT) $(PROFILE_ARGS)

## clean: remove the virtual environment, data/ and the tools' caches
clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
