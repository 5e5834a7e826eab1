"""Native tool calling (the OpenAI tools API): OpenAIModel.chat_tools with the real ``openai`` client against
test/fake_openai_server.py (127.0.0.1, offline), ScriptedModel.chat_tools, and the RAIDER agent driving an
OpenAIModel through a whole check with native tool calls."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("openai")

from fake_openai_server import FakeOpenAIServer  # noqa: E402
from test_raider_agent import kitchen  # noqa: E402

from teachbot.llm import LLMError, ScriptedModel  # noqa: E402
from teachbot.llm.base import Completion, ToolCallRequest, ToolChatModel, prompt_digest  # noqa: E402
from teachbot.llm.capabilities import REGISTRY  # noqa: E402
from teachbot.llm.openai_model import OpenAIModel  # noqa: E402
from teachbot.llm.tool_calls import conversation_prompt, parse_reply, render_reply  # noqa: E402
from teachbot.raider.agent import RaiderAgent  # noqa: E402
from teachbot.raider.config import RaiderConfig  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_obj_state", "description": "The state of an object.",
    "parameters": {"type": "object", "properties": {"obj": {"type": "string"}}, "required": ["obj"]}}}]
# a second turn: the model already called a tool and got its answer
MESSAGES = [
    {"role": "system", "content": "You check actions before the robot does them."},
    {"role": "user", "content": "Action query: open(drawer)"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_obj_state", "arguments": '{"obj": "drawer"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "The drawer is closed."},
]
CALL = {"content": "Let me look at the cabinet too.",
        "tool_calls": [{"id": "call_2", "name": "get_obj_state", "arguments": {"obj": "cabinet"}}]}


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def fresh_capabilities():
    REGISTRY.clear()
    yield
    REGISTRY.clear()


def make(server: FakeOpenAIServer, mode: str = "chat", **kwargs) -> tuple[OpenAIModel, list[float]]:
    """A model on the fake server with fast, recorded backoff sleeps."""
    sleeps: list[float] = []
    options = {"retries": 2, "backoff_base": 0.01, "backoff_max": 0.05, "timeout": 5.0, **kwargs}
    model = OpenAIModel("fake-model", mode=mode, base_url=server.base_url, sleep=sleeps.append, rng=random.Random(0), **options)
    return model, sleeps


def test_a_tool_call_round_trip(server):
    server.answers.append(CALL)
    model, _ = make(server)
    assert isinstance(model, ToolChatModel)
    reply = model.chat_tools(MESSAGES, TOOLS)
    assert reply.text == "Let me look at the cabinet too."
    assert reply.tool_calls == (ToolCallRequest("call_2", "get_obj_state", '{"obj": "cabinet"}'),)
    # the request: the conversation and the tools as given, to the chat endpoint, no stop strings, not streamed
    assert server.paths == ["/v1/chat/completions"]
    sent = server.requests[0]
    assert sent["messages"] == MESSAGES and sent["tools"] == TOOLS
    assert "stop" not in sent and not sent.get("stream") and sent["max_tokens"] == 256
    c = reply.completion
    assert c.finish_reason == "tool_calls" and c.attempts == 1 and c.model == "fake-model" and c.latency > 0
    assert c.prompt_digest == prompt_digest(conversation_prompt(MESSAGES, TOOLS))
    assert parse_reply(c.text) == (reply.text, reply.tool_calls)  # the recording reads back as the reply
    assert "get_obj_state" in c.text and "cabinet" in c.text
    content_chars = sum(len(m["content"] or "") for m in MESSAGES)
    assert c.prompt_tokens == content_chars // 4 and c.completion_tokens > 0  # the server's usage


def test_a_reply_without_content_or_without_tool_calls(server):
    server.answers.extend([{"tool_calls": CALL["tool_calls"]}, "The drawer can be opened."])
    model, _ = make(server)
    only_calls = model.chat_tools(MESSAGES, TOOLS)
    assert only_calls.text == "" and len(only_calls.tool_calls) == 1  # content null
    text = model.chat_tools(MESSAGES, TOOLS)
    assert text.text == "The drawer can be opened." and text.tool_calls == ()
    assert text.completion.text == "The drawer can be opened."


def test_retries_learned_parameters_and_empty_answers(server):
    server.answers.extend([CALL, CALL, CALL])
    model, sleeps = make(server)
    server.script("429", "500", "ok")
    reply = model.chat_tools(MESSAGES, TOOLS)
    assert reply.tool_calls[0].id == "call_2" and reply.completion.attempts == 3 and len(sleeps) == 2
    server.script("400_max_tokens")  # the endpoint wants max_completion_tokens: learned, sent again
    reply = model.chat_tools(MESSAGES, TOOLS)
    assert reply.completion.attempts == 2 and server.requests[-1]["max_completion_tokens"] == 256
    assert "max_tokens" not in server.requests[-1] and server.requests[-1]["tools"] == TOOLS
    server.script("empty")  # neither text nor a tool call: asked again, warmer
    reply = model.chat_tools(MESSAGES, TOOLS)
    assert reply.tool_calls and [r["temperature"] for r in server.requests[-2:]] == [0.0, 0.1]


def test_failures_and_the_deadline_raise_llm_errors(server):
    model, _ = make(server, retries=1)
    server.script("429", "429")
    with pytest.raises(LLMError, match="still failing after 2 attempts"):
        model.chat_tools(MESSAGES, TOOLS)
    server.script("delay:2")
    with pytest.raises(LLMError, match="deadline passed"):
        model.chat_tools(MESSAGES, TOOLS, timeout=0.3)


def test_completions_mode_has_no_native_tool_calling(server):
    model, _ = make(server, "completions")
    with pytest.raises(LLMError, match="native tool calling needs mode: chat"):
        model.chat_tools(MESSAGES, TOOLS)
    assert server.requests == []


def test_listeners_and_history_get_the_completion(server):
    server.answers.append(CALL)
    seen: list[tuple[Completion, str]] = []
    model, _ = make(server, on_completion=lambda c, p: seen.append((c, p)))
    reply = model.chat_tools(MESSAGES, TOOLS)
    assert seen == [(reply.completion, conversation_prompt(MESSAGES, TOOLS))]
    assert list(model.history) == [reply.completion]
    assert prompt_digest(seen[0][1]) == reply.completion.prompt_digest


def test_a_recorded_conversation_replays_through_the_scripted_model(server):
    server.answers.append(CALL)
    model, _ = make(server)
    recorded = model.chat_tools(MESSAGES, TOOLS)
    c = recorded.completion
    replay = ScriptedModel(replay={c.prompt_digest: c.text}, native_tools=True)
    again = replay.chat_tools(MESSAGES, TOOLS)
    assert (again.text, again.tool_calls) == (recorded.text, recorded.tool_calls)
    assert again.completion.prompt_digest == c.prompt_digest and again.completion.text == c.text


def test_scripted_chat_tools_from_json_and_text():
    seen: list[tuple[Completion, str]] = []
    script = [
        json.dumps({"content": "Checking.", "tool_calls": [{"id": "a", "name": "get_obj_state", "arguments": {"obj": "drawer"}},
                                                          {"name": "robot_holding", "arguments": "{}"}]}),
        "The drawer can be opened.",
        '{"final_response": "none", "explanation": "fine"}',  # a JSON answer that is no tool-call reply: text
    ]
    model = ScriptedModel(script, native_tools=True, on_completion=lambda c, p: seen.append((c, p)))
    assert isinstance(model, ToolChatModel)
    first = model.chat_tools(MESSAGES, TOOLS)
    assert first.text == "Checking."
    assert first.tool_calls == (ToolCallRequest("a", "get_obj_state", '{"obj": "drawer"}'),
                                ToolCallRequest("call_2", "robot_holding", "{}"))
    assert first.completion.finish_reason == "tool_calls"
    second = model.chat_tools(MESSAGES, TOOLS)
    assert (second.text, second.tool_calls, second.completion.finish_reason) == ("The drawer can be opened.", (), "stop")
    third = model.chat_tools(MESSAGES[:2], [])
    assert third.text == script[2] and third.tool_calls == ()
    assert model.prompts == [conversation_prompt(MESSAGES, TOOLS)] * 2 + [conversation_prompt(MESSAGES[:2], [])]
    assert [c for c, _ in seen] == list(model.history) and seen[0][1] == model.prompts[0]
    assert render_reply(first.text, first.tool_calls) == first.completion.text
    with pytest.raises(LLMError, match="scripted model exhausted"):
        model.chat_tools(MESSAGES, TOOLS)
    with pytest.raises(LLMError, match="must be an object with a 'name'"):
        ScriptedModel(['{"tool_calls": [{"arguments": {}}]}'], native_tools=True).chat_tools(MESSAGES, TOOLS)


def test_scripted_chat_tools_with_respond_and_generate_unchanged():
    def respond(prompt: str) -> str:
        if not prompt.startswith("{"):  # a generate() prompt
            return " say('hi')\n>>> more"
        messages = json.loads(prompt)["messages"]
        if any(m["role"] == "tool" for m in messages):
            return "Done."
        return json.dumps({"tool_calls": [{"id": "x", "name": "get_obj_state", "arguments": {"obj": "drawer"}}]})

    model = ScriptedModel(respond=respond, native_tools=True)
    assert model.chat_tools(MESSAGES[:2], TOOLS).tool_calls[0].name == "get_obj_state"
    assert model.chat_tools(MESSAGES, TOOLS).text == "Done."
    assert model.generate("plain prompt\n>>> ").text == " say('hi')\n"  # generate as before, cut at the stop
    plain = ScriptedModel(["x"])  # without native_tools: a backend with no native tool calling
    assert not isinstance(plain, ToolChatModel) and plain.chat_tools is None


def test_the_raider_agent_checks_an_action_with_native_tool_calls_over_http(server):
    def agent_turn(body: dict) -> dict:
        """The model's side: ask what is on the plate, then judge from the tool's answer in the request."""
        answers = [m for m in body["messages"] if m["role"] == "tool"]
        if not answers:
            return {"content": "Is anything on top of the plate?", "tool_calls": [
                {"id": "c1", "name": "check_obj_relationship", "arguments": {"relationship": "on top of", "obj": "plate"}}]}
        verdict = {"final_response": "unfeasibility", "explanation": answers[0]["content"], "grounding": ["plate"]}
        return {"content": None, "tool_calls": [{"id": "c2", "name": "final_response", "arguments": verdict}]}

    server.respond = agent_turn
    model, _ = make(server)
    agent = RaiderAgent(model, kitchen(), "household", RaiderConfig(tool_calling="native"))
    result = agent.check("pick(plate)")
    assert result.stopped == "" and result.turns == 2 and not result.warnings, result.transcript
    answer = ('Call to tool check_obj_relationship with args {"relationship": "on top of", "obj": "plate"} returned '
              "banana is on top of plate.")
    assert result.final_response == "unfeasibility" and result.explanation == answer  # the paper's tool response
    assert result.grounding == ["plate"] and [(c.name, c.ok) for c in result.tool_calls] == [("check_obj_relationship", True)]
    first, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == [t["function"]["name"] for t in agent.tool_schemas()]
    assert first["messages"][0]["role"] == "system" and first["messages"][1]["role"] == "user"
    assert first["messages"][1]["content"].startswith("Action query: pick(plate)\nObjects in the scene: ")  # the paper's input
    assert second["messages"][2] == {"role": "assistant", "content": "Is anything on top of the plate?", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "check_obj_relationship", "arguments": '{"relationship": "on top of", "obj": "plate"}'}}]}
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": answer}
    assert [c.finish_reason for c in model.history] == ["tool_calls", "tool_calls"]
