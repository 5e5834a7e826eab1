"""Console transcript lines as highlighted tokens, rendered on the server with Pygments.

The page never receives HTML: each line is a list of ``[css_class, text]`` pairs that it turns into text
nodes, so nothing a model or a person wrote can become markup or script. Statements (``>>> `` and ``... ``
lines) are lexed as Python, one statement at a time so strings and brackets spanning lines lex right;
output lines that are Python values (a repr) are lexed as Python too, error lines get the error class on
their exception name, anything else is plain output.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer
from pygments.token import STANDARD_TYPES, _TokenType

PROMPTS = (">>> ", "... ")
PROMPT_CLASS, OUTPUT_CLASS, ERROR_CLASS = "gp", "go", "gr"
_ERROR = re.compile(r"^([A-Z]\w*(?:Error|Exception|Exceeded|Timeout|NotApproved|Ended|Large)|Timeout)(:.*)?$", re.S)
Tokens = list[list[str]]
MAX_LINE_CHARS = 4000  # a longer line is cut with an ellipsis (the transcript bounds keep real lines far shorter)


@lru_cache(maxsize=1)
def _lexer() -> PythonLexer:
    return PythonLexer(stripnl=False, ensurenl=False)


def css_class(kind: _TokenType) -> str:
    """The short Pygments class of a token type ('k', 's2', ...), '' for plain text."""
    while kind not in STANDARD_TYPES and kind.parent is not None:
        kind = kind.parent
    return STANDARD_TYPES.get(kind, "")


def _python(text: str) -> list[Tokens]:
    """``text`` lexed as Python, split into lines of [class, text] pairs (adjacent pairs of a class merged)."""
    lines: list[Tokens] = [[]]
    for kind, value in _lexer().get_tokens(text):
        cls = css_class(kind)
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if not part:
                continue
            line = lines[-1]
            if line and line[-1][0] == cls:
                line[-1][1] += part
            else:
                line.append([cls, part])
    return lines


def _output(line: str) -> Tokens:
    error = _ERROR.match(line)
    if error:
        return [[ERROR_CLASS, error.group(1)], [OUTPUT_CLASS, error.group(2) or ""]]
    try:
        ast.literal_eval(line)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return [[OUTPUT_CLASS, line]] if line else []
    return (_python(line) or [[]])[0]


def highlight(lines: Sequence[str]) -> list[Tokens]:
    """One token list per transcript line (see the module docstring)."""
    out: list[Tokens] = []
    statement: list[str] = []

    def flush() -> None:
        if statement:
            code = _python("\n".join(line[4:] for line in statement))
            for prompt, tokens in zip(statement, code + [[]] * (len(statement) - len(code))):
                out.append([[PROMPT_CLASS, prompt[:4]], *tokens])
            statement.clear()

    for raw in lines:
        line = raw if len(raw) <= MAX_LINE_CHARS else raw[:MAX_LINE_CHARS] + " [...]"
        if line.startswith(PROMPTS) or line in (">>>", "..."):
            if line.startswith(">>>"):
                flush()
            statement.append(line if len(line) >= 4 else line + " ")
        else:
            flush()
            out.append(_output(line))
    flush()
    return out


def plain(tokens: Iterable[Tokens]) -> list[str]:
    """The text of highlighted lines (what the person reads)."""
    return ["".join(text for _cls, text in line) for line in tokens]


def stylesheet(style: str = "friendly") -> str:
    """The CSS of the token classes under ``.hl`` (served as /static/highlight.css), plus the console's own classes."""
    return HtmlFormatter(style=style).get_style_defs(".hl") + (
        f"\n.hl .{PROMPT_CLASS} {{ color: #888; }}\n.hl .{OUTPUT_CLASS} {{ color: #333; }}\n"
        f".hl .{ERROR_CLASS} {{ color: #b00; font-weight: bold; }}\n")


__all__ = ["css_class", "highlight", "plain", "stylesheet"]
