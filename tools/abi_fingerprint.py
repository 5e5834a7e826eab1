#!/usr/bin/env python3
"""Write what the compiled teachbot_interfaces depend on to a file, touching it only on change.

The Makefile makes the interfaces build depend on this file instead of on the whole dependency
install, so adding e.g. a test plugin to requirements/base.txt does not trigger the slow C/C++
rebuild, while a new Python, NumPy (its C API is compiled in) or ros-* wheel release does.
Make re-checks a target's time after its recipe, so an untouched file leaves the build alone.

    .venv/bin/python tools/abi_fingerprint.py .venv/.stamps/abi
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
    """Write the fingerprint to ``argv[0]`` unless it already holds exactly that text."""
    if len(argv) != 1:
        print("usage: abi_fingerprint.py OUTPUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    text = fingerprint()
    if out.is_file() and out.read_text(encoding="utf-8") == text:
        print(f"abi_fingerprint: {out} unchanged")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    print(f"abi_fingerprint: {out} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
