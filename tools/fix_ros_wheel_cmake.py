#!/usr/bin/env python3
"""Point the ROS 2 wheels' exported CMake targets at this virtual environment's Python and NumPy.

The ros-* wheels are built on manylinux images, and the ``*__rosidl_generator_pyExport.cmake`` files
they install under ``<venv>/share`` keep that build machine's include directories
(``/opt/python/cp311-cp311/include/python3.11`` and its NumPy headers). CMake refuses imported
targets whose include directories do not exist, so building ``teachbot_interfaces`` against the
wheels fails until those paths name the running interpreter's headers and the installed NumPy's.

The rewrite is idempotent: a second run finds nothing to change. Run it with the venv's python,
after every (re)install of the ros-* wheels:

    .venv/bin/python tools/fix_ros_wheel_cmake.py [--prefix .venv] [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
import sysconfig
from pathlib import Path

# Any manylinux CPython prefix (cp311-cp311, cp313-cp313t, ...), so a rebuilt wheel set still works.
_MANYLINUX = r"/opt/python/cp\d+-cp\d+t?"
PYTHON_INCLUDE = re.compile(_MANYLINUX + r"/include/python3\.\d+t?")
NUMPY_INCLUDE = re.compile(_MANYLINUX + r"/lib/python3\.\d+t?/site-packages/numpy/(?:_core/|core/)?include")


def target_paths() -> tuple[str, str]:
    """Return (python include dir, numpy include dir) of the interpreter running this script."""
    import numpy  # imported here so --help works without numpy

    python_include = sysconfig.get_paths()["include"]
    if not (Path(python_include) / "Python.h").is_file():
        raise SystemExit(
            f"error: {python_include}/Python.h is missing; install this Python's development headers"
        )
    return python_include, numpy.get_include()


def rewrite(text: str, python_include: str, numpy_include: str) -> str:
    """Return ``text`` with the manylinux include directories replaced (NumPy first: it is longer)."""
    text = NUMPY_INCLUDE.sub(numpy_include.replace("\\", "\\\\"), text)
    return PYTHON_INCLUDE.sub(python_include.replace("\\", "\\\\"), text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite every affected ``*.cmake`` file under ``<prefix>/share``; return an exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path(sys.prefix), help="venv root (default: this one)")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if a file needs fixing")
    args = parser.parse_args(argv)

    share = args.prefix / "share"
    if not share.is_dir():
        print(f"error: {share} does not exist; install requirements/ros.txt first", file=sys.stderr)
        return 2
    python_include, numpy_include = target_paths()

    changed: list[Path] = []
    for path in sorted(share.rglob("*.cmake")):
        text = path.read_text(encoding="utf-8")
        if "/opt/python/" not in text:
            continue
        new = rewrite(text, python_include, numpy_include)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")

    verb = "need fixing" if args.check else "fixed"
    print(f"fix_ros_wheel_cmake: {len(changed)} file(s) {verb} under {share}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
