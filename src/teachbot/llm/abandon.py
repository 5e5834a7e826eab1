"""LLM calls that a closing console does not wait for.

A call to a language model can take minutes (a slow endpoint, retries) and most backends cannot be interrupted
from another thread. A console that is told to stop must not wait for it: :class:`AbandonableModel` runs each call
in a thread of its own (:func:`abandonable`) and waits for either its answer or :meth:`Abandon.abandon`, which makes every call in
flight (and every later one) raise :class:`ModelAbandoned` at once. The abandoned call runs on in its daemon thread
and its answer is dropped: nothing it says can start a statement. ROS-free.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from teachbot.llm.base import SETUP, LLMError, ToolChatModel


class ModelAbandoned(LLMError):
    """The console closed while this LLM call was in flight (or before it began): its answer is not waited for."""


class Abandon:
    """One switch for every :class:`AbandonableModel` of a console: :meth:`abandon` ends their calls in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[threading.Event] = set()
        self._abandoned = threading.Event()

    @property
    def abandoned(self) -> bool:
        """Whether :meth:`abandon` was called."""
        return self._abandoned.is_set()

    def abandon(self) -> None:
        """Make every call in flight and every later call raise ModelAbandoned (idempotent)."""
        with self._lock:
            self._abandoned.set()
            for event in self._waiting:
                event.set()

    def run(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Any:
        """``call(*args, **kwargs)`` in a daemon thread (with this thread's context: its trace span), waited for
        until it ends or :meth:`abandon` is called; its result or exception, or ModelAbandoned."""
        woken, outcome = threading.Event(), {}
        with self._lock:
            if self._abandoned.is_set():
                raise ModelAbandoned(f"{what}: not called, the console is closing", kind=SETUP)
            self._waiting.add(woken)
        context = contextvars.copy_context()

        def work() -> None:
            try:
                outcome["value"] = context.run(call, *args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller, raised there
                outcome["error"] = exc
            finally:
                woken.set()

        try:
            threading.Thread(target=work, daemon=True, name=f"llm-call {what}").start()
            woken.wait()
        finally:
            with self._lock:
                self._waiting.discard(woken)
        if "error" in outcome:
            raise outcome["error"]
        if "value" not in outcome:  # woken by abandon(): the call runs on, unheard
            raise ModelAbandoned(f"{what}: abandoned in flight, the console is closing", kind=SETUP)
        return outcome["value"]


class AbandonableModel:
    """``model`` whose ``generate`` calls end at once when ``switch`` is abandoned (:func:`abandonable` makes one).

    Everything else (``name``, ``add_listener``, ``local``, ...) is the wrapped model's."""

    def __init__(self, model: Any, switch: Abandon) -> None:
        self.model, self.switch = model, switch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``generate``, abandoned when the switch is."""
        return self.switch.run(self.model.generate, args, kwargs, f"{self._name()}.generate")

    def _name(self) -> str:
        return str(getattr(self.model, "name", type(self.model).__name__))


class AbandonableToolModel(AbandonableModel):
    """The same for a model with native tool calling (a ToolChatModel)."""

    def chat_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``chat_tools``, abandoned when the switch is."""
        return self.switch.run(self.model.chat_tools, args, kwargs, f"{self._name()}.chat_tools")


def abandonable(model: Any, switch: Abandon) -> AbandonableModel:
    """``model`` with its calls ended by ``switch``; native tool calling kept where it has it."""
    return AbandonableToolModel(model, switch) if isinstance(model, ToolChatModel) else AbandonableModel(model, switch)
