"""Checks on a whole console transcript before it is trusted as an example: it parses, every
statement is Python, and it calls only its profile's robot API, plain builtins and what it defines."""

from __future__ import annotations

import ast

from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.sandbox.executor import CONSOLE_BUILTINS


def transcript_problems(text: str, api: RobotApi, *, forbid: tuple[str, ...] = ()) -> list[str]:
    """Every reason ``text`` is not a valid example for ``api`` (empty when it is)."""
    transcript = Transcript.parse(text)
    code = transcript.code()
    if not code:
        return ["it contains no >>> statement"]
    problems: list[str] = []
    defined: set[str] = set()
    allowed = set(api.names) | set(CONSOLE_BUILTINS)
    for number, source in enumerate(code, 1):
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            problems.append(f"statement {number} is not Python ({exc.msg}): {source.splitlines()[0]!r}")
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                problems.append(f"statement {number} imports a module")
            elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
                args = node.args
                defined.update(a.arg for a in args.args + args.kwonlyargs + args.posonlyargs)
                if isinstance(node, ast.FunctionDef):
                    defined.add(node.name)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            if isinstance(node, (ast.Name, ast.Attribute)):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name.startswith("_"):
                    problems.append(f"statement {number} uses the private name {name!r}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in forbid:
                    problems.append(f"statement {number} calls {name}(), which an example must not contain")
                elif name not in allowed and name not in defined:
                    problems.append(f"statement {number} calls {name}(), which is not in the {api.profile} robot API")
    if not transcript.instructions():
        problems.append("the person never says anything (no wait_for_trigger()/ask() answer)")
    return problems
