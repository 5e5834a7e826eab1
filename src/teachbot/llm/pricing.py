"""What LLM calls cost in tokens, time and money: the price table of config/prices.yaml and a usage meter.

``PriceTable.load().cost(completion)`` prices one ``Completion`` (cached prompt tokens at the cached
rate); ``UsageMeter`` sums calls per role for a summary line at the end of an episode:

    episode: 7 LLM calls, 41.2k input tokens (30.1k cached), 312 output, 9.8 s, $0.0061 (interaction 6 calls $0.0040, ...)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.paths import config_path

if TYPE_CHECKING:  # base.py prices each completion for its trace span with this table: no import cycle at run time
    from teachbot.llm.base import Completion

PER_TOKENS = 1_000_000
"""Prices are per million tokens."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    cached_input: float
    output: float


def _normalise(model: str) -> str:
    name = model.strip().lower()
    return name.removeprefix("openai/")


class PriceTable:
    """Model prices matched by the longest key that starts the model's name; ``free`` prefixes cost 0."""

    def __init__(self, prices: dict[str, Price] | None = None, free: tuple[str, ...] = ()) -> None:
        self.prices = {_normalise(k): v for k, v in (prices or {}).items()}
        self.free = tuple(_normalise(f) for f in free)

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """The table of config/prices.yaml (or ``path``); malformed entries are ConfigErrors naming them."""
        source = Path(path) if path is not None else config_path("prices.yaml")
        raw = load_yaml(source)
        section = raw.get("prices", raw)
        models = section.get("models") or {} if isinstance(section, dict) else None
        free = section.get("free") or [] if isinstance(section, dict) else None
        if not isinstance(models, dict) or not isinstance(free, list):
            raise ConfigError(f"{source}: 'prices.models' must be a mapping and 'prices.free' a list")
        prices: dict[str, Price] = {}
        fields = {"input", "cached_input", "output"}
        for name, entry in models.items():
            if not isinstance(entry, dict) or not {"input", "output"} <= entry.keys() or not entry.keys() <= fields:
                raise ConfigError(f"{source}: 'prices.models.{name}' must be {{input, output[, cached_input]}} in USD per million tokens")
            values = {k: entry.get(k, entry["input"]) for k in ("input", "cached_input", "output")}
            if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values.values()):
                raise ConfigError(f"{source}: 'prices.models.{name}' prices must be numbers >= 0, got {entry!r}")
            prices[str(name)] = Price(**{k: float(v) for k, v in values.items()})
        return cls(prices, tuple(str(f) for f in free))

    def price(self, model: str) -> Price | None:
        """The price of ``model``: a free name costs 0, else the longest matching key; None when unknown."""
        name = _normalise(model)
        if any(name.startswith(f) for f in self.free if f):
            return Price(0.0, 0.0, 0.0)
        keys = [k for k in self.prices if name.startswith(k)]
        return self.prices[max(keys, key=len)] if keys else None

    def known(self, model: str) -> bool:
        """Whether ``model`` has a price (or is free)."""
        return self.price(model) is not None

    def cost(self, completion: Completion, *, local: bool = False) -> float:
        """USD of one completion; 0.0 for a local call or an unknown model (check ``known``)."""
        price = None if local else self.price(completion.model)
        if price is None:
            return 0.0
        cached = min(max(completion.cached_tokens, 0), completion.prompt_tokens)
        fresh = completion.prompt_tokens - cached
        return (fresh * price.input + cached * price.cached_input + completion.completion_tokens * price.output) / PER_TOKENS


@dataclass
class _Tally:
    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost: float = 0.0
    unknown: set[str] = field(default_factory=set)  # models without a price: their cost is missing from ``cost``

    def add(self, other: _Tally) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.output_tokens += other.output_tokens
        self.seconds += other.seconds
        self.cost += other.cost
        self.unknown |= other.unknown

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "cached_input_tokens": self.cached_input_tokens,
                "output_tokens": self.output_tokens, "seconds": round(self.seconds, 6), "cost": self.cost,
                "cost_known": not self.unknown, "unknown_models": sorted(self.unknown)}


def _count(n: int) -> str:
    """41234 -> '41.2k', 312 -> '312'."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def _money(tally: _Tally, *, name_unknown: bool) -> str:
    if not tally.unknown:
        return f"${tally.cost:.4f}" if tally.cost < 1 else f"${tally.cost:.2f}"
    unknown = f"cost unknown for {', '.join(sorted(tally.unknown))}" if name_unknown else "cost unknown"
    return f"${tally.cost:.4f} + {unknown}" if tally.cost else unknown


class UsageMeter:
    """Calls, tokens, seconds and USD per role, summed as completions arrive; thread-safe."""

    def __init__(self, prices: PriceTable | None = None) -> None:
        self.prices = prices if prices is not None else PriceTable.load()
        self._roles: dict[str, _Tally] = {}
        self._lock = threading.Lock()

    def add(self, role: str, completion: Completion, *, local: bool = False) -> float:
        """Count one completion for ``role``; ``local``: it came from a loopback/private server (free). Returns its cost."""
        known = local or self.prices.known(completion.model)
        cost = self.prices.cost(completion, local=local)
        with self._lock:
            tally = self._roles.setdefault(role, _Tally())
            tally.calls += 1
            tally.input_tokens += completion.prompt_tokens
            tally.cached_input_tokens += min(max(completion.cached_tokens, 0), completion.prompt_tokens)
            tally.output_tokens += completion.completion_tokens
            tally.seconds += completion.latency
            tally.cost += cost
            if not known:
                tally.unknown.add(completion.model)
        return cost

    def _snapshot(self) -> tuple[dict[str, _Tally], _Tally]:
        with self._lock:
            roles = {r: _Tally(t.calls, t.input_tokens, t.cached_input_tokens, t.output_tokens, t.seconds, t.cost, set(t.unknown))
                     for r, t in self._roles.items()}
        total = _Tally()
        for tally in roles.values():
            total.add(tally)
        return roles, total

    def totals(self) -> dict[str, dict[str, Any]]:
        """``{role: {...}, ..., "total": {...}}`` with calls, input/cached/output tokens, seconds, cost and unknown models."""
        roles, total = self._snapshot()
        return {**{r: t.as_dict() for r, t in roles.items()}, "total": total.as_dict()}

    def summary_line(self, label: str = "episode") -> str:
        """One line for the console or the log, e.g. ``episode: 7 LLM calls, 41.2k input tokens (30.1k cached), ...``."""
        roles, total = self._snapshot()
        cached = f" ({_count(total.cached_input_tokens)} cached)" if total.cached_input_tokens else ""
        line = (f"{label}: {total.calls} LLM call{'s' if total.calls != 1 else ''}, {_count(total.input_tokens)} input tokens{cached}, "
                f"{_count(total.output_tokens)} output, {total.seconds:.1f} s, {_money(total, name_unknown=True)}")
        if len(roles) > 1:
            parts = [f"{r} {t.calls} call{'s' if t.calls != 1 else ''} {_money(t, name_unknown=False)}" for r, t in roles.items()]
            line += f" ({', '.join(parts)})"
        return line

    def reset(self) -> None:
        """Start counting from zero (a new episode)."""
        with self._lock:
            self._roles.clear()
