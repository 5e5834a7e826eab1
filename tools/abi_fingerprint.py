#!/usr/bin/env python3
"""Record what the compiled teachbot_interfaces depend on: Python, NumPy and ros-* versions.

tools/build_interfaces.sh writes the fingerprint after each successful build. When only the
dependency install changed (e.g. a test plugin added to requirements/base.txt), it compares first
and skips the slow C/C++ rebuild unless the interpreter, NumPy (its C API is compiled in) or a
ros-* wheel changed version.

    .venv/bin/python tools/abi_fingerprint.py FILE           # write FILE (only if different)
    .venv/bin/python tools/abi_fingerprint.py --check FILE   # exit 0 if FILE matches, else 1
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path


def fingerprint() -> str:
    """Interpreter version plus the versions of numpy and every ros-* distribution, one a line."""
    names = sorted(
        f"{dist.metadata['Name'].lower()}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"] and (dist.metadata["Name"].lower().startswith("ros-")
                                      or dist.metadata["Name"].lower() == "numpy")
    )
    return "\n".join([f"python {sys.version.split()[0]} {sys.implementation.cache_tag}", *names]) + "\n"


def main(argv: list[str]) -> int:
    """Write the fingerprint to the file named in ``argv`` unless it already holds that text.

    With ``--check`` nothing is written; the exit status tells whether the file matches.
    """
    check = "--check" in argv
    paths = [arg for arg in argv if arg != "--check"]
    if len(paths) != 1:
        print("usage: abi_fingerprint.py [--check] FILE", file=sys.stderr)
        return 2
    out = Path(paths[0])
    text = fingerprint()
    if out.is_file() and out.read_text(encoding="utf-8") == text:
        print(f"abi_fingerprint: {out} unchanged")
        return 0
    if check:
        print(f"abi_fingerprint: {out} differs (or is missing)")
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    print(f"abi_fingerprint: {out} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
