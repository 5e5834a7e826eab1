"""A spoken stop: the person's words that halt the robot while it moves. ROS-free.

The multi-task memory paper's interruption ("Stop that for now. First ...") must stop the arm, not only be
read at the console's next ``wait_for_trigger()``. The interaction manager tells :meth:`SpokenStop.heard`
each utterance and whether skill goals are in flight; words with a stop word (config/interaction.yaml
``spoken_stop_words``) while the robot moves make it cancel the goals in flight, each interrupted call
raising :meth:`SpokenStop.fault`, and every robot call after that is refused (:meth:`SpokenStop.check`)
until the console hears the person: its ``wait_for_trigger()`` or ``ask()`` returns (:meth:`SpokenStop.wrap`).
So a snippet that goes on after the interrupted call starts no new motion. The refusal says what the
offline benchmark's enforced interruption says (:data:`INTERRUPTED`). The emergency stop stays the way to
stop the robot whatever it does; this is the conversational one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from teachbot.console.emergency_stop import EmergencyStop
from teachbot.errors import CanceledError

INTERRUPTED = "the person is talking to you: stop and call wait_for_trigger() to hear them"
STOP_WORDS = ("stop", "halt", "pause", "freeze", "hold on", "wait")  # when config/interaction.yaml names none
LISTENING = ("wait_for_trigger", "ask")  # the console functions that hear the person


class SpokenStop:
    """Whether the person has interrupted the robot and the console has not heard them yet; thread-safe (the
    dialog topic's callback sets it, the console's thread reads and clears it)."""

    def __init__(self, words: Sequence[str] = STOP_WORDS) -> None:
        words = [w.strip().lower() for w in words if str(w).strip()]
        self.pattern = re.compile(r"\b(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in words) + r")\b", re.I)
        self._pending = threading.Event()

    @property
    def pending(self) -> bool:
        """True from a spoken stop until the console hears the person."""
        return self._pending.is_set()

    def is_stop(self, text: str) -> bool:
        """Whether ``text`` holds a stop word."""
        return bool(self.pattern.search(text or ""))

    def heard(self, text: str, moving: bool) -> bool:
        """The person said ``text``; True when it stops the robot (a stop word while ``moving``): the caller
        cancels the goals in flight with :meth:`fault` as the reason. Other words are only heard."""
        if moving and self.is_stop(text):
            self._pending.set()
            return True
        return False

    def fault(self, skill: str, outcome: str) -> CanceledError:
        """The error an interrupted skill call raises (the SkillClient's fault: the skill and how it ended)."""
        return CanceledError(f"{skill} was interrupted ({outcome}): {INTERRUPTED}")

    def check(self, skill: str) -> None:
        """Raise CanceledError before ``skill`` starts while the person's stop is unheard."""
        if self._pending.is_set():
            raise CanceledError(f"{skill} did not start: {INTERRUPTED}")

    def wrap(self, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``functions`` with ``wait_for_trigger`` and ``ask`` clearing the stop once they return: heard."""
        out = dict(functions)
        for name in LISTENING:
            if name in out:
                out[name] = self._listening(out[name])
        return out

    def _listening(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            reply = function(*args, **kwargs)
            self._pending.clear()
            return reply

        call.__name__ = getattr(function, "__name__", "listen")
        call.__doc__ = function.__doc__
        return call


class StoppableSkills:
    """A skill client (anything with ``call(name, timeout, **fields)``) with the configured per-call timeout,
    refusing every call while the emergency stop is engaged or a spoken stop is unheard."""

    def __init__(self, client: Any, timeout: float, stop: EmergencyStop, spoken: SpokenStop) -> None:
        self.client, self.timeout, self.stop, self.spoken = client, timeout, stop, spoken

    def call(self, name: str, timeout: float = 0.0, **fields: Any) -> Any:
        """The skill's result; EmergencyStopError or CanceledError before a goal is sent while a stop holds."""
        self.stop.check(name)
        self.spoken.check(name)
        return self.client.call(name, timeout=timeout or self.timeout, **fields)
