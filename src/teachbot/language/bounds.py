"""Size limits on what console code can make the parent process (the interaction manager) hold or pass on.

LLM-written code runs in the sandbox worker; the robot API runs in the parent. Each robot API call's
arguments are measured here before the function runs, so an oversized call is one error line in the
console (``ArgumentTooLarge``, naming the limit and its config key), never growth of the parent. The
limits are the ``bounds`` block of config/interaction.yaml; the sandbox's own ceilings (a 4 MiB frame from
the worker, 8 MiB per result, 32 levels of nesting) sit far above them and only stop a hostile worker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from teachbot.config import dataclass_block
from teachbot.errors import ArgumentTooLarge, ConfigError

_CONTAINERS = (list, tuple, set, frozenset, dict)
_TEXT = (str, bytes, bytearray)
SPOKEN = ("say", "ask")  # robot functions whose text is held to max_say_chars


def where(key: str) -> str:
    """How an error message names a limit's config key."""
    return f"bounds.{key} in config/interaction.yaml"


def too_long_to_say(what: str, limit: int, length: int) -> ArgumentTooLarge:
    """The error of a say()/ask() sentence over ``max_say_chars`` (the dialog and the argument check raise the same)."""
    return ArgumentTooLarge(f"{what}() takes at most {limit} characters ({where('max_say_chars')}), got {length}; "
                            "say it in fewer words")


@dataclass(frozen=True)
class Bounds:
    """The ``bounds`` block of config/interaction.yaml; every limit is a positive count."""

    max_say_chars: int = 2000  # one say()/ask() sentence (what dialog/robot publishes)
    max_said_kept: int = 50  # sentences the dialog keeps (DialogChannel.said)
    max_transcript_chars: int = 60_000  # one episode's transcript (old console outputs are elided first)
    max_argument_chars: int = 4000  # text in one robot call's arguments, all strings and dict keys together
    max_argument_items: int = 1000  # items in one robot call's arguments, nested lists/tuples/sets/dicts counted
    max_argument_depth: int = 8  # levels of nesting in one argument
    max_heard_chars: int = 4000  # one utterance of the person (dialog/user); a longer one is refused, said why
    max_heard_waiting: int = 20  # the person's utterances not yet read by the console; more are refused, said why

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where(f.name)} must be a positive whole number, got {value!r}")

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> Bounds:
        """The limits from the ``bounds`` block (missing keys keep their defaults; unknown keys are an error)."""
        raw = dataclass_block(raw or {}, cls, "interaction", "bounds")
        try:
            return cls(**{k: int(v) for k, v in raw.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"interaction config: 'bounds' holds a value that is not a whole number: {exc}") from None

    def check_call(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Raise ArgumentTooLarge when the arguments of ``name(*args, **kwargs)`` exceed a limit.

        The walk stops at the first limit crossed, so measuring a huge argument costs no more than the limit."""
        if name in SPOKEN:
            text = args[0] if args else next(iter(kwargs.values()), "")
            if isinstance(text, str) and len(text) > self.max_say_chars:
                raise too_long_to_say(name, self.max_say_chars, len(text))
        chars = sum(len(k) for k in kwargs)
        items = len(args) + len(kwargs)
        if items > self.max_argument_items:
            raise ArgumentTooLarge(
                f"{name}(): {items} arguments are too many: a robot call takes at most {self.max_argument_items} "
                f"({where('max_argument_items')}); pass less data per call")
        labelled = [*((f"argument {i + 1}", a) for i, a in enumerate(args)), *((f"argument {k!r}", v) for k, v in kwargs.items())]
        for label, value in labelled:
            stack: list[tuple[Any, int]] = [(value, 0)]
            while stack:
                item, depth = stack.pop()
                kind = type(item)
                if kind in _TEXT:
                    chars += len(item)
                    if chars > self.max_argument_chars:
                        size = f" ({len(value)} characters)" if type(value) in _TEXT else ""
                        raise ArgumentTooLarge(
                            f"{name}(): {label}{size} is too long: a robot call takes at most {self.max_argument_chars} "
                            f"characters of text in its arguments ({where('max_argument_chars')}); pass shorter strings")
                elif kind in _CONTAINERS:
                    if depth >= self.max_argument_depth:
                        raise ArgumentTooLarge(
                            f"{name}(): {label} is nested too deeply: a robot call takes at most {self.max_argument_depth} "
                            f"levels of lists, tuples, sets and dicts ({where('max_argument_depth')}); pass flatter data")
                    items += len(item)
                    if items > self.max_argument_items:
                        raise ArgumentTooLarge(
                            f"{name}(): {label} is too large: a robot call takes at most {self.max_argument_items} items "
                            f"in its arguments, nested ones counted ({where('max_argument_items')}); pass less data per call")
                    children = [x for pair in item.items() for x in pair] if kind is dict else item
                    stack.extend((child, depth + 1) for child in children)

    def guard(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its arguments checked against these limits before it runs."""

        @functools.wraps(fn)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self.check_call(name, args, kwargs)
            return fn(*args, **kwargs)

        return bounded
