"""The robot's console with its LLM endpoint failing (issue 15, fault injection): the real OpenAI client
as config/llm.yaml configures each role (streaming for the interaction role), the interaction core as the
interaction manager runs it, and the fake OpenAI server on loopback playing the faults.

What the robot must do under each fault: retry exactly as far as config/llm.yaml's ``retries`` allows
(counted at the server) and no further, backing off as the config says; then say ONE sentence to the
person naming the problem and what to do; then wait for the person (no request while nobody speaks, and
the same bound again each time the person asks); and work again on the first request after the endpoint
recovered. test/test_llm_openai.py proves the client's retry rules one call at a time; this file proves
the robot's behaviour around them."""

from __future__ import annotations

import copy
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from timing import deadline, pytest_timeout, timeout

pytest.importorskip("openai")

from fake_openai_server import FakeOpenAIServer, pieces  # noqa: E402

from teachbot.config import load_yaml, resolve_config  # noqa: E402
from teachbot.interaction import CoreConfig, InteractionCore  # noqa: E402
from teachbot.language.dialog import DialogChannel  # noqa: E402
from teachbot.language.registry import RobotApi  # noqa: E402
from teachbot.llm import load_llm_config, model_from_config, role_settings  # noqa: E402
from teachbot.llm.capabilities import REGISTRY  # noqa: E402
from teachbot.llm.openai_model import OpenAIModel  # noqa: E402

pytestmark = pytest.mark.timeout(pytest_timeout(120))

CONFIG = load_llm_config()  # the shipped config/llm.yaml: its retry settings are the bound asserted here
INTERACTION = load_yaml(resolve_config("interaction"))["interaction"]  # the session rules, bounds, approval
SETTINGS = role_settings(CONFIG, "interaction")
ATTEMPTS = SETTINGS["retries"] + 1  # the first try and every retry
REQUEST = "put the red block in the blue bowl"
MOVE = "put_first_on_second('red block', 'blue bowl')"
UNREACHABLE = "I cannot reach my language model, so I stopped: LLM endpoint "
REFUSED = "My language model's server refused my request, so I stopped: LLM endpoint "
GARBLED = "My language model's server answered something I cannot read, so I stopped: LLM endpoint "
WAITING = "My language model has not answered in "


@dataclass
class Console:
    """The robot's console on its own thread, talking to ``server``; what it said and did is recorded."""

    server: FakeOpenAIServer
    core: InteractionCore
    dialog: DialogChannel
    said: list[str]
    moves: list[tuple[str, str]]
    sleeps: list[float]  # backoff waits the models asked for (recorded, not slept)

    models: tuple[OpenAIModel, ...]  # the interaction and the function generation role

    def ask(self, words: str, requests: int, *, said: int = 1, moves: int = 0, quiet: float = 0.2) -> None:
        """The person speaks; the episode must end having cost exactly ``requests`` requests at the server
        (counted once all of them arrived and were answered) and no more while nobody speaks (``quiet`` s),
        with exactly ``said`` sentences and ``moves`` motions of the robot."""
        said_before, moves_before, before, episodes = len(self.said), len(self.moves), len(self.server.requests), self.core.episodes
        self.dialog.put_user(words)
        wait_until(lambda: self.core.episodes > episodes, "the episode to end")
        # a request the client gave up on may reach the server late on a loaded machine: wait for it too
        wait_until(lambda: len(self.server.requests) - before >= requests, f"{requests} requests", timeout=10.0)
        wait_until(lambda: not self.server.in_flight, "the server's answers")  # e.g. a delayed one, written to nobody
        time.sleep(quiet)
        wait_until(lambda: not self.server.in_flight, "the server's answers")
        assert len(self.server.requests) - before == requests, self.server.paths[before:]
        assert self.core.episodes == episodes + 1 and len(self.said) == said_before + said, self.said[said_before:]
        assert len(self.moves) == moves_before + moves, self.moves[moves_before:]

    def client_timeout(self, seconds: float) -> None:
        """Each request of both roles waits at most ``seconds`` (config/llm.yaml's timeout is a minute)."""
        for model in self.models:
            model.timeout = seconds

    def endpoint_back(self) -> None:
        """The endpoint answers again, as fast as a healthy one: the client waits its configured timeout again."""
        self.server.default = "ok"
        self.client_timeout(SETTINGS["timeout"])

    def transcript(self) -> list[str]:
        session = self.core.session
        return session.transcript.render().splitlines() if session else []


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def fresh_capabilities() -> Iterator[None]:
    REGISTRY.clear()
    yield
    REGISTRY.clear()


@contextmanager
def robot_console(**config: Any) -> Iterator[Console]:
    """A console as the interaction manager builds it, with config/llm.yaml's roles pointed at a fake server
    (``config``: CoreConfig fields other than config/interaction.yaml's)."""
    with FakeOpenAIServer(answer="wait_for_trigger()\n") as server:
        raw = copy.deepcopy(CONFIG)
        raw["llm"]["defaults"]["base_url"] = server.base_url
        interaction, functions = model_from_config(raw, "interaction"), model_from_config(raw, "function_generation")
        said: list[str] = []
        moves: list[tuple[str, str]] = []
        sleeps: list[float] = []
        for model in (interaction, functions):  # the backoff waits recorded, not slept (seconds each)
            model._sleep = sleeps.append
            model._rng = random.Random(0)
        dialog = DialogChannel(said.append, timeout=0.2)
        robot = {
            "wait_for_trigger": dialog.wait_for_trigger, "ask": dialog.ask, "say": dialog.say,
            "get_obj_names": lambda: ["blue bowl", "red block"], "get_obj_pos": lambda name: [0.0, -0.5],
            "denormalize_xy": lambda xy: xy,
            "put_first_on_second": lambda a, b: moves.append((a, b)) or "success",
        }
        core = InteractionCore(RobotApi.load("tabletop"), robot, dialog, interaction, function_model=functions,
                               config=replace(CoreConfig.from_config(INTERACTION), **config),
                               scene_objects=lambda: ["blue bowl", "red block"])
        console = Console(server, core, dialog, said, moves, sleeps, (interaction, functions))
        thread = threading.Thread(target=console.core.run, daemon=True)
        thread.start()
        try:
            yield console
        finally:
            console.core.close()
            thread.join(timeout=10)
            console.core.shutdown()


def recovers(console: Console) -> None:
    """The endpoint is back: the person's next request is served and the robot acts, saying nothing more."""
    console.endpoint_back()
    console.server.answers.extend([f"{MOVE}\n>>> ", "wait_for_trigger()\n>>> "])
    console.ask(REQUEST, 2, said=0, moves=1)  # the move, then the model's own wait (nobody answers it)
    assert console.moves[-1] == ("red block", "blue bowl")


def expected_backoff(failure: int, retry_after: float | None = None) -> tuple[float, float]:
    """The (low, high) wait before retry ``failure`` by config/llm.yaml: base doubling, equal jitter, Retry-After, capped."""
    delay = min(SETTINGS["backoff_max"], SETTINGS["backoff_base"] * 2 ** (failure - 1))
    low, high = delay / 2, delay
    if retry_after is not None:
        low, high = max(low, retry_after), max(high, retry_after)
    return min(low, SETTINGS["backoff_max"]), min(high, SETTINGS["backoff_max"])


def test_a_burst_of_5xx_and_429_is_retried_to_the_configured_bound_then_said_once():
    assert ATTEMPTS >= 3, "config/llm.yaml retries: the burst below needs at least two retries"
    burst = ["503;retry-after=7", "500", "429;retry-after=45", "502", "503", "500", "429"][:ATTEMPTS]
    with robot_console() as console:
        console.server.script(*burst)
        console.server.default = "503"  # and it stays down
        console.ask(REQUEST, ATTEMPTS)
        assert console.said[0].startswith(UNREACHABLE)
        assert f"still failing after {ATTEMPTS} attempts (last: HTTP {burst[-1][:3]})" in console.said[0]
        assert "check that the server is up" in console.said[0] and "Tell me again what to do" in console.said[0]
        hints = [float(b.split("=")[1]) if "=" in b else None for b in burst[:-1]]
        assert len(console.sleeps) == ATTEMPTS - 1
        for n, (slept, hint) in enumerate(zip(console.sleeps, hints), start=1):
            low, high = expected_backoff(n, hint)
            assert low <= slept <= high, (n, slept, hint)
        assert console.sleeps[2] == SETTINGS["backoff_max"]  # a Retry-After over backoff_max waits backoff_max
        assert console.moves == [] and console.transcript() == [">>> wait_for_trigger()"]  # waiting for the person
        # still down: each request of the person costs the same bound and one sentence, never more
        for _ in range(2):
            console.ask("try again please", ATTEMPTS)
        assert all(s.startswith(UNREACHABLE) for s in console.said) and len(console.said) == 3
        recovers(console)


CUT_STATEMENT = f"{MOVE} if 'green block' in get_obj_names() else say('I see no green block.')\n"
CUT_AT = 1 + next(i + 1 for i, text in enumerate(itertools.accumulate(pieces(CUT_STATEMENT))) if text == MOVE)


def test_timeouts_and_cut_streams_are_retried_to_the_bound_and_never_run_half_a_statement():
    faults = [("stream_cut:1", "after 0 chunks"),  # the connection drops before any text
              (f"stream_cut:{CUT_AT}", f"after {CUT_AT - 1} chunks"),  # ... halfway through a statement
              ("delay:0.6", "timed out after 0.25 s")]  # the server answers after the client gave up
    with robot_console() as console:
        console.server.answer = CUT_STATEMENT  # cut after MOVE, it would move the block the whole statement leaves
        for n, (fault, last) in enumerate(faults):
            console.server.default = fault
            if fault.startswith("delay"):
                console.client_timeout(0.25)
            console.ask(REQUEST, ATTEMPTS)
            assert console.said[n].startswith(UNREACHABLE), (fault, console.said[n])
            assert f"still failing after {ATTEMPTS} attempts (last: " in console.said[n] and last in console.said[n], fault
            assert console.moves == [] and console.transcript() == [">>> wait_for_trigger()"], fault  # no half statement ran
        console.endpoint_back()  # the whole statement runs: it says rather than moves
        console.server.answers.extend([CUT_STATEMENT, "wait_for_trigger()\n"])
        console.ask(REQUEST, 2)
        assert console.said[-1] == "I see no green block." and console.moves == []


def test_requests_the_endpoint_refuses_or_garbles_are_not_retried():
    faults = [("400", REFUSED, "HTTP 400 (This model's maximum context length"),  # the same request fails again
              ("401", REFUSED, "HTTP 401 (fake 401); check the API key"),
              ("malformed", GARBLED, "answered a streamed request with application/json, not an event stream; "
                                     "check that it speaks the OpenAI API"),
              ("malformed_stream", GARBLED, "streamed malformed JSON (JSONDecodeError); check that it speaks the OpenAI API")]
    with robot_console() as console:
        for fault, sentence, hint in faults:  # the endpoint answered: the robot does not say it cannot reach it
            console.server.default = fault
            console.ask(REQUEST, 1)  # no retry: the same request would fail the same way
            assert console.said[-1].startswith(sentence) and hint in console.said[-1], (fault, console.said[-1])
            console.ask("try again please", 1)  # the person asks again: one request again, one sentence again
            assert console.said[-1] == console.said[-2], fault
        assert console.sleeps == [] and console.moves == []
        recovers(console)


def test_a_burst_while_writing_a_missing_function_is_bounded_too():
    """The function generation role (not streamed) under the same burst: its own bound, one sentence."""
    assert role_settings(CONFIG, "function_generation")["retries"] + 1 == ATTEMPTS
    with robot_console() as console:
        console.server.answers.append("tidy_up()\n")  # an undefined function: the console asks for its definition
        console.server.script("ok", *["503"] * ATTEMPTS)
        console.ask(REQUEST, 1 + ATTEMPTS)
        assert console.server.paths[0] == console.server.paths[-1] == "/v1/chat/completions"
        assert "max_tokens" in console.server.requests[-1] and "stream" not in console.server.requests[-1]
        assert console.said[0].startswith(UNREACHABLE) and f"still failing after {ATTEMPTS} attempts" in console.said[0]
        assert console.moves == [] and len(console.sleeps) == ATTEMPTS - 1
        recovers(console)


def test_a_hung_endpoint_is_not_silent_the_robot_says_once_that_it_waits():
    """An endpoint that takes every request and never answers: without the notice the person hears nothing
    for timeout x attempts (5 minutes as shipped). The robot says once per call that it is waiting and how
    long it will wait at most, then the one failure sentence; a call answered in time says nothing."""
    with robot_console(llm_wait_notice=0.3) as console:
        console.server.default = "delay:30"  # far past every wait of the client: a hung server
        console.client_timeout(0.25)  # 5 attempts x 0.25 s (backoff recorded, not slept): one call of ~1.3 s
        console.ask(REQUEST, ATTEMPTS, said=2)
        waiting, failed = console.said[-2:]
        assert waiting.startswith(WAITING + "0.3 s; I keep waiting for up to 1.25 s in all"), waiting
        assert failed.startswith(UNREACHABLE) and f"still failing after {ATTEMPTS} attempts (last: timed out" in failed
        console.endpoint_back()
        console.server.first_token_delay = 0.6  # slow but answering: one notice, then the robot acts
        console.server.answers.extend([f"{MOVE}\n>>> ", "wait_for_trigger()\n>>> "])
        console.ask(REQUEST, 2, said=2, moves=1)
        assert all(s.startswith(WAITING) for s in console.said[-2:]), console.said[-2:]
        # in time: nothing said. An immediate answer can still take 0.3 s on a loaded machine (it did at load 19),
        # so the notice waits a scaled 3 s here, and the quiet period outlasts it: a timer left running would speak
        console.core.config = replace(console.core.config, llm_wait_notice=timeout(3.0))
        console.server.first_token_delay = 0.0
        console.server.answers.extend([f"{MOVE}\n>>> ", "wait_for_trigger()\n>>> "])
        console.ask(REQUEST, 2, said=0, moves=1, quiet=timeout(3.5))
