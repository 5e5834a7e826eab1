"""LLM calls a closing console does not wait for (teachbot.llm.abandon; issue 31)."""

from __future__ import annotations

import contextvars
import threading

import pytest

from teachbot.llm.abandon import Abandon, AbandonableToolModel, ModelAbandoned, abandonable
from teachbot.llm.base import LLMError
from teachbot.llm.scripted import ScriptedModel

HANG = 120.0  # seconds: bounds a hang only


def test_answers_and_errors_pass_through_with_the_callers_context() -> None:
    """An answered call is the model's answer; its error is raised as is; it runs in the caller's context (the
    trace span of the statement that asked)."""
    seen = contextvars.ContextVar("seen", default="")
    seen.set("the caller's span")
    heard: list[str] = []

    def respond(prompt: str) -> str:
        heard.append(seen.get())
        if prompt == "fail":
            raise LLMError("the endpoint refused")
        return "say('hi')"

    model = abandonable(ScriptedModel(respond=respond), Abandon())
    assert model.generate("go").text == "say('hi')" and model.name == "scripted" and model.served == 1
    with pytest.raises(LLMError, match="the endpoint refused"):
        model.generate("fail")
    assert heard == ["the caller's span", "the caller's span"]
    assert isinstance(abandonable(ScriptedModel([], native_tools=True), Abandon()), AbandonableToolModel)
    assert not isinstance(model, AbandonableToolModel)


def test_abandon_ends_a_call_in_flight_and_every_later_one() -> None:
    """A call that blocks raises ModelAbandoned once abandoned, while the model still works on it; a later call
    is not made at all."""
    entered, release = threading.Event(), threading.Event()

    def blocking(_prompt: str) -> str:
        entered.set()
        release.wait(HANG)
        return "put_first_on_second('red block', 'blue bowl')"

    switch = Abandon()
    inner = ScriptedModel(respond=blocking)
    model = abandonable(inner, switch)
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            model.generate("put the red block in the blue bowl")
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    caller = threading.Thread(target=ask)
    caller.start()
    assert entered.wait(HANG)
    switch.abandon()
    caller.join(HANG)
    assert not caller.is_alive() and not release.is_set() and inner.served == 0  # ended while the model still works
    assert len(outcome) == 1 and isinstance(outcome[0], ModelAbandoned)
    assert "abandoned in flight, the console is closing" in str(outcome[0])
    release.set()
    with pytest.raises(ModelAbandoned, match="not called, the console is closing"):
        model.generate("again")
    assert len(inner.prompts) == 1 and switch.abandoned
