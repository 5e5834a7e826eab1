#!/usr/bin/env bash
# Lint, then run the test suite under the loopback-only DDS environment.
#
#   tools/run_tests.sh                      # ruff check + pytest test -q
#   tools/run_tests.sh test/test_x.py -k y  # extra args go to pytest; given paths replace `test`
#
# Exits non-zero on any lint or test failure, and also when pytest collected no test (its exit
# status 5), so a CI run can never pass by running nothing. TEACHBOT_SKIP_LINT=1 skips ruff.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
VENV=${VENV:-.venv}
# shellcheck source=tools/loopback_env.sh
source tools/loopback_env.sh

if [[ "${TEACHBOT_SKIP_LINT:-0}" != 1 ]]; then
  lint_paths=()
  for d in src test bench tools; do [[ -d $d ]] && lint_paths+=("$d"); done
  echo "+ ruff check ${lint_paths[*]}"
  "$VENV/bin/ruff" check "${lint_paths[@]}" || { echo "run_tests: ruff check failed" >&2; exit 1; }
fi

# Run the whole test/ directory unless the caller named test files or node ids themselves.
targets=(test)
for arg in "$@"; do
  if [[ $arg != -* && -e ${arg%%::*} ]]; then targets=(); break; fi
done

# One test process per core (TEACHBOT_TEST_WORKERS overrides; 1 runs in this process). Whole files go to a
# worker, so module fixtures stay in one process; each worker reserves a ROS domain of its own (conftest.py).
workers=${TEACHBOT_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
parallel=()
if [[ $workers -gt 1 && " $* " != *" -n "* ]] && "$VENV/bin/python" -c "import xdist" 2>/dev/null; then
  parallel=(-n "$workers" --dist loadfile)
fi

echo "+ python -m pytest ${targets[*]} -q ${parallel[*]} $*"
"$VENV/bin/python" -m pytest "${targets[@]}" -q "${parallel[@]}" "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "run_tests: pytest collected no tests; counting that as a failure" >&2
  exit 1
fi
exit "$rc"
