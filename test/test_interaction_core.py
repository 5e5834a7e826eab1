"""The interaction core without ROS: the console waits for the person, outages and errors are said once,
learning has a deadline, examples survive a missing memory service, the prompt is trimmed to the budget."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from timing import deadline, pytest_timeout

from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import SessionConfig
from teachbot.interaction import (
    CoreConfig,
    FallbackExamples,
    InteractionCore,
    LearnReply,
    LocalExamples,
    MemoryUnavailable,
)
from teachbot.language.budget import SHORTENED, PromptTooLong, TokenBudget
from teachbot.language.dialog import DialogChannel
from teachbot.language.prompts import CURRENT_HEADER, EXAMPLE_HEADER
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.llm.base import SYSTEM_END, UNREACHABLE, LLMError, split_system
from teachbot.llm.scripted import ScriptedModel

pytestmark = pytest.mark.timeout(pytest_timeout(120))


def wait_until(predicate, timeout=20.0, what="condition"):
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


class Robot:
    """The tabletop API's robot side, without a robot: enough for console episodes."""

    def __init__(self, dialog: DialogChannel) -> None:
        self.dialog = dialog
        self.moves: list[tuple[str, object]] = []

    def functions(self) -> dict:
        return {
            "wait_for_trigger": self.dialog.wait_for_trigger, "ask": self.dialog.ask, "say": self.dialog.say,
            "get_obj_names": lambda: ["blue bowl", "red block"],
            "get_obj_pos": lambda name: [0.0, -0.5], "denormalize_xy": lambda xy: xy,
            "put_first_on_second": lambda a, b: self.moves.append((a, b)) or "success",
        }


class Harness:
    """An InteractionCore on its own thread with a scripted model and a recording dialog."""

    def __init__(self, model, *, learner=None, dialog_timeout=0.2, examples=None, learn_deadline=120.0, **session) -> None:
        self.said: list[str] = []
        self.logs: list[str] = []
        self.dialog = DialogChannel(self.said.append, timeout=dialog_timeout)
        self.robot = Robot(self.dialog)
        self.model = model
        self.core = InteractionCore(
            RobotApi.load("tabletop"), self.robot.functions(), self.dialog, model, examples=examples,
            config=CoreConfig(session=SessionConfig(**session), learn_deadline=learn_deadline),
            learner=learner, scene_objects=lambda: ["blue bowl", "red block"], log=self.logs.append,
        )
        self.thread = threading.Thread(target=self.core.run, daemon=True)

    def __enter__(self) -> Harness:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.core.close()
        self.thread.join(timeout=10)
        self.core.shutdown()

    def lines(self) -> list[str]:
        session = self.core.session
        return session.transcript.render().splitlines() if session else []


def test_nobody_talking_means_no_llm_call():
    model = ScriptedModel(["say('Hello.')", "wait_for_trigger()"])
    with Harness(model, dialog_timeout=0.1) as h:
        time.sleep(1.5)  # the console's own wait_for_trigger() times out ~15 times and waits again
        assert model.served == 0
        assert h.lines() == [">>> wait_for_trigger()"]
        h.dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: model.served >= 2, what="the LLM calls after the person spoke")
        time.sleep(0.5)  # its wait_for_trigger() found nobody: the episode ended quietly, the console waits
        assert model.served == 2
    assert h.said == ["Hello."]


def test_an_llm_outage_is_said_once_and_the_console_waits_for_the_person():
    calls = []

    def down(prompt: str) -> str:
        calls.append(prompt)
        raise LLMError("LLM endpoint http://127.0.0.1:9/v1 still failing after 5 attempts (last: connection refused)",
                       kind=UNREACHABLE)

    model = ScriptedModel(respond=down)
    with Harness(model, dialog_timeout=0.1) as h:
        h.dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: len(h.said) == 1, what="the robot's message")
        time.sleep(1.5)
        assert len(calls) == 1 and len(h.said) == 1
        assert h.said[0].startswith("I cannot reach my language model, so I stopped: LLM endpoint")
        assert "Tell me again what to do" in h.said[0]
        assert h.lines() == [">>> wait_for_trigger()"]  # a new episode, waiting
        h.dialog.put_user("try again please")  # the person asks: one more call
        wait_until(lambda: len(calls) == 2, what="the second call")
        time.sleep(0.5)
        assert len(calls) == 2 and len(h.said) == 2
    assert any("ended: LLM unavailable" in line for line in h.logs)


def test_an_episode_given_up_on_errors_is_said_once_then_waits():
    model = ScriptedModel(respond=lambda prompt: "Let me think about which block to take first.")
    with Harness(model, max_consecutive_errors=3) as h:
        h.dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: h.said, what="the robot's message")
        time.sleep(1.0)
        assert model.served == 3
        assert h.said == ["I stopped: gave up after 3 SyntaxError errors in a row. Please tell me again what to do."]


def test_a_wait_the_model_wrote_that_nobody_answers_ends_the_episode_quietly():
    model = ScriptedModel(["put_first_on_second('red block', 'blue bowl')", "wait_for_trigger()"])
    with Harness(model, dialog_timeout=0.3) as h:
        h.dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: h.core.episodes >= 1, what="the first episode to end")
        time.sleep(1.0)
        assert model.served == 2 and h.said == []
    assert h.robot.moves == [("red block", "blue bowl")]


def test_several_statements_in_one_reply_run_first_only_or_all():
    reply = "```python\nput_first_on_second('red block', 'blue bowl')\nsay('Done.')\n```"
    for run_all, said in ((False, []), (True, ["Done."])):
        model = ScriptedModel([reply, "wait_for_trigger()"])
        with Harness(model, dialog_timeout=5.0, run_all_statements=run_all) as h:
            h.dialog.put_user("put the red block in the blue bowl")
            wait_until(lambda m=model: m.served >= 2, what="two replies")
        assert h.said == said
        assert model.history[0].text == reply  # what the reader dropped stays in the completion record


class SlowLearner:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.requests = seconds, []

    def improve(self, request, timeout):
        self.requests.append((request, timeout))
        if self.seconds > timeout:
            time.sleep(timeout)
            raise TimeoutError("improvement/improve did not answer")
        return LearnReply(True, "Take the green block when the person says 'the block'.")


def test_learning_gets_a_deadline_and_the_scene():
    learner = SlowLearner(0.0)
    model = ScriptedModel(["put_first_on_second('red block', 'blue bowl')", "wait_for_trigger()", "learn_from_interaction()",
                           "wait_for_trigger()"])
    with Harness(model, learner=learner, dialog_timeout=5.0, learn_deadline=30.0) as h:
        h.dialog.put_user("put the block in the blue bowl")
        h.dialog.put_user("No, the green one. Remember that next time.")
        wait_until(lambda: learner.requests, what="the learning call")
        wait_until(lambda: h.said, what="the robot's lesson")
        said = list(h.said)  # before the harness closes the console (which then says that it stopped)
    request, timeout = learner.requests[0]
    assert request.scene_objects == ("blue bowl", "red block")
    assert 20.0 < request.deadline - time.time() <= 30.0  # wall clock, 30 s after the call
    assert timeout == pytest.approx(31.0)  # the console waits a little past it; the learner stores nothing after it
    assert request.transcript.splitlines()[-1] == ">>> learn_from_interaction()"
    assert said == ["Got it. Next time: take the green block when the person says 'the block'."]


def test_a_learning_call_past_its_deadline_is_reported_as_cancelled():
    learner = SlowLearner(60.0)
    model = ScriptedModel(["learn_from_interaction()", "wait_for_trigger()"])
    with Harness(model, learner=learner, dialog_timeout=5.0, learn_deadline=0.5) as h:
        h.dialog.put_user("No, the green one. Remember that next time.")
        wait_until(lambda: model.served >= 2, what="the statement after the learning call")
        lines = h.lines()
    assert lines[2:4] == [">>> learn_from_interaction()",
                          "TimeoutError: learning took longer than 0.5 s and was cancelled; nothing was stored"]
    assert h.said == []


def test_examples_come_from_the_local_store_when_the_memory_service_is_down():
    class Memory:
        store = SimpleNamespace(learned_dir="/tmp/learned")

        def retrieve(self, newest_first, profile, k):
            lesson = SimpleNamespace(source="learned", scope="whenever the block is not named",
                                     improvement="Take the green block.", transcript=">>> wait_for_trigger()")
            return [SimpleNamespace(example=lesson)]

    up = {"value": False}

    def remote(profile, instructions, k):
        if not up["value"]:
            raise MemoryUnavailable("the memory service memory/retrieve is not running")
        return ["remote example"]

    logs: list[str] = []
    source = FallbackExamples(remote, LocalExamples(memory=Memory()), logs.append)
    for _ in range(3):
        found = source.examples("tabletop", ["put the block in the bowl"], 4)
        assert found == ["# learned lesson, applies whenever the block is not named: Take the green block.\n>>> wait_for_trigger()"]
    assert logs == ["the memory service memory/retrieve is not running; retrieving examples from the store in this "
                    "process instead (/tmp/learned)"]
    up["value"] = True
    assert source.examples("tabletop", ["x"], 4) == ["remote example"]
    assert len(logs) == 2 and "answers again" in logs[1]


class Examples:
    def __init__(self, texts):
        self.texts = texts

    def examples(self, profile, instructions, k):
        return list(self.texts)[-k:]


def test_an_over_long_prompt_is_trimmed_examples_first_then_old_outputs():
    api = RobotApi.load("tabletop")
    examples = [f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': 'example {i}'}}\n>>> say('{'x' * 400}')" for i in range(6)]
    transcript = Transcript()
    transcript.add_code("wait_for_trigger()")
    transcript.add_output("{'type': 'dialog', 'text': 'put every block in the bowl " + "please " * 30 + "'}")
    for i in range(4):
        transcript.add_code("get_obj_names()")
        transcript.add_output(repr([f"object number {i} {j}" for j in range(30)]))
    full = PromptBuilder.for_profile(api, Examples(examples), k=6).build(transcript)
    base_tokens = TokenBudget().estimate(PromptBuilder.for_profile(api).build(transcript))

    # room for everything but two examples: the two least similar (first in the prompt) go
    budget = TokenBudget(context_tokens=TokenBudget().estimate(full) - 150 + 256, reserve_tokens=256)
    builder = PromptBuilder.for_profile(api, Examples(examples), k=6, budget=budget)
    prompt = builder.build(transcript)
    assert builder.last_trim.dropped_examples == 2 and builder.last_trim.shortened_outputs == 0
    assert "example 0" not in prompt and "example 1" not in prompt and "example 5" in prompt
    assert budget.fits(prompt)

    # no room for any example, and old outputs must shrink too: oldest first, never the person's words or the newest
    budget = TokenBudget(context_tokens=base_tokens - 200 + 256, reserve_tokens=256)
    builder = PromptBuilder.for_profile(api, Examples(examples), k=6, budget=budget)
    prompt = builder.build(transcript)
    assert builder.last_trim.dropped_examples == 6 and builder.last_trim.shortened_outputs >= 1
    assert EXAMPLE_HEADER not in prompt and SHORTENED in prompt
    current = prompt.split(CURRENT_HEADER)[1]
    assert "please " * 30 in current  # the person's words stay whole
    assert repr([f"object number 3 {j}" for j in range(30)]) in current  # the newest output stays whole
    assert current.index(SHORTENED) < current.index("object number 3")
    system, _ = split_system(prompt)
    assert system == builder.base() and api.import_block() in system  # the API stays

    # nothing left to trim: a clear error that says what to do
    tiny = PromptBuilder.for_profile(api, Examples(examples), k=6, budget=TokenBudget(context_tokens=600, reserve_tokens=256))
    with pytest.raises(PromptTooLong, match="context_tokens in config/interaction.yaml"):
        tiny.build(transcript)


def test_the_static_part_is_a_byte_identical_prefix_across_steps():
    api = RobotApi.load("tabletop")
    builder = PromptBuilder.for_profile(api, Examples([">>> say('hi')"]), k=1)
    transcript = Transcript()
    transcript.add_code("wait_for_trigger()")
    transcript.add_output("{'type': 'dialog', 'text': 'hello'}")
    first = builder.build(transcript)
    transcript.add_code("say('hi')")
    second = builder.build(transcript)
    assert second.startswith(first)
    assert first.index(SYSTEM_END) < first.index(EXAMPLE_HEADER) < first.index(CURRENT_HEADER)


def test_the_budget_calibrates_from_the_servers_usage():
    budget = TokenBudget(context_tokens=1000, reserve_tokens=100)
    for _ in range(20):
        budget.calibrate(3000, 1000)  # this model's tokenizer: 3 characters a token
    assert budget.chars_per_token == pytest.approx(3.0, abs=0.01)
    assert not budget.fits("x" * 2800) and budget.fits("x" * 2600)
    budget.calibrate(10, 1000)  # implausible samples are ignored
    assert budget.chars_per_token == pytest.approx(3.0, abs=0.01)


def test_the_local_fallback_reads_the_learned_store_with_the_real_retrieval(tmp_path):
    """The memory service is down: the lesson learned in the store still reaches the prompt, shown with its scope."""
    from teachbot.memory.example import InteractionExample
    from teachbot.memory.store import MemoryStore

    lesson = (">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the block in the blue bowl'}\n"
              ">>> put_first_on_second('green block', 'blue bowl')\n'success'")
    MemoryStore(tmp_path / "learned").add(InteractionExample(
        profile="tabletop", source="learned", transcript=lesson, scope="whenever the person does not say which block",
        improvement="Take the green block."))

    def remote(profile, instructions, k):
        raise MemoryUnavailable("memory/retrieve did not answer within 10 s")

    logs: list[str] = []
    source = FallbackExamples(remote, LocalExamples(tmp_path / "learned"), logs.append)
    found = source.examples("tabletop", ["put the block in the blue bowl"], 4)
    assert found[-1] == ("# learned lesson, applies whenever the person does not say which block: Take the green block.\n"
                         + lesson)  # the most similar, last
    assert len(found) == 4  # and the seeds beside it
    assert logs == [f"memory/retrieve did not answer within 10 s; retrieving examples from the store in this process "
                    f"instead ({(tmp_path / 'learned').resolve()})"]
