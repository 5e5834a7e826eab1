#!/usr/bin/env bash
# Lint, then run the test suite under the loopback-only DDS environment.
#
#   tools/run_tests.sh                        # ruff check + lint-imports + pytest test -q
#   tools/run_tests.sh test/test_x.py -k y    # extra args go to pytest; given paths replace `test`
#   tools/run_tests.sh --stress 2             # the same with 2 busy processes beside it (a flake hunt)
#   tools/run_tests.sh --stress 2 --repeat 3  # ... three times in a row, stopping at the first failure
#
# --stress N starts N processes that spin on a CPU each (at the suite's own priority) for the whole
# run and stops them on exit, so a test whose verdict depends on the machine's speed shows itself on
# any machine. --repeat K runs the suite K times and fails at the first failing round; each round's
# wall time and result are printed at the end. Both go before pytest's own arguments.
#
# Exits non-zero on any lint or test failure, and also when pytest collected no test (its exit
# status 5), so a CI run can never pass by running nothing. TEACHBOT_SKIP_LINT=1 skips ruff and lint-imports.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
VENV=${VENV:-.venv}
# shellcheck source=tools/loopback_env.sh
source tools/loopback_env.sh

stress=0
repeat=1
while (($#)); do
  case $1 in
    --stress) stress=${2:?"--stress needs the number of busy processes"}; shift 2 ;;
    --repeat) repeat=${2:?"--repeat needs the number of rounds"}; shift 2 ;;
    *) break ;;
  esac
done
for n in "$stress" "$repeat"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "run_tests: --stress and --repeat take whole numbers, not '$n'" >&2; exit 2; }
done

if [[ "${TEACHBOT_SKIP_LINT:-0}" != 1 ]]; then
  lint_paths=()
  for d in src test bench tools; do [[ -d $d ]] && lint_paths+=("$d"); done
  echo "+ ruff check ${lint_paths[*]}"
  "$VENV/bin/ruff" check "${lint_paths[@]}" || { echo "run_tests: ruff check failed" >&2; exit 1; }
  # the one-way import graph of .importlinter (layers; rclpy only in nodes/ and the commands)
  echo "+ lint-imports"
  PYTHONPATH=src "$VENV/bin/lint-imports" --no-cache --no-logo .importlinter \
    || { echo "run_tests: lint-imports found an import against the layers (.importlinter)" >&2; exit 1; }
fi

# Run the whole test/ directory unless the caller named test files or node ids themselves.
targets=(test)
for arg in "$@"; do
  if [[ $arg != -* && -e ${arg%%::*} ]]; then targets=(); break; fi
done

# One test process per core (TEACHBOT_TEST_WORKERS overrides; 1 runs in this process). Whole files go to a
# worker, so module fixtures stay in one process; each worker reserves a ROS domain of its own (conftest.py).
# Files go out in collection order, which conftest.py begins with the slowest (test/schedule.txt), not
# xdist's default of the files with the most tests first: a long file started last is the run's tail.
workers=${TEACHBOT_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
parallel=()
if [[ $workers -gt 1 && " $* " != *" -n "* ]] && "$VENV/bin/python" -c "import xdist" 2>/dev/null; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi

busy=()
stop_busy() {
  ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null
  busy=()
}
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT TERM
for ((i = 0; i < stress; i++)); do
  # a plain shell loop: one full core each, no memory, nothing to clean up but the process
  bash -c 'while :; do :; done' &
  busy+=($!)
done
((stress)) && echo "run_tests: $stress busy processes beside the suite (pids ${busy[*]})"

rounds=()
rc=0
for ((round = 1; round <= repeat; round++)); do
  ((repeat > 1)) && echo "run_tests: round $round of $repeat"
  echo "+ python -m pytest ${targets[*]} -q ${parallel[*]} $*"
  started=$SECONDS
  "$VENV/bin/python" -m pytest "${targets[@]}" -q "${parallel[@]}" "$@"
  rc=$?
  if [[ $rc == 5 ]]; then
    echo "run_tests: pytest collected no tests; counting that as a failure" >&2
    rc=1
  fi
  rounds+=("round $round: exit $rc in $((SECONDS - started)) s (stress $stress)")
  [[ $rc == 0 ]] || break
done
stop_busy
if ((repeat > 1 || stress)); then
  printf 'run_tests: %s\n' "${rounds[@]}"
fi
exit "$rc"
