"""The RAIDER paper's Table 1 (explanation success, %, per issue type) and how many cases it had per type.

The table compares five methods on the paper's AI2-THOR dataset with GPT-4o; its rows are the paper's issue
types (teachbot.evaluation.raider_cases.ISSUE_LABELS, the same numbers). The paper gives no case count per
type; :data:`PAPER_N` holds the smallest counts that give every one of Table 1's 40 percentages to its one
decimal (12 IA, 39 IN, 28 IU1, ...; 190 cases). Our benchmark keeps the paper's proportions between types with
at least 20 cases per type (:func:`target_counts`). Pure Python.
"""

from __future__ import annotations

TABLE_1: dict[str, dict[str, float]] = {
    "LLMVisualObs": {"IA": 83.3, "IN": 66.7, "IU1": 0.0, "IU2": 58.3, "IU3": 63.6, "IU4": 87.1, "IU5": 42.1, "IU6": 40.7},
    "Precond": {"IA": 0.0, "IN": 46.2, "IU1": 0.0, "IU2": 0.0, "IU3": 13.6, "IU4": 16.1, "IU5": 26.3, "IU6": 63.0},
    "VQA": {"IA": 8.3, "IN": 69.2, "IU1": 10.7, "IU2": 0.0, "IU3": 36.4, "IU4": 12.9, "IU5": 31.6, "IU6": 11.1},
    "LLMAgentVQA": {"IA": 66.7, "IN": 38.5, "IU1": 46.4, "IU2": 8.3, "IU3": 77.3, "IU4": 48.4, "IU5": 47.4, "IU6": 63.0},
    "RAIDER": {"IA": 100.0, "IN": 92.3, "IU1": 85.7, "IU2": 75.0, "IU3": 90.9, "IU4": 96.8, "IU5": 68.4, "IU6": 85.2},
}
PAPER_N = {"IA": 12, "IN": 39, "IU1": 28, "IU2": 12, "IU3": 22, "IU4": 31, "IU5": 19, "IU6": 27}
# Which of the paper's rows a method of ours is set beside (RAIDER's is always shown).
PAPER_ROW = {"raider": "RAIDER", "precond": "Precond", "visual-obs": "LLMVisualObs"}
MIN_PER_TYPE = 20


def smallest_n(percent: float, others: tuple[float, ...] = (), limit: int = 200) -> int:
    """The smallest case count at which ``percent`` and every one of ``others`` is some k/n to one decimal."""
    for n in range(1, limit):
        if all(any(abs(100.0 * k / n - p) < 0.051 for k in range(n + 1)) for p in (percent, *others)):
            return n
    raise ValueError(f"no case count below {limit} gives {percent} and {others}")


def target_counts(minimum: int = MIN_PER_TYPE) -> dict[str, int]:
    """Cases per issue type in the paper's proportions, the smallest type holding ``minimum``."""
    scale = minimum / min(PAPER_N.values())
    return {kind: round(n * scale) for kind, n in PAPER_N.items()}
