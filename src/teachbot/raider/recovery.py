"""Recovery: turn a check's verdict and explanation into a plan in robot console code.

The few-shot prompt is prompts/raider/recovery.txt, after the paper's Figure 7: the action, what the robot
holds, and the issue with its explanation (RAIDER's output). The plan may do missing steps itself, ``ask()``
the person (which one, where, to bring something closer) or ``say()`` why the robot cannot act. Callable on
its own (the benchmark's Recov_Plan) and by the console's guard in block mode, whose ``ActionIssue`` line then
carries the plan on one line (:func:`one_line`) for the console to run.

The paper's Table 2 compares three contexts for the planner (:data:`CONTEXTS`): ``explanation`` (the verdict
and RAIDER's explanation, the paper's own prompt and the default), ``scene`` (the verdict and the full scene
description of the LLMVisualObs baseline instead of the explanation) and ``scene+explanation`` (both, as in
REFLECT). Pure Python, no ROS.
"""

from __future__ import annotations

import ast
import builtins
import re

from teachbot.errors import TeachbotError
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.llm.base import Model
from teachbot.raider.agent import CheckResult

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
CONTEXTS = ("explanation", "scene", "scene+explanation")  # the paper's Table 2 rows; the first is its prompt
PLAN_MARK = "Recovery plan: "  # before the one-line plan in the guard's ActionIssue line


class RecoveryError(TeachbotError):
    """The model's recovery plan is not usable code."""


def issue_block(result: CheckResult, context: str = "explanation", scene: str = "") -> str:
    """The prompt's lines about the issue in ``context`` (one of :data:`CONTEXTS`)."""
    if context not in CONTEXTS:
        raise ValueError(f"the recovery context must be one of {', '.join(CONTEXTS)}, got {context!r}")
    if "scene" in context and not scene.strip():
        raise ValueError(f"the recovery context {context!r} needs the scene description")
    lines = [f"Issue: {result.final_response}: {result.explanation}" if "explanation" in context
             else f"Issue: {result.final_response}"]
    if "scene" in context:
        lines.append("Scene:\n" + scene.strip())
    return "\n".join(lines)


def recovery_prompt(api: RobotApi, query: str, result: CheckResult, held: str = "", context: str = "explanation",
                    scene: str = "") -> str:
    """The few-shot recovery prompt for one action, what the robot holds ('' nothing) and the verdict."""
    functions = "\n".join(f"  {f.name}{f.signature}: {f.doc}" for f in api.functions if f.name != "learn_from_interaction")
    return load_prompt("raider/recovery.txt").format(api=functions, query=query, held=held or "nothing",
                                                     issue=issue_block(result, context, scene))


def extract_plan(text: str, api: RobotApi) -> str:
    """The plan's code: the first fenced block (or the whole reply), parsed, calling only API names."""
    m = FENCE.search(text)
    code = (m.group(1) if m else text).strip()
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise RecoveryError(f"the recovery plan is not valid Python: {exc.msg} (line {exc.lineno})") from None
    known = set(api.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id not in known and not hasattr(builtins, node.func.id):
            raise RecoveryError(f"the recovery plan calls {node.func.id}(), which is not a robot function")
    return code


def one_line(code: str) -> str:
    """``code`` as one line of statements joined by '; ' (an error line is one line), or RecoveryError when a
    statement cannot be written on one line (an if, a loop, a def)."""
    statements = ast.parse(code).body
    compound = [s for s in statements if isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef,
                                                         ast.AsyncFunctionDef, ast.ClassDef, ast.Match))]
    if compound:
        raise RecoveryError(f"the recovery plan has a statement that does not fit on one line (line {compound[0].lineno})")
    return "; ".join(ast.unparse(s) for s in statements)


class RecoveryPlanner:
    """Asks ``model`` for a recovery plan for a checked action, in ``context`` (one of :data:`CONTEXTS`)."""

    def __init__(self, model: Model, api: RobotApi, context: str = "explanation") -> None:
        if context not in CONTEXTS:
            raise ValueError(f"the recovery context must be one of {', '.join(CONTEXTS)}, got {context!r}")
        self.model, self.api, self.context = model, api, context

    def plan(self, query: str, result: CheckResult, held: str = "", scene: str = "", timeout: float | None = None) -> str:
        """The plan's code for ``query`` after ``result``; ``held`` what the hand holds ('' nothing), ``scene`` the
        scene description (needed by the contexts with a scene)."""
        if not result.issue:
            raise RecoveryError(f"nothing to recover from: the check of {query} found no issue")
        prompt = recovery_prompt(self.api, query, result, held, self.context, scene)
        completion = self.model.generate(prompt, stop=(), timeout=timeout)
        return extract_plan(completion.text, self.api)
