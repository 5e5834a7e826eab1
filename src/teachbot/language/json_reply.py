"""The one reader of JSON in a model's answer.

A model asked for a JSON object (a verdict, a correction, a selection) may wrap it in reasoning blocks,
code fences and prose, write Python literals (``True``, single quotes) or JSON names in any case, and
nest objects. :func:`json_values` finds every balanced ``{...}`` (or ``[...]``) span outside the
reasoning, by position of its opening bracket and with quotes respected, and reads each as JSON or,
failing that, as a Python literal; :func:`read_json` picks the first object with a key the caller wants.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Sequence
from typing import Any

from teachbot.language.reply import strip_reasoning

_CLOSING = {"{": "}", "[": "]"}
_JSON_NAMES = {"true": True, "false": False, "null": None, "none": None}


def closing_index(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at ``text[start]`` ('{' or '['), quotes respected;
    -1 when it is never closed."""
    opener = text[start]
    closer = _CLOSING[opener]
    depth, quote, escaped = 0, "", False
    for end in range(start, len(text)):
        c = text[end]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return end + 1
    return -1


def bracketed(text: str, opener: str = "{") -> Iterator[str]:
    """Every balanced span of ``text`` that starts with ``opener`` ('{' or '['), in order of its start."""
    for start, char in enumerate(text):
        if char == opener and (end := closing_index(text, start)) > 0:
            yield text[start:end]


def literal(candidate: str) -> Any:
    """``candidate`` read as JSON, else as a Python literal with JSON's names; None when it is neither."""
    try:
        return json.loads(candidate)
    except ValueError:
        pass
    try:
        return ast.literal_eval(_JsonNames().visit(ast.parse(candidate, mode="eval")))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def json_values(answer: str, kind: type = dict) -> Iterator[Any]:
    """Every value of ``kind`` (dict or list) written in ``answer``, reasoning blocks left out, in order."""
    text = strip_reasoning(answer)
    for candidate in bracketed(text, "{" if kind is dict else "["):
        value = literal(candidate)
        if isinstance(value, kind):
            yield value


def read_json(answer: str, keys: Sequence[str] = ()) -> dict[str, Any] | None:
    """The first object in ``answer`` that has one of ``keys`` (any object when none are given), with its
    keys stripped and lower-cased; None when there is none."""
    wanted = {k.lower() for k in keys}
    for value in json_values(answer):
        lowered = {str(k).strip().lower(): v for k, v in value.items()}
        if not wanted or wanted & lowered.keys():
            return lowered
    return None


class _JsonNames(ast.NodeTransformer):
    """true/false/null (any case) as Python constants, so ast.literal_eval reads JSON-ish objects."""

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 - the NodeTransformer protocol
        if node.id.lower() in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id.lower()]), node)
        return node
