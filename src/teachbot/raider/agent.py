"""The RAIDER agent: Ground, Ask&Answer, Issue, with a program flow manager (PFM) over each LLM turn.

Two profiles (config/raider.yaml ``profile``). ``paper``, the default, is the RAIDER paper's protocol: the
zero-shot Figure 4 prompt (task objective, procedure, tools, constraints with the arm's reach, tool-call
instructions), the object list in the first message, tools that return facts, ``call_tool{...}`` calls (several
per turn, run in order, arguments in order or by name) and the PFM's four warnings (teachbot.raider.pfm). The
``guided`` profile is a labelled ablation, teachbot's variant before issue 28: one ``Tool call: name(args)`` line
per turn, tools that judge, a checklist in the Ask step and, with ``examples``, a worked example; its warnings
are the same four in other words. A check ends with the final response, or without a verdict at the time limit
or the turn limit. Two ways of calling tools in either profile: ``text`` (any completion or chat model) and
``native`` (the OpenAI tools API, a :class:`teachbot.llm.base.ToolChatModel`); native arguments are passed by
name. Pure Python, no ROS.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teachbot.errors import ConfigError
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import SYSTEM_END, LLMError, Model, ToolChatModel
from teachbot.raider.config import RaiderConfig
from teachbot.raider.tools import TOOL_DOCS, TOOL_PARAMETERS, GroundedTools, Reach, ToolError, tool_docs

VERDICTS = ("ambiguity", "unfeasibility", "none")
TOOL_CALL = "Tool call:"
TOOL_RESPONSE = "Tool response:"
FINAL = "Final response:"
WARNING = "Warning:"

WARN_MADE_UP_RESPONSE = ("You wrote a tool response yourself; it was removed. Tool responses come only from the "
                         "tools: write the tool call and stop.")
WARN_MADE_UP_TOOL = "There is no tool {name!r}. The tools are: {tools}."
WARN_FAILED_CALL = "The tool call {call} failed: {error}"
WARN_MISSING = ("Your turn had neither a tool call nor a final response. End every turn with one line "
                "'Tool call: <tool>(<arguments>)' or 'Final response: {...}'.")
WARN_BAD_FINAL = ("Your final response is not valid: {error}. Write it as one JSON object with final_response "
                  "(ambiguity, unfeasibility or none), explanation and grounding.")


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


# ---------------------------------------------------------------------- parsing a turn
def parse_call(text: str) -> tuple[str, list[Any]]:
    """``name(args)`` -> (name, arguments). Literal arguments; a bare word counts as a string
    (models write ``dist_to_target(apple)``). ValueError when it is not a call."""
    text = text.strip().strip("`").strip()
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*$", text, re.S)
    if not m:
        raise ValueError(f"{text!r} is not a call like tool_name(arguments)")
    name, inner = m.group(1), m.group(2).strip()
    if not inner:
        return name, []
    try:
        node = ast.parse(f"f({inner})", mode="eval").body
    except SyntaxError:
        return name, [a.strip().strip("'\"") for a in inner.split(",")]
    assert isinstance(node, ast.Call)
    args: list[Any] = []
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        if isinstance(arg, ast.Name):
            args.append(arg.id)
        else:
            try:
                args.append(ast.literal_eval(arg))
            except ValueError:
                args.append(ast.unparse(arg))
    return name, args


def find_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has a ``final_response`` key (fences and prose around it allowed)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text[m.start():])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "final_response" in value:
            return value
    return None


def check_final(value: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(verdict, explanation, grounding) of a final response; ValueError says what is wrong."""
    verdict = str(value.get("final_response", "")).strip().lower()
    if verdict not in VERDICTS:
        raise ValueError(f"final_response must be one of {', '.join(VERDICTS)}, not {value.get('final_response')!r}")
    grounding = value.get("grounding", [])
    if isinstance(grounding, str):
        grounding = [grounding]
    if isinstance(grounding, dict):
        grounding = [str(v) for v in grounding.values()]
    return verdict, str(value.get("explanation", "")).strip(), [str(g) for g in grounding or []]


@dataclass
class Turn:
    """What the PFM made of one model turn."""

    text: str  # the turn as kept in the conversation
    call: tuple[str, list[Any]] | None = None
    call_text: str = ""
    final: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


MADE_UP = re.compile(r"^\s*(?:tool\s*response|observation|tool\s*output)\s*:", re.I | re.M)


def read_turn(reply: str) -> Turn:
    """Split one text-format reply into its tool call or final response, cutting made-up tool responses
    (the stop string catches the exact form; models also write 'Observation:' or change the case)."""
    warnings = []
    made_up = MADE_UP.search(reply)
    if made_up:
        reply = reply[: made_up.start()].rstrip()
        warnings.append(WARN_MADE_UP_RESPONSE)
    final_at = reply.find(FINAL)
    call_at = reply.find(TOOL_CALL)
    if call_at >= 0 and (final_at < 0 or call_at < final_at):
        line = reply[call_at + len(TOOL_CALL):].strip().split("\n")[0]
        text = reply[: call_at + len(TOOL_CALL)] + " " + line
        try:
            return Turn(text, parse_call(line), line.strip(), warnings=warnings)
        except ValueError as exc:
            return Turn(text, None, line.strip(), warnings=[*warnings, WARN_FAILED_CALL.format(call=line.strip(), error=exc)])
    value = find_json(reply[final_at:] if final_at >= 0 else reply)
    if value is not None:
        return Turn(reply, final=value, warnings=warnings)
    if final_at >= 0:
        return Turn(reply, warnings=[*warnings, WARN_BAD_FINAL.format(error="no JSON object with final_response found")])
    return Turn(reply, warnings=[*warnings, WARN_MISSING])


# ---------------------------------------------------------------------- the agent
class RaiderAgent:
    """Checks action queries against one scene's grounded tools."""

    def __init__(self, model: Model, tools: GroundedTools, world: str, config: RaiderConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model = model
        self.tools = tools
        self.world = world
        self.config = config or RaiderConfig.load()
        self.clock = clock
        reach = getattr(tools, "reach", None)  # the grounded tools' own reach; remote tools: the config's
        self.system = build_system_prompt(world, self.config, self.tool_calling, reach if isinstance(reach, Reach) else None)

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
                from teachbot.raider import pfm  # the paper's PFM loops (pfm imports this module's helpers)

                (pfm.run_native if self.tool_calling == "native" else pfm.run_text)(self, result, started)
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
        if result.turns >= self.config.max_turns:
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
            messages.append({"role": "assistant", "content": reply.text or None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]}
                if reply.tool_calls else {"role": "assistant", "content": reply.text})
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
