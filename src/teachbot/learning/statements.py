"""What a console statement calls, read from its source (the rehearsal and the console's pending lessons use it)."""

from __future__ import annotations

import ast
from collections.abc import Collection


def calls(source: str, names: Collection[str]) -> bool:
    """Whether a console statement calls one of ``names`` (a plain name call anywhere in it)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names for node in ast.walk(tree))
