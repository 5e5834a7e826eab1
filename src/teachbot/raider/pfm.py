"""The paper's program flow manager (PFM, RAIDER §3.2 and Figure 3): reading one model turn and its four warnings.

A turn in the text format holds the model's reasoning and any number of ``call_tool{"tool": ..., "args": ...}``
calls (args a list in the tool's order, the paper's form, or an object by name), or a final response: a JSON
object with ``final_response``. The PFM runs the calls in order; it appends

- Warning 1, *made up tool response*, when a final response comes with tool calls still pending (the final
  response is ignored) or the model wrote a tool response itself (cut);
- Warning 2, *made up tool name*, for a tool that is not in the list;
- Warning 3, *unsuccessful tool call*, for a call that failed or could not be read;
- Warning 4, *missing tool call or final response*, for a turn with neither (or with a final response that is
  not one: no valid verdict).

The native mode (the OpenAI tools API) gets the same four warnings: teachbot.raider.agent. Pure Python.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from teachbot.llm.base import SYSTEM_END
from teachbot.raider.agent import TOOL_CALL, TOOL_RESPONSE, check_final

CALL_TOOL = "call_tool"
W1 = ("Warning 1 (made up tool response): {what}. Tool responses come only from the tools, after your "
      "reply: wait for them, then decide.")
W1_FINAL = "your reply holds a final response while tool calls are still pending; the final response was ignored"
W1_RESPONSE = "your reply holds a tool response you wrote yourself; it was removed"
W2 = "Warning 2 (made up tool name): there is no tool {name!r}. The tools are: {tools}."
W3 = "Warning 3 (unsuccessful tool call): the tool call {call} failed: {error}"
W4 = ("Warning 4 (missing tool call or final response): {what}. Write tool calls as "
      'call_tool{{"tool": "<tool name>", "args": [<arguments>]}}, or, when all the information is gathered, the '
      'final response {{"final_response": "ambiguity" | "unfeasibility" | "none", "explanation": "...", '
      '"grounding": [...]}}.')
W4_NOTHING = "your reply holds neither a tool call nor a final response"
WARNING_KINDS = {"Warning 1": 1, "Warning 2": 2, "Warning 3": 3, "Warning 4": 4}

MADE_UP = re.compile(r"^\s*(?:\**tool\s*(?:call\s*)?response\**|observation|tool\s*output)\s*:", re.I | re.M)
CALL_START = re.compile(r"call_tool\s*(?:\(\s*)?\{", re.I)


@dataclass
class PaperTurn:
    """What the PFM made of one text turn: the calls in order (name, args, the call as written, or an error for
    a call it could not read), the final response, and the warnings that concern the turn as a whole."""

    text: str
    calls: list[tuple[str, list[Any] | dict[str, Any], str, str]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def _balanced(text: str, start: int) -> int:
    """The index just past the brace that closes the one at ``start`` (strings respected); -1 when unclosed."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def parse_call_tool(body: str) -> tuple[str, list[Any] | dict[str, Any]]:
    """``{"tool": name, "args": [...] | {...}}`` -> (name, args). Also the paper's unquoted form
    ``{tool: name, args: [a, b]}``. ValueError says what is wrong."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        relaxed = re.sub(r"([{,]\s*)(tool|args)\s*:", r'\1"\2":', body)
        relaxed = re.sub(r'("tool"\s*:\s*)([A-Za-z_][A-Za-z0-9_]*)', r'\1"\2"', relaxed)
        try:
            value = ast.literal_eval(relaxed)
        except (ValueError, SyntaxError):
            raise ValueError(f"{body!r} is not call_tool{{\"tool\": <name>, \"args\": [<arguments>]}}") from None
    if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
        raise ValueError(f"{body!r} names no tool: write call_tool{{\"tool\": <name>, \"args\": [<arguments>]}}")
    args = value.get("args", [])
    if args is None:
        args = []
    if isinstance(args, (str, int, float)):
        args = [args]
    if not isinstance(args, (list, dict)):
        raise ValueError(f"the args of {body!r} must be a list or an object")
    return value["tool"].strip(), args


def find_final(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` with a ``final_response`` key (fences and prose around it allowed)."""
    found = final_span(text)
    return found[0] if found else None


def final_span(text: str) -> tuple[dict[str, Any], int, int] | None:
    """The first JSON object in ``text`` with a ``final_response`` key, and where it starts and ends."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, end = decoder.raw_decode(text[m.start():])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "final_response" in value:
            return value, m.start(), m.start() + end
    return None


def read_paper_turn(reply: str) -> PaperTurn:
    """Split one text reply into its tool calls (in order) and final response, with the turn's warnings: a
    made-up tool response is cut (Warning 1), a final response beside pending calls is ignored (Warning 1),
    a call that cannot be read is Warning 3 when its turn is run, a turn with neither is Warning 4."""
    warnings: list[str] = []
    made_up = MADE_UP.search(reply)
    if made_up:
        reply = reply[: made_up.start()].rstrip()
        warnings.append(W1.format(what=W1_RESPONSE))
    turn = PaperTurn(reply, warnings=warnings)
    rest = reply
    pos = 0
    quoted = final_span(reply)  # a final response may quote a call (a warning's words): that is no call
    for m in CALL_START.finditer(reply):
        if m.start() < pos or (quoted and quoted[1] <= m.start() < quoted[2]):
            continue
        brace = m.end() - 1
        end = _balanced(reply, brace)
        shown = reply[m.start(): end if end > 0 else len(reply)].strip()
        if end < 0:
            turn.calls.append(("", [], shown, "the call's braces are not closed"))
            pos = len(reply)
            break
        try:
            name, args = parse_call_tool(reply[brace:end])
            turn.calls.append((name, args, shown, ""))
        except ValueError as exc:
            turn.calls.append(("", [], shown, str(exc)))
        pos = end
        rest = rest.replace(reply[m.start():end], " ", 1)
    final = find_final(rest)
    if final is not None and turn.calls:
        turn.warnings.append(W1.format(what=W1_FINAL))
    elif final is not None:
        turn.final = final
    elif not turn.calls:
        turn.warnings.append(W4.format(what=W4_NOTHING))
    return turn


def warning_kind(text: str) -> int:
    """The paper's number (1-4) of a warning; the guided profile's warnings map to the same four."""
    for prefix, kind in WARNING_KINDS.items():
        if text.startswith(prefix):
            return kind
    lowered = text.lower()
    if "tool response yourself" in lowered:
        return 1
    if lowered.startswith("there is no tool"):
        return 2
    if lowered.startswith("the tool call"):
        return 3
    return 4


def response_line(name: str, args: list[Any] | dict[str, Any], answer: str) -> str:
    """A tool response as the paper's PFM writes it (its Appendix D)."""
    return f"Call to tool {name} with args {json.dumps(args)} returned {answer}"


# ---------------------------------------------------------------------- the paper's loops
def _note(result: Any, notes: list[str], warning: str) -> None:
    notes.append(warning)
    result.warnings.append(warning)


def _accept(result: Any, value: dict[str, Any]) -> str:
    """Take a final response into ``result``: '' when it is one, else Warning 4 saying what is wrong."""

    try:
        result.final_response, result.explanation, result.grounding = check_final(value)
    except ValueError as exc:
        return W4.format(what=f"the final response is not valid: {exc}")
    return ""


def run_text(agent: Any, result: Any, started: float) -> None:
    """The paper's PFM over text turns (``agent``: a teachbot.raider.agent.RaiderAgent): the first message holds
    the query and the object list; each turn's calls run in order, each response or warning is appended in that
    order, and the check ends at a final response with no call pending (or at a limit)."""

    conversation = agent.first_message(result.query) + "\n"
    while not agent._limit_reached(result, started):
        completion = agent.model.generate(agent.system + SYSTEM_END + conversation, stop=(TOOL_RESPONSE,),
                                          max_tokens=agent.config.max_tokens, timeout=max(agent._left(started), 0.1))
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
                answer, warning = agent._use_tool(result, name, args, shown, made_up=W2, failed=W3)
            if answer:
                conversation += f"{TOOL_RESPONSE} {response_line(name, args, answer)}\n"
            else:
                _note(result, notes, warning)
                conversation += f"{warning}\n"
        if turn.final is not None:
            warning = _accept(result, turn.final)
            if not warning:
                result.turn_warnings.append(len(notes))
                break
            _note(result, notes, warning)
            conversation += f"{warning}\n"
        result.turn_warnings.append(len(notes))
    result.transcript = conversation


def run_native(agent: Any, result: Any, started: float) -> None:
    """The paper's PFM over native tool calls: the same first message and the same four warnings. A
    ``final_response`` call beside other calls is Warning 1 (they run, it is ignored); a reply with no call and no
    final response in its text is Warning 4. Arguments are bound to the tools' parameters by name."""

    messages: list[dict[str, Any]] = [{"role": "system", "content": agent.system},
                                      {"role": "user", "content": agent.first_message(result.query)}]
    schemas = agent.tool_schemas()
    lines = [messages[1]["content"]]
    while not agent._limit_reached(result, started):
        reply = agent.model.chat_tools(messages, schemas, timeout=max(agent._left(started), 0.1))
        result.turns += 1
        messages.append({"role": "assistant", "content": reply.text or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]}
            if reply.tool_calls else {"role": "assistant", "content": reply.text})
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
            except ValueError as exc:
                kwargs, content = None, W3.format(call=shown, error=exc)
                _note(result, notes, content)
            if kwargs is None:
                pass
            elif call.name == "final_response":
                error = "" if premature else _accept(result, kwargs)
                content = W1.format(what=W1_FINAL) if premature else error or "accepted"
                if error:
                    _note(result, notes, content)
                done = done or not (premature or error)
            else:
                answer, warning = agent._use_tool(result, call.name, kwargs, shown, made_up=W2, failed=W3)
                content = response_line(call.name, kwargs, answer) if answer else warning
                if warning:
                    _note(result, notes, warning)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            lines.append(content)
        if done:
            result.turn_warnings.append(len(notes))
            break
        if not reply.tool_calls:
            warning = _accept(result, text_final) if text_final is not None else W4.format(what=W4_NOTHING)
            if not warning:
                result.turn_warnings.append(len(notes))
                break
            _note(result, notes, warning)
            messages.append({"role": "user", "content": warning})
            lines.append(warning)
        result.turn_warnings.append(len(notes))
    result.transcript = "\n".join(lines) + "\n"
