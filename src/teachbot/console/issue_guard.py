"""Issue detection in the console: ``check_action(query)`` and the guard before physical robot functions.

``check_action('pick(apple)')`` (or a sentence) asks the RAIDER checker and returns its verdict as a
dict. With the profile's guard mode (config/raider.yaml ``guard``) each guarded robot function is
checked before it runs: ``warn`` logs an issue and acts anyway, ``block`` turns it into the
statement's error line ``ActionIssue: unfeasibility: ...`` and does not act, so the interaction LLM
recovers with ``ask()`` or ``say()``. With a recovery ``planner`` (teachbot.raider.recovery), block mode
also asks it for a plan, telling it what the hand holds (``held``), and the line carries the plan on one line
after ``Recovery plan: `` for the console to run as its next statement (each guarded call in it checked
again); a planner that fails leaves the line without a plan and logs why. A check that reaches no verdict
(time limit, no model) never blocks: the action runs and the log says why it was not checked. ROS-free; the
checker is anything with ``check(query) -> CheckResult`` (the agent in-process, or the issue_detection node's
client).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from teachbot.errors import TeachbotError
from teachbot.raider.agent import CheckResult
from teachbot.raider.recovery import PLAN_MARK, one_line


class ActionIssue(Exception):  # noqa: N818 - the console shows the class name: "ActionIssue: ambiguity: ..."
    """The guard found an issue with a robot function call before it ran."""


class ActionChecker(Protocol):
    def check(self, query: str) -> CheckResult: ...


class Planner(Protocol):
    def plan(self, query: str, result: CheckResult, held: str = "", scene: str = "", timeout: float | None = None) -> str: ...


def call_text(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """A robot function call as the structured query the checker reads: ``grasp('red cup')``."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class IssueGuard:
    """``check_action`` and the wrappers of the guarded functions for one console."""

    def __init__(self, checker: ActionChecker | None, mode: str = "off", guarded: Iterable[str] = (),
                 log: Callable[[str], None] = lambda _line: None, planner: Planner | None = None,
                 held: Callable[[], str] = lambda: "") -> None:
        """``planner`` and ``held`` (what the hand holds now, '' nothing): the recovery plan in block mode."""
        if mode not in ("off", "warn", "block"):
            raise ValueError(f"guard mode must be off, warn or block, got {mode!r}")
        self.checker = checker
        self.mode = mode
        self.guarded = frozenset(guarded)
        self.log = log
        self.planner, self.held = planner, held

    def _check(self, query: str) -> CheckResult:
        if self.checker is None:
            raise TeachbotError("check_action() is not available: no issue detection is configured "
                                "(start the issue_detection node, or an LLM for it)")
        return self.checker.check(query)

    def check_action(self, action: str) -> dict[str, str]:
        """The robot function: {'final_response': 'ambiguity' | 'unfeasibility' | 'none', 'explanation': ...};
        final_response is 'unknown' when the check reached no verdict (the explanation says why)."""
        if not isinstance(action, str) or not action.strip():
            raise ValueError("check_action() takes the action to check as text, e.g. check_action(\"grasp('milk')\")")
        result = self._check(action)
        return {"final_response": result.final_response or "unknown", "explanation": result.explanation}

    def wrap(self, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``functions`` with the guarded ones checked first (unchanged when the mode is off)."""
        out = dict(functions)
        if self.mode == "off":
            return out
        for name in self.guarded & set(functions):
            out[name] = self._guarded(name, functions[name])
        return out

    def _guarded(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            query = call_text(name, args, kwargs)
            try:
                result = self._check(query)
            except TeachbotError as exc:
                self.log(f"not checked before {query}: {exc}")
                return fn(*args, **kwargs)
            if not result.final_response:
                self.log(f"not checked before {query}: {result.explanation}")
            elif result.issue:
                line = f"{result.final_response}: {result.explanation}"
                if self.mode == "block":
                    raise ActionIssue(line + self._plan(query, result))
                self.log(f"ActionIssue (warn mode, acting anyway) before {query}: {line}")
            return fn(*args, **kwargs)

        return checked

    def _plan(self, query: str, result: CheckResult) -> str:
        """' Recovery plan: <one line>' from the planner, '' without one (or when it fails: logged)."""
        if self.planner is None:
            return ""
        try:
            plan = one_line(self.planner.plan(query, result, held=self.held()))
        except (TeachbotError, ValueError) as exc:  # LLMError, RecoveryError among them
            self.log(f"no recovery plan for {query}: {type(exc).__name__}: {exc}")
            return ""
        return f" {PLAN_MARK}{plan}"
