"""What the robot tells the person when its language model is slow or fails.

Two things a person standing by the robot needs: a failed call named for what it is (an endpoint that
answers HTTP 401 is reachable, and waiting for it will not help; one that never answers may come
back), and a word when a call is slow, instead of minutes of silence while the client waits its
timeout on every retry (60 s x 5 attempts with the shipped config/llm.yaml).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from teachbot.llm.base import MALFORMED, REFUSED, SETUP, UNREACHABLE, LLMError

_SENTENCES = {
    UNREACHABLE: "I cannot reach my language model, so I stopped: {exc}. Tell me again what to do once it is back.",
    REFUSED: "My language model's server refused my request, so I stopped: {exc}. Waiting will not help: someone "
             "has to fix the setting it names.",
    MALFORMED: "My language model's server answered something I cannot read, so I stopped: {exc}.",
    SETUP: "My language model is not set up, so I stopped: {exc}.",
}


def llm_failure_sentence(exc: LLMError) -> str:
    """The one sentence the robot says when ``exc`` ended its episode, by the failure's kind."""
    return _SENTENCES.get(getattr(exc, "kind", SETUP), _SENTENCES[SETUP]).format(exc=exc)


def longest_wait(model: Any) -> float | None:
    """Seconds one call of ``model`` may take at most (timeout x attempts), when the backend says so."""
    timeout, retries = getattr(model, "timeout", None), getattr(model, "retries", None)
    if isinstance(timeout, (int, float)) and isinstance(retries, int) and timeout > 0:
        return float(timeout) * (retries + 1)
    return None


class SlowModelNotice:
    """``model`` whose calls say one sentence when no answer came within ``after`` seconds.

    Everything but the calls (``name``, ``add_listener``, ``base_url``, ...) is the wrapped model's. The
    sentence is said from a timer thread while the call goes on; a call that answers in time says
    nothing, and ``after`` <= 0 never says anything.
    """

    def __init__(self, model: Any, after: float, say: Callable[[str], None]) -> None:
        self.model, self.after, self._say = model, after, say

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``generate`` with the notice."""
        return self._watched(self.model.generate, args, kwargs)

    def chat_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``chat_tools`` with the notice."""
        return self._watched(self.model.chat_tools, args, kwargs)

    def _watched(self, call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if self.after <= 0:
            return call(*args, **kwargs)
        timer = threading.Timer(self.after, self._notice)
        timer.daemon = True
        timer.start()
        try:
            return call(*args, **kwargs)
        finally:
            timer.cancel()

    def _notice(self) -> None:
        limit = longest_wait(self.model)
        until = f" for up to {limit:.3g} s in all" if limit is not None and limit > self.after else ""
        self._say(f"My language model has not answered in {self.after:.3g} s; I keep waiting{until} and will tell you "
                  "if it fails.")
