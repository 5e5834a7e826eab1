"""Running the experts' console statements (our own, trusted code) against the robot API functions.

Never for a model's code: that runs only in the sandbox (teachbot.sandbox.executor), as the console and
the baselines do.

A light stand-in for the console: each statement is executed in one namespace that holds the robot
functions, the way the sandbox binds them; an exception is recorded as the console would print it,
and the next statement still runs (a model would see the error and go on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StatementResult:
    statement: str
    value: Any = None
    error: str = ""  # 'ValueError: ...' as the console shows it; '' when it ran


def run_statements(statements: Sequence[str], functions: Mapping[str, Callable[..., Any]]) -> list[StatementResult]:
    namespace: dict[str, Any] = {"__builtins__": __builtins__, **functions}
    results = []
    for statement in statements:
        try:
            try:  # an expression shows its value, as in the console
                code, is_expression = compile(statement, "<console>", "eval"), True
            except SyntaxError:
                code, is_expression = compile(statement, "<console>", "exec"), False
            value = eval(code, namespace) if is_expression else exec(code, namespace)  # noqa: S307, S102 - console code
            results.append(StatementResult(statement, value))
        except Exception as exc:  # noqa: BLE001 - shown like the console's traceback line
            results.append(StatementResult(statement, error=f"{type(exc).__name__}: {exc}"))
    return results


def transcript(results: Sequence[StatementResult]) -> str:
    """The run as console text: '>>> statement' then its value or error."""
    lines = []
    for r in results:
        first, *rest = r.statement.splitlines()
        lines += [f">>> {first}", *(f"... {line}" for line in rest)]
        if r.error:
            lines.append(r.error)
        elif r.value is not None:
            lines.append(repr(r.value))
    return "\n".join(lines)
