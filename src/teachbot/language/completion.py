"""The console's one-line ``SyntaxError`` for text that is not Python.

LLM replies are read by ``teachbot.language.reply.read_reply``, which copes with fences, prose,
``<think>`` blocks and invented output; this module only words the error a non-statement gets.
"""

from __future__ import annotations

import ast


def syntax_error(source: str) -> str:
    """One error line when ``source`` is not Python (e.g. prose), else ''."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (write one Python statement after >>>; prose goes in say('...'))"
    return ""
