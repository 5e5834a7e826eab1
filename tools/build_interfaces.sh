#!/usr/bin/env bash
# Build teachbot_interfaces (rosidl: the C and Python type supports that rclpy loads; no C++, see
# TEACHBOT_INTERFACES_PYTHON_ONLY in its CMakeLists.txt) against the PyPI ROS 2 wheels in a venv and
# install it into that venv. Called by `make setup`; safe to rerun.
#
#   tools/build_interfaces.sh [--skip-if-abi-unchanged]
#   env: VENV (default .venv), BUILD_DIR (default $VENV/build/teachbot_interfaces), JOBS (nproc)
#
# --skip-if-abi-unchanged: make passes it when only the Python dependencies were reinstalled; the
# build is then skipped unless Python, NumPy or a ros-* wheel changed version (tools/abi_fingerprint.py).
# Such a change always discards the build tree: CMake's dependency scan would not see it.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=$(cd "${VENV:-.venv}" && pwd)
BUILD_DIR=${BUILD_DIR:-$VENV/build/teachbot_interfaces}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FINGERPRINT=$VENV/.stamps/abi
SRC=$PWD/teachbot_interfaces

if "$VENV/bin/python" tools/abi_fingerprint.py --check "$FINGERPRINT" >/dev/null; then
  if [[ ${1:-} == --skip-if-abi-unchanged && -d $BUILD_DIR ]]; then
    echo "build_interfaces: Python, NumPy and ros-* wheels unchanged; keeping the installed build"
    exit 0
  fi
elif [[ -d $BUILD_DIR ]]; then
  # Compiled against other headers or libraries: an incremental build would not notice.
  echo "build_interfaces: Python, NumPy or ros-* versions changed; rebuilding from scratch"
  rm -rf "$BUILD_DIR"
fi

tools/ensure_build_tools.sh

# A build tree configured for another source directory (a copied checkout) cannot be reused.
if [[ -f $BUILD_DIR/CMakeCache.txt ]] \
    && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$SRC" "$BUILD_DIR/CMakeCache.txt"; then
  rm -rf "$BUILD_DIR"
fi

# The venv's bin/ first: rosidl's generators and ament's helpers run as Python scripts from there.
export PATH="$VENV/bin:$PATH"
# Called from make: drop its recursion settings (directory chatter, jobserver); JOBS sets parallelism.
unset MAKEFLAGS MFLAGS MAKELEVEL
cmake -S "$SRC" -B "$BUILD_DIR" \
  -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
  -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF -DCMAKE_INSTALL_MESSAGE=LAZY \
  -DTEACHBOT_INTERFACES_PYTHON_ONLY=ON
cmake --build "$BUILD_DIR" --parallel "$JOBS"
cmake --install "$BUILD_DIR"
"$VENV/bin/python" -c "from teachbot_interfaces.action import Pick; from teachbot_interfaces.msg import ObjectList"
"$VENV/bin/python" tools/abi_fingerprint.py "$FINGERPRINT"
