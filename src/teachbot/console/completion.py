"""The console's one-line ``SyntaxError`` for text that is not Python, and the old completion splitter.

LLM replies are read by ``teachbot.console.reply.read_reply``, which copes with fences, prose,
``<think>`` blocks and invented output. ``split_completion`` (first line plus ``...`` lines, the
rest discarded) stays only until ``teachbot.console.session`` moves to ``read_reply``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from teachbot.console.transcript import CONTINUATION


@dataclass(frozen=True)
class ParsedCompletion:
    """``source`` to execute (may be empty), ``discarded`` text, and ``error`` when it is not code."""

    source: str
    discarded: str
    error: str = ""


def split_completion(text: str) -> ParsedCompletion:
    """First statement of ``text`` (its first line plus ``...`` continuation lines)."""
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ParsedCompletion("", text, "EmptyCompletion: the model wrote nothing after >>>")
    # the prompt ends with '>>> '; many servers hand back the completion with a space before the code
    statement = [lines[0].lstrip()]
    rest = lines[1:]
    while rest and (rest[0].startswith(CONTINUATION) or rest[0].rstrip() == CONTINUATION.rstrip()):
        statement.append(rest.pop(0)[len(CONTINUATION):])
    while statement and not statement[-1].strip():
        statement.pop()
    source = "\n".join(statement)
    discarded = "\n".join(rest)
    error = syntax_error(source)
    if error and rest and _is_block_header(source):
        # a block written without '...' prefixes: take the indented lines that follow as its body
        body = []
        while rest and (rest[0].startswith((" ", "\t")) or not rest[0].strip()):
            body.append(rest.pop(0))
        candidate = "\n".join([source, *body]).rstrip()
        if body and not syntax_error(candidate):
            return ParsedCompletion(candidate, "\n".join(rest))
    return ParsedCompletion(source, discarded, error)


def syntax_error(source: str) -> str:
    """One error line when ``source`` is not Python (e.g. prose), else ''."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (write one Python statement after >>>; prose goes in say('...'))"
    return ""


def _is_block_header(source: str) -> bool:
    return source.rstrip().endswith(":") and "\n" not in source.strip()
