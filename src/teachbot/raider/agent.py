"""The RAIDER agent: Ground, Ask&Answer, Issue, with a program flow manager (PFM) over each LLM turn.

Two profiles (config/raider.yaml ``profile``). ``paper``, the default, is the RAIDER paper's protocol: the
zero-shot Figure 4 prompt (task objective, procedure, tools, constraints with the arm's reach, tool-call
instructions), the object list in the first message, tools that return facts, ``call_tool{...}`` calls (several
per turn, run in order, arguments in order or by name) and the PFM's four warnings (teachbot.raider.pfm). The
``guided`` profile is a labelled ablation, teachbot's variant before issue 28: one ``Tool call: name(args)`` line
per turn, tools that judge, a checklist in the Ask step and, with ``examples``, a worked example; its warnings
are the same four in other words. A check ends with the final response, or without a verdict at the time
limit (the paper's 20 s) or, when ``max_turns`` is set (a deviation), at the turn limit. Two ways of calling
tools in either profile: ``text`` (any completion or chat model) and ``native`` (the OpenAI tools API, a
:class:`teachbot.llm.base.ToolChatModel`); native arguments are passed by name. Pure Python, no ROS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from teachbot.errors import ConfigError
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import SYSTEM_END, LLMError, Model, ToolChatModel
from teachbot.raider.config import RaiderConfig
from teachbot.raider.pfm import (
    TOOL_CALL,
    TOOL_RESPONSE,
    VERDICTS,
    W1,
    W1_FINAL,
    W2,
    W3,
    W4,
    W4_NOTHING,
    WARN_BAD_FINAL,
    WARN_FAILED_CALL,
    WARN_MADE_UP_TOOL,
    WARN_MISSING,
    WARNING,
    check_final,
    find_final,
    find_json,
    read_paper_turn,
    read_turn,
    response_line,
)
from teachbot.raider.tools import TOOL_DOCS, TOOL_PARAMETERS, Reach, ToolError, tool_docs


class Tools(Protocol):
    """What the agent asks the scene through: teachbot.raider.tools.GroundedTools, or the perception node's tools
    over ROS (teachbot.nodes.raider_ros.RemoteTools). ``call`` raises ToolError with what went wrong."""

    def call(self, name: str, args: list[Any] | None = None) -> str:
        """Run tool ``name`` with ``args`` in its parameters' order."""
        ...


@dataclass
class ToolUse:
    """One tool call of a check and what came of it."""

    name: str
    args: list[Any]
    answer: str
    ok: bool


@dataclass
class CheckResult:
    """The outcome of one check. ``final_response`` is '' when the check ended without a verdict
    (``stopped`` then says why: time_limit, turn_limit or llm_error)."""

    query: str
    final_response: str
    explanation: str
    grounding: list[str] = field(default_factory=list)
    tool_calls: list[ToolUse] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    turn_warnings: list[int] = field(default_factory=list)  # per model turn: how many warnings it drew
    turns: int = 0
    elapsed: float = 0.0
    stopped: str = ""
    transcript: str = ""

    @property
    def issue(self) -> bool:
        return self.final_response in ("ambiguity", "unfeasibility")

    def verdict(self) -> dict[str, str]:
        """The paper's answer: ``{"final_response": ..., "explanation": ...}``."""
        return {"final_response": self.final_response, "explanation": self.explanation}


def build_system_prompt(world: str, config: RaiderConfig, tool_calling: str = "text", reach: Reach | None = None) -> str:
    """The agent's system prompt from prompts/raider/. Paper profile: the Figure 4 sections (task objective,
    procedure steps of the ablation, tool description, constraints with ``reach`` stated, tool-call
    instructions). Guided profile: world, procedure, tools, the tool-call format and, in the text format with
    ``examples``, a worked example."""
    if world not in ("tabletop", "household"):
        raise ConfigError(f"unknown world {world!r} for issue detection; use tabletop or household")
    tools = "\n".join(f"- {doc}" for doc in tool_docs(config.tool_style).values())
    if config.profile == "paper":
        return load_prompt("raider/paper_system.txt").format(
            procedure=load_prompt(f"raider/paper_procedure_{config.prompt.lower()}.txt").strip(),
            tools=tools,
            limits=(reach or config.reach_for(world)).describe(),
            world=load_prompt(f"raider/paper_world_{world}.txt").strip(),
            format=load_prompt(f"raider/paper_format_{tool_calling}.txt").strip(),
        ).rstrip() + "\n"
    return load_prompt("raider/system.txt").format(
        world=load_prompt(f"raider/world_{world}.txt").strip(),
        procedure=load_prompt(f"raider/procedure_{config.prompt.lower()}.txt").strip(),
        tools=tools,
        format=load_prompt(f"raider/format_{tool_calling}.txt").strip(),
        examples=load_prompt("raider/examples.txt") if config.examples and tool_calling == "text" else "",
    ).rstrip() + "\n"


def bind_args(name: str, args: list[Any] | dict[str, Any]) -> list[Any]:
    """A tool's arguments in its parameters' order: a list as it is, an object bound by the parameters' names
    (ToolError for a name the tool does not take, or a parameter left out)."""
    if not isinstance(args, dict):
        return list(args)
    params = list(TOOL_PARAMETERS.get(name, {}))
    unknown = sorted(set(args) - set(params))
    missing = [p for p in params if p not in args]
    if unknown or missing:
        raise ToolError(f"{TOOL_DOCS[name].split(' -> ')[0]} takes {', '.join(params) or 'no arguments'}"
                        + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                        + (f"; missing: {', '.join(missing)}" if missing else ""))
    return [args[p] for p in params]


def _note(result: CheckResult, notes: list[str], warning: str) -> None:
    """A warning of the turn, kept in the turn's notes and the check's warnings."""
    notes.append(warning)
    result.warnings.append(warning)


# ---------------------------------------------------------------------- the agent
class RaiderAgent:
    """Checks action queries against one scene's grounded tools."""

    def __init__(self, model: Model, tools: Tools, world: str, config: RaiderConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, reach: Reach | None = None) -> None:
        """``reach``: what the prompt states of the arm (the paper profile's constraints); default the config's for
        ``world`` (its radius, the workspace of its robot profile)."""
        self.model = model
        self.tools = tools
        self.world = world
        self.config = config or RaiderConfig.load()
        self.clock = clock
        self.system = build_system_prompt(world, self.config, self.tool_calling, reach)

    @property
    def tool_calling(self) -> str:
        mode = self.config.tool_calling_for(getattr(self.model, "name", ""))
        if mode == "native" and not isinstance(self.model, ToolChatModel):
            raise ConfigError(f"raider.tool_calling is native for {self.model.name!r}, but this backend has no "
                              "native tool calling; use tool_calling: text for it")
        return mode

    def check(self, query: str) -> CheckResult:
        """Run the Ground, Ask&Answer, Issue procedure on ``query`` (``pick(apple)`` or a sentence)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("check_action() needs the action to check, e.g. check_action('pick(apple)')")
        result = CheckResult(query.strip(), "", "")
        started = self.clock()
        try:
            if self.config.profile == "paper":
                (self._run_paper_native if self.tool_calling == "native" else self._run_paper_text)(result, started)
            elif self.tool_calling == "native":
                self._run_native(result, started)
            else:
                self._run_text(result, started)
        except LLMError as exc:
            result.stopped, result.explanation = "llm_error", f"the model failed: {exc}"
        result.elapsed = self.clock() - started
        return result

    def _left(self, started: float) -> float:
        return self.config.time_limit - (self.clock() - started)

    def _limit_reached(self, result: CheckResult, started: float) -> bool:
        if self._left(started) <= 0:
            result.stopped = "time_limit"
            result.explanation = f"no verdict within the time limit of {self.config.time_limit:g} s"
            return True
        if self.config.max_turns and result.turns >= self.config.max_turns:
            result.stopped = "turn_limit"
            result.explanation = f"no verdict within {self.config.max_turns} turns"
            return True
        return False

    def _use_tool(self, result: CheckResult, name: str, args: list[Any] | dict[str, Any], shown: str,
                  made_up: str = WARN_MADE_UP_TOOL, failed: str = WARN_FAILED_CALL) -> tuple[str, str]:
        """(tool response, warning): exactly one of them is non-empty. ``args`` in the tool's order, or by name
        (bound to the tool's parameters by their names, never by the order they came in)."""
        if name not in TOOL_DOCS:
            result.tool_calls.append(ToolUse(name, list(args.values()) if isinstance(args, dict) else args, "", False))
            return "", made_up.format(name=name, tools=", ".join(TOOL_DOCS))
        try:
            values = bind_args(name, args)
            answer = self.tools.call(name, values)
        except ToolError as exc:
            result.tool_calls.append(ToolUse(name, list(args.values()) if isinstance(args, dict) else args, str(exc), False))
            return "", failed.format(call=shown, error=exc)
        result.tool_calls.append(ToolUse(name, values, answer, True))
        return answer, ""

    def first_message(self, query: str) -> str:
        """The paper's input message: the query and the list of objects in the scene."""
        try:
            listing = self.tools.call("object_detection", [])
        except ToolError as exc:
            listing = f"unknown ({exc})"
        return f"Action query: {query}\nObjects in the scene: {listing}"

    def _finish(self, result: CheckResult, value: dict[str, Any]) -> str:
        """Take a final response; '' when accepted, else the warning."""
        try:
            result.final_response, result.explanation, result.grounding = check_final(value)
        except ValueError as exc:
            return WARN_BAD_FINAL.format(error=exc)
        return ""

    # -------------------------------------------------------------- the paper profile (its PFM, Figure 3)
    def _accept(self, result: CheckResult, value: dict[str, Any]) -> str:
        """Take a final response into ``result``: '' when it is one, else Warning 4 saying what is wrong."""
        try:
            result.final_response, result.explanation, result.grounding = check_final(value)
        except ValueError as exc:
            return W4.format(what=f"the final response is not valid: {exc}")
        return ""

    def _run_paper_text(self, result: CheckResult, started: float) -> None:
        """The paper's PFM over text turns: the first message holds the query and the object list; each turn's calls
        run in order, each response or warning is appended in that order, and the check ends at a final response with
        no call pending (or at a limit)."""
        conversation = self.first_message(result.query) + "\n"
        while not self._limit_reached(result, started):
            completion = self.model.generate(self.system + SYSTEM_END + conversation, stop=(TOOL_RESPONSE,),
                                              max_tokens=self.config.max_tokens, timeout=max(self._left(started), 0.1))
            result.turns += 1
            turn = read_paper_turn(completion.text)
            conversation += turn.text.strip() + "\n"
            notes: list[str] = []
            for warning in turn.warnings:  # Warning 1 (made up response, final beside pending calls), Warning 4
                _note(result, notes, warning)
                conversation += f"{warning}\n"
            for name, args, shown, error in turn.calls:
                if error:
                    answer, warning = "", W3.format(call=shown, error=error)
                else:
                    answer, warning = self._use_tool(result, name, args, shown, made_up=W2, failed=W3)
                if answer:
                    conversation += f"{TOOL_RESPONSE} {response_line(name, args, answer)}\n"
                else:
                    _note(result, notes, warning)
                    conversation += f"{warning}\n"
            if turn.final is not None:
                warning = self._accept(result, turn.final)
                if not warning:
                    result.turn_warnings.append(len(notes))
                    break
                _note(result, notes, warning)
                conversation += f"{warning}\n"
            result.turn_warnings.append(len(notes))
        result.transcript = conversation

    def _run_paper_native(self, result: CheckResult, started: float) -> None:
        """The paper's PFM over native tool calls: the same first message and the same four warnings. A
        ``final_response`` call beside other calls is Warning 1 (they run, it is ignored); a reply with no call and no
        final response in its text is Warning 4. Arguments are bound to the tools' parameters by name."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                          {"role": "user", "content": self.first_message(result.query)}]
        schemas = self.tool_schemas()
        lines = [messages[1]["content"]]
        while not self._limit_reached(result, started):
            reply = self.model.chat_tools(messages, schemas, timeout=max(self._left(started), 0.1))
            result.turns += 1
            messages.append(assistant_message(reply))
            lines += [reply.text] if reply.text else []
            notes: list[str] = []
            pending = [c for c in reply.tool_calls if c.name != "final_response"]
            text_final = find_final(reply.text or "")
            premature = bool(pending) and (len(pending) < len(reply.tool_calls) or text_final is not None)
            if premature:
                _note(result, notes, W1.format(what=W1_FINAL))
            done = False
            for call in reply.tool_calls:
                shown = f"{call.name}({call.arguments})"
                lines.append(f"{TOOL_CALL} {shown}")
                try:
                    kwargs = json.loads(call.arguments or "{}")
                    if not isinstance(kwargs, dict):
                        raise ValueError("the arguments must be a JSON object")
                except ValueError as exc:  # arguments that are no JSON object: warning 3
                    kwargs, content = None, W3.format(call=shown, error=exc)
                    _note(result, notes, content)
                if kwargs is not None and call.name == "final_response":
                    error = "" if premature else self._accept(result, kwargs)
                    content = W1.format(what=W1_FINAL) if premature else error or "accepted"
                    if error:
                        _note(result, notes, content)
                    done = done or not (premature or error)
                elif kwargs is not None:
                    answer, warning = self._use_tool(result, call.name, kwargs, shown, made_up=W2, failed=W3)
                    content = response_line(call.name, kwargs, answer) if answer else warning
                    if warning:
                        _note(result, notes, warning)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                lines.append(content)
            if done:
                result.turn_warnings.append(len(notes))
                break
            if not reply.tool_calls:
                warning = self._accept(result, text_final) if text_final is not None else W4.format(what=W4_NOTHING)
                if not warning:
                    result.turn_warnings.append(len(notes))
                    break
                _note(result, notes, warning)
                messages.append({"role": "user", "content": warning})
                lines.append(warning)
            result.turn_warnings.append(len(notes))
        result.transcript = "\n".join(lines) + "\n"

    # -------------------------------------------------------------- text tool calls
    def _run_text(self, result: CheckResult, started: float) -> None:
        conversation = f"Action query: {result.query}\n"
        while not self._limit_reached(result, started):
            prompt = self.system + SYSTEM_END + conversation
            completion = self.model.generate(prompt, stop=(TOOL_RESPONSE,), max_tokens=self.config.max_tokens,
                                             timeout=max(self._left(started), 0.1))
            result.turns += 1
            turn = read_turn(completion.text)
            conversation += turn.text.strip() + "\n"
            notes = list(turn.warnings)
            if turn.call is not None:
                answer, warning = self._use_tool(result, turn.call[0], turn.call[1], turn.call_text)
                if answer:
                    conversation += f"{TOOL_RESPONSE} {answer}\n"
                notes += [warning] if warning else []
            elif turn.final is not None:
                warning = self._finish(result, turn.final)
                if not warning:
                    result.turn_warnings.append(len(notes))
                    break
                notes.append(warning)
            for note in notes:
                conversation += f"{WARNING} {note}\n"
            result.warnings += notes
            result.turn_warnings.append(len(notes))
        result.transcript = conversation

    # -------------------------------------------------------------- native tool calls
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function definitions, and ``final_response`` as one more."""
        docs = tool_docs(self.config.tool_style)
        out = [{"type": "function", "function": {
            "name": name, "description": docs[name],
            "parameters": {"type": "object", "properties": {k: {"type": "string", "description": d} for k, d in p.items()},
                           "required": list(p)}}} for name, p in TOOL_PARAMETERS.items()]
        out.append({"type": "function", "function": {
            "name": "final_response", "description": "Give the final response (the verdict); ends the check.",
            "parameters": {"type": "object", "properties": {
                "final_response": {"type": "string", "enum": list(VERDICTS)},
                "explanation": {"type": "string"},
                "grounding": {"type": "array", "items": {"type": "string"}}},
                "required": ["final_response", "explanation"]}}})
        return out

    def _run_native(self, result: CheckResult, started: float) -> None:
        model = self.model
        assert isinstance(model, ToolChatModel)
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                          {"role": "user", "content": f"Action query: {result.query}"}]
        schemas = self.tool_schemas()
        lines = [f"Action query: {result.query}"]
        while not self._limit_reached(result, started):
            reply = model.chat_tools(messages, schemas, timeout=max(self._left(started), 0.1))
            result.turns += 1
            messages.append(assistant_message(reply))
            lines += [reply.text] if reply.text else []
            notes: list[str] = []
            done = False
            for call in reply.tool_calls:
                lines.append(f"{TOOL_CALL} {call.name}({call.arguments})")
                try:
                    kwargs = json.loads(call.arguments or "{}")
                    if not isinstance(kwargs, dict):
                        raise ValueError("the arguments must be a JSON object")
                except ValueError as exc:
                    content = WARN_FAILED_CALL.format(call=f"{call.name}({call.arguments})", error=exc)
                    notes.append(content)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{WARNING} {content}"})
                    continue
                if call.name == "final_response":
                    warning = self._finish(result, kwargs)
                    content = warning and f"{WARNING} {warning}" or "accepted"
                    notes += [warning] if warning else []
                    done = done or not warning
                else:
                    answer, warning = self._use_tool(result, call.name, kwargs, f"{call.name}({call.arguments})")
                    content = answer or f"{WARNING} {warning}"
                    notes += [warning] if warning else []
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                lines.append(content)
            if done:
                result.turn_warnings.append(len(notes))
                break
            if not reply.tool_calls:
                value = find_json(reply.text)  # some models answer in text even with tools
                warning = self._finish(result, value) if value is not None else WARN_MISSING
                if not warning:
                    result.turn_warnings.append(len(notes))
                    break
                notes.append(warning)
                messages.append({"role": "user", "content": f"{WARNING} {warning}"})
            result.warnings += notes
            result.turn_warnings.append(len(notes))
        result.transcript = "\n".join(lines) + "\n"


def assistant_message(reply: Any) -> dict[str, Any]:
    """A native tool-calling reply as the assistant message the next request carries (its calls, if any)."""
    if not reply.tool_calls:
        return {"role": "assistant", "content": reply.text}
    return {"role": "assistant", "content": reply.text or None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]}
