"""The console's rule for function definitions: defining a function runs nothing.

A ``def`` (or ``lambda``) evaluates its default values and its decorators when the definition runs,
not when the function is called; a default such as ``x=put_first_on_second('red block', 'blue bowl')``
moves the robot as the definition is typed, where no call in the transcript shows it. So defaults are
literals only (numbers, strings, None, True, False, and tuples, lists, sets and dicts of those) and
decorators are refused. Annotations are not evaluated today (the worker compiles with the postponed
annotations it inherits from its own ``from __future__ import annotations``); they are still held to
type expressions (names, attributes, subscripts, ``|``), never calls, so that does not rest on a flag.

Standard library only: the sandbox worker (``python -I -S``) loads this file by path, beside
teachbot/sandbox/_sandbox_worker.py, which applies it in ``check_source``.
"""

from __future__ import annotations

import ast

_NUMBER = (int, float, complex)
_TYPE_NODES = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Load)


def is_literal(node: ast.AST) -> bool:
    """Whether ``node`` is a plain literal: evaluating it calls nothing and looks nothing up."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, _NUMBER)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(is_literal(element) for element in node.elts)
    if isinstance(node, ast.Dict):
        return all(key is not None and is_literal(key) for key in node.keys) and all(map(is_literal, node.values))
    return False


def _is_type_expression(node: ast.AST) -> bool:
    """Whether an annotation only names types (``int``, ``list[str]``, ``str | None``): no call, no lambda."""
    for part in ast.walk(node):
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr):
            continue
        if not isinstance(part, (*_TYPE_NODES, ast.BitOr)):
            return False
    return True


def definition_problem(node: ast.AST) -> tuple[str, str] | None:
    """What would run when the definition ``node`` is executed, as (what, hint) for the violation; None if nothing.

    Only ``ast.FunctionDef`` and ``ast.Lambda`` nodes can have a problem; any other node has none."""
    if not isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return None
    if isinstance(node, ast.FunctionDef) and node.decorator_list:
        return ("a decorator", f"it runs when '{node.name}' is defined; call the function inside the body instead")
    args = node.args
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not is_literal(default):
            return (f"the default value {ast.unparse(default)!r}, which is not a literal,",
                    "a default runs when the function is defined; use a literal such as None and compute the "
                    "value inside the body")
    if isinstance(node, ast.FunctionDef):
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
        for annotation in [*(a.annotation for a in every), node.returns]:
            if annotation is not None and not _is_type_expression(annotation):
                return (f"the annotation {ast.unparse(annotation)!r}",
                        "annotations run when the function is defined; name a type such as str or list[str]")
    return None
