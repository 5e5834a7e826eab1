"""Recovery: turn a check's verdict and explanation into a plan in robot console code.

The few-shot prompt is prompts/raider/recovery.txt; the plan may do missing steps itself, ``ask()``
the person or ``say()`` why the robot cannot act. Callable on its own (the benchmark's Recov_Plan)
and by the console's LLM through the ``ActionIssue`` error line. Pure Python, no ROS.
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


class RecoveryError(TeachbotError):
    """The model's recovery plan is not usable code."""


def recovery_prompt(api: RobotApi, query: str, result: CheckResult) -> str:
    """The few-shot recovery prompt for one action and its verdict."""
    functions = "\n".join(f"  {f.name}{f.signature}: {f.doc}" for f in api.functions if f.name != "learn_from_interaction")
    issue = f"{result.final_response}: {result.explanation}"
    return load_prompt("raider/recovery.txt").format(api=functions, query=query, issue=issue)


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


class RecoveryPlanner:
    """Asks ``model`` for a recovery plan for a checked action."""

    def __init__(self, model: Model, api: RobotApi) -> None:
        self.model, self.api = model, api

    def plan(self, query: str, result: CheckResult, timeout: float | None = None) -> str:
        if not result.issue:
            raise RecoveryError(f"nothing to recover from: the check of {query} found no issue")
        completion = self.model.generate(recovery_prompt(self.api, query, result), stop=(), timeout=timeout)
        return extract_plan(completion.text, self.api)
