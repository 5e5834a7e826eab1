"""What a sweep will cost before it spends anything: ``teachbot eval cap ... --estimate``.

The estimate is a range per method, from what is known before a run (the sweep's runs, every trial's, each method's real prompt
sizes, each role's price) and stated assumptions about what is not (how many statements a model needs). It counts
prompt tokens at the full input price (a provider's prefix cache only lowers it) and the LLM person only with
``--person llm``. The real figures are in the report afterwards.

Prompt sizes are measured, not guessed: the console's static prompt (``PromptBuilder.base``) plus ``k`` seed examples
of the mean seed size; the CaP prompt for the baselines; tokens counted as the console's budget counts them
(``estimate_tokens``: about four characters a token).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from teachbot.console.prompt import PromptBuilder
from teachbot.evaluation.baselines import CapPrompt, seed_programs
from teachbot.evaluation.harness import METHODS, UNBOUND
from teachbot.evaluation.sweep import SweepConfig, schedule
from teachbot.language.registry import RobotApi
from teachbot.llm.base import estimate_tokens
from teachbot.llm.pricing import PER_TOKENS, Price
from teachbot.paths import share_dir

# Assumptions (stated in the printout): statements per attempt of a console method, a round's added transcript,
# output tokens per call, the improvement chain's calls per lesson and their prompt size, the person's prompt size.
STATEMENTS = (3, 6)  # a competent model's statements for one attempt: fewest, most
STATEMENT_TOKENS = 60  # transcript tokens a statement and its output add to the next prompt
OUTPUT_TOKENS = {"interaction": 25, "function_generation": 80, "improvement": 150, "person": 40}
LEARNING_CALLS = 5  # problem, better, scope, transcript, distillation
LEARNING_PROMPT_TOKENS = 1200
PERSON_PROMPT_TOKENS = 400


@dataclass(frozen=True)
class Range:
    low: float
    high: float

    def __add__(self, other: Range) -> Range:
        return Range(self.low + other.low, self.high + other.high)

    def scale(self, factor: float) -> Range:
        return Range(self.low * factor, self.high * factor)


@dataclass(frozen=True)
class MethodEstimate:
    """One method's runs and what they will take: calls, input and output tokens, USD (low and high)."""

    method: str
    runs: int
    calls: Range
    tokens_in: Range
    tokens_out: Range
    cost: Range


def seed_tokens(profile: str = "tabletop") -> float:
    """The mean size of a seed example of ``profile``, in tokens."""
    sizes = [estimate_tokens(p.read_text()) for p in sorted((share_dir() / "memory_store" / profile).glob("*.txt"))]
    return sum(sizes) / len(sizes) if sizes else 0.0


def estimate(config: SweepConfig, tasks: dict[str, type], prices: Mapping[str, Price | None],
             roles: Mapping[str, str]) -> list[MethodEstimate]:
    """Each method's range over all its scheduled runs (every trial's); ``roles`` the model of each role, ``prices``
    each model's price (None: unknown, 0)."""
    api = RobotApi.load("tabletop").without(UNBOUND)
    base = estimate_tokens(PromptBuilder.for_profile(api).base())
    cap_base = estimate_tokens(CapPrompt(api).static)  # dynamic-cap, helper: the seeds come by retrieval
    cap_seeded = estimate_tokens(CapPrompt(api, seed_programs()).static)  # cap: every seed in its prompt
    example = seed_tokens()
    runs = schedule(config, tasks)
    attempts = Range(1, 1 + config.person.max_corrections)
    out = []
    for name in config.methods:
        method = METHODS[name]
        count = sum(1 for r in runs if r.method == name)
        if method.kind == "console":
            statements = Range(STATEMENTS[0] * attempts.low, STATEMENTS[1] * attempts.high)
            prompt = base + method.k * example
        else:  # a baseline writes one program per attempt (helper: up to 2 reflections more)
            statements = Range(attempts.low, attempts.high * (3 if method.kind == "helper" else 1))
            prompt = cap_seeded if method.kind == "cap" else cap_base + method.k * example
        per_call = Range(prompt + STATEMENT_TOKENS * statements.low / 2, prompt + STATEMENT_TOKENS * statements.high / 2)
        parts = {"interaction": (statements, Range(per_call.low * statements.low, per_call.high * statements.high))}
        if method.learning == "improve" and method.kind == "console":  # store_raw stores the interaction, no LLM
            lessons = Range(0, config.person.max_corrections * config.person.remember_share)
            parts["improvement"] = (lessons.scale(LEARNING_CALLS), lessons.scale(LEARNING_CALLS * LEARNING_PROMPT_TOKENS))
        if config.person.kind == "llm":
            parts["person"] = (attempts, attempts.scale(PERSON_PROMPT_TOKENS))
        calls = tokens_in = tokens_out = cost = Range(0, 0)
        for role, (n, tokens) in parts.items():
            price = prices.get(roles.get(role, roles.get("interaction", "")))
            output = n.scale(OUTPUT_TOKENS[role])
            calls, tokens_in, tokens_out = calls + n, tokens_in + tokens, tokens_out + output
            if price is not None:
                cost = cost + Range((tokens.low * price.input + output.low * price.output) / PER_TOKENS,
                                    (tokens.high * price.input + output.high * price.output) / PER_TOKENS)
        out.append(MethodEstimate(name, count, calls.scale(count), tokens_in.scale(count), tokens_out.scale(count),
                                  cost.scale(count)))
    return out


def render(estimates: list[MethodEstimate], roles: Mapping[str, str], prices: Mapping[str, Price | None]) -> str:
    """The estimate as a table with its totals and its assumptions."""
    def span(r: Range, money: bool = False) -> str:
        if money:
            return f"${r.low:,.2f}–${r.high:,.2f}"
        return f"{_short(r.low)}–{_short(r.high)}"

    lines = [f"{'method':20} {'runs':>5}  {'LLM calls':>14}  {'input tokens':>16}  {'output tokens':>14}  cost",]
    total = MethodEstimate("total", 0, Range(0, 0), Range(0, 0), Range(0, 0), Range(0, 0))
    for e in estimates:
        lines.append(f"{e.method:20} {e.runs:5d}  {span(e.calls):>14}  {span(e.tokens_in):>16}  {span(e.tokens_out):>14}  "
                     f"{span(e.cost, True)}")
        total = MethodEstimate("total", total.runs + e.runs, total.calls + e.calls, total.tokens_in + e.tokens_in,
                               total.tokens_out + e.tokens_out, total.cost + e.cost)
    lines.append(f"{'total':20} {total.runs:5d}  {span(total.calls):>14}  {span(total.tokens_in):>16}  "
                 f"{span(total.tokens_out):>14}  {span(total.cost, True)}")
    unknown = sorted({model for model in roles.values() if prices.get(model) is None})
    lines += ["", "models: " + ", ".join(f"{role} {model}" for role, model in roles.items()),
              *([f"no price in config/prices.yaml for {', '.join(unknown)}: counted as 0"] if unknown else []),
              f"assumed: {STATEMENTS[0]}–{STATEMENTS[1]} statements an attempt, from the first attempt only to every "
              "correction used; the improvement chain's "
              f"{LEARNING_CALLS} calls for every correction that asks to remember, at most; every prompt token at the full "
              "input price (a prefix cache lowers it). Nothing was sent to any endpoint."]
    return "\n".join(lines)


def _short(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:.0f}"

