"""The optional LLM judge of explanations (the benchmark's Expl beside the automatic key-fact score).

The judge sees the case's truth (verdict, issue type, grounding, key facts) and the method's verdict
and explanation, and answers whether the explanation gives the true reason (prompts/raider/judge.txt).
A reply it cannot read is no grade (None), never a pass. Pure Python, no ROS.
"""

from __future__ import annotations

from teachbot.evaluation.raider_cases import RaiderCase
from teachbot.language.json_reply import read_json
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import LLMError, Model
from teachbot.raider.agent import CheckResult


def judge_prompt(case: RaiderCase, result: CheckResult) -> str:
    facts = "; ".join(" or ".join(f"'{alt}'" for alt in fact) for fact in case.facts)
    return load_prompt("raider/judge.txt").format(
        query=case.query, expected=case.expected, issue_type=case.issue_type,
        grounding=", ".join(case.grounding) or "nothing in the scene", facts=facts,
        verdict=result.final_response or "(no verdict)", explanation=result.explanation or "(none)")


class ExplanationJudge:
    """``grade(case, result)``: True, False, or None when the judge gave no readable answer."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def grade(self, case: RaiderCase, result: CheckResult) -> bool | None:
        if result.final_response != case.expected:
            return False  # a wrong verdict explains the wrong thing
        try:
            text = self.model.generate(judge_prompt(case, result), stop=(), max_tokens=200).text
        except LLMError:
            return None
        value = read_json(text, ("correct",))
        if value is None or not isinstance(value.get("correct"), bool):
            return None
        return value["correct"]
