# teachbot developer entry points.
#
#   make setup   venv + pinned deps (PyPI ROS 2 Kilted wheels) + teachbot_interfaces + teachbot
#   make test    setup, then tools/run_tests.sh (ruff + pytest); PYTEST_ARGS="-k foo" passes args
#   make test-slow  setup, then only the opt-in `slow` tests (more scenes and repetitions; ~1 h)
#   make test-stress  setup, then the suite with 2 busy processes beside it (STRESS=N, REPEAT=K)
#   make demo    setup, then `teachbot demo`
#   make lint    ruff check and the import layers (lint-imports)
#   make bench   run every bench/*.py (not _helpers.py)
#   make clean   build trees and caches (keeps the venv);  make distclean  also removes the venv
#
# setup is incremental: each step leaves a stamp under $(VENV)/.stamps and reruns only when its
# inputs change (requirements files for the pip steps, teachbot_interfaces/ files or the
# Python/NumPy/ros-* versions for the C/C++ interfaces build), so a no-op `make setup` takes ~1 s.
# On a stock ROS 2 machine use colcon instead (see colcon_defaults.yaml).

VENV ?= .venv
PYTHON ?= python3
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST_ARGS ?=
DEMO_ARGS ?=

STAMPS := $(VENV)/.stamps
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
INTERFACE_SRCS := $(shell find teachbot_interfaces -type f -not -name '.*' 2>/dev/null)

# Every pip call runs under the constraints: nothing may replace the local CPU torch with the
# registry's CUDA build, and the ROS wheels stay on one release.
export PIP_CONSTRAINT := $(CURDIR)/requirements/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DELETE_ON_ERROR:
.PHONY: setup test test-slow test-stress demo lint bench clean distclean prove-loopback

setup: $(STAMPS)/teachbot $(STAMPS)/interfaces $(STAMPS)/bubblewrap $(STAMPS)/postgresql $(STAMPS)/chromium

# The ROS 2 Kilted wheels are built for CPython 3.11 only.
$(STAMPS)/venv:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	  || { echo "error: $(PYTHON) is not Python 3.11 (the ROS wheels are cp311); set PYTHON=" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	mkdir -p $(STAMPS)
	touch $@

# torch first and alone: anything installed later that depends on torch then finds 2.13.0 (CPU).
$(STAMPS)/torch: requirements/torch.txt requirements/constraints.txt $(STAMPS)/venv
	$(PIP) install -r requirements/torch.txt
	touch $@

# One resolver pass over both files keeps them mutually consistent; the ROS wheels' CMake exports
# are then pointed at this venv's Python and NumPy headers (idempotent).
$(STAMPS)/deps: requirements/ros.txt requirements/base.txt requirements/constraints.txt $(STAMPS)/torch
	$(PIP) install -r requirements/ros.txt -r requirements/base.txt
	$(VPY) tools/fix_ros_wheel_cmake.py --prefix $(VENV)
	touch $@

# rosidl C/C++/Python code for the .msg/.srv/.action files, installed into the venv prefix. When only
# the pip install changed ($? holds just the deps stamp), the script skips the slow rebuild unless the
# Python, NumPy or ros-* versions it was compiled against changed.
$(STAMPS)/interfaces: $(STAMPS)/deps tools/build_interfaces.sh tools/abi_fingerprint.py $(INTERFACE_SRCS)
	VENV=$(VENV) JOBS=$(JOBS) tools/build_interfaces.sh \
	  $(if $(filter-out $(STAMPS)/deps,$?),,--skip-if-abi-unchanged)
	touch $@

# Editable: src/ edits take effect at once; only packaging metadata changes reinstall.
$(STAMPS)/teachbot: setup.py setup.cfg package.xml $(STAMPS)/deps
	$(PIP) install --no-deps -e .
	touch $@

# bubblewrap (bwrap) runs the console sandbox's worker in namespaces of its own (config/sandbox.yaml isolation:).
# Optional: installed with apt-get when missing and we are root, else a note; the seccomp layer applies without it.
# A stamp, so `make -q setup` (test_packaging) sees an up-to-date setup; delete it to try again.
$(STAMPS)/bubblewrap: | $(STAMPS)/venv
	@if command -v bwrap >/dev/null; then \
	  :; \
	elif [[ $$(id -u) == 0 ]] && command -v apt-get >/dev/null; then \
	  echo "setup: installing bubblewrap (namespaces for the console sandbox's worker)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
	    || echo "setup: could not install bubblewrap; the console sandbox uses its seccomp layer alone" >&2; \
	else \
	  echo "setup: bubblewrap is not installed; the console sandbox uses its seccomp layer alone (sudo apt-get install bubblewrap adds namespaces)"; \
	fi; \
	touch $@

# PostgreSQL (Debian's, any major version) for the memory's `postgres` backend tests: the test fixture
# (test/pg_server.py) starts a private server from /usr/lib/postgresql/*/bin in a temporary directory.
# Installed with apt-get when missing and we are root, else a note (those tests then skip); a stamp as above.
$(STAMPS)/postgresql: | $(STAMPS)/venv
	@if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then \
	  :; \
	elif [[ $$(id -u) == 0 ]] && command -v apt-get >/dev/null; then \
	  echo "setup: installing postgresql (a private server for the fleet memory tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } \
	    || echo "setup: could not install postgresql; the tests of the memory's postgres backend on Debian's server skip" >&2; \
	else \
	  echo "setup: PostgreSQL is not installed; the tests of the memory's postgres backend on Debian's server skip (sudo apt-get install postgresql)"; \
	fi; \
	touch $@

# Chromium and its driver (Debian's chromium, chromium-driver) for the web page's tests in a real browser
# (test/test_web_browser.py, bench/web.py: headless, selenium on the system chromedriver). Installed with apt-get
# when missing and we are root, else a note (those tests then skip); a stamp as above.
$(STAMPS)/chromium: | $(STAMPS)/venv
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  :; \
	elif [[ $$(id -u) == 0 ]] && command -v apt-get >/dev/null; then \
	  echo "setup: installing chromium and chromium-driver (the web page's browser tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; } \
	    || echo "setup: could not install chromium; the web page's browser tests skip" >&2; \
	else \
	  echo "setup: chromium is not installed; the web page's browser tests skip (sudo apt-get install chromium chromium-driver)"; \
	fi; \
	touch $@

test: setup
	VENV=$(VENV) tools/run_tests.sh $(PYTEST_ARGS)

# The opt-in tests marked `slow`: repetitions of scenarios `make test` covers once (50 expert scenes per
# template, both ends of every measured DROC range, every object of every multi-task scene).
test-slow: setup
	VENV=$(VENV) TEACHBOT_SLOW_TESTS=1 tools/run_tests.sh -m slow $(PYTEST_ARGS)

# A flake hunt: the suite with STRESS spinning processes beside it, REPEAT times in a row.
STRESS ?= 2
REPEAT ?= 1
test-stress: setup
	VENV=$(VENV) tools/run_tests.sh --stress $(STRESS) --repeat $(REPEAT) $(PYTEST_ARGS)

demo: setup
	source tools/loopback_env.sh && $(VENV)/bin/teachbot demo $(DEMO_ARGS)

lint: $(STAMPS)/deps
	$(VENV)/bin/ruff check $(wildcard src test bench tools)
	PYTHONPATH=src $(VENV)/bin/lint-imports --no-cache --no-logo .importlinter

bench: setup
	source tools/loopback_env.sh; \
	shopt -s nullglob; benches=(bench/[!_]*.py); \
	if (( $${#benches[@]} == 0 )); then echo "no benchmarks under bench/"; exit 0; fi; \
	for b in "$${benches[@]}"; do echo "+ $(VPY) $$b"; $(VPY) "$$b"; done

# Needs root (tcpdump/strace): shows DDS traffic stays on loopback.
prove-loopback: setup
	VENV=$(VENV) tools/prove_loopback.sh

clean:
	rm -rf build install log out .pytest_cache .ruff_cache src/*.egg-info $(VENV)/build $(STAMPS)/interfaces $(STAMPS)/abi
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
