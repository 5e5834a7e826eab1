"""Reading one model turn for the program flow manager (PFM, RAIDER §3.2 and Figure 3), and its warnings.

The agent's loops (teachbot.raider.agent) run the calls and append the responses and warnings; this module only
reads turns. Paper profile:

A turn in the text format holds the model's reasoning and any number of ``call_tool{"tool": ..., "args": ...}``
calls (args a list in the tool's order, the paper's form, or an object by name), or a final response: a JSON
object with ``final_response``. The PFM runs the calls in order; it appends

- Warning 1, *made up tool response*, when a final response comes with tool calls still pending (the final
  response is ignored) or the model wrote a tool response itself (cut);
- Warning 2, *made up tool name*, for a tool that is not in the list;
- Warning 3, *unsuccessful tool call*, for a call that failed or could not be read;
- Warning 4, *missing tool call or final response*, for a turn with neither (or with a final response that is
  not one: no valid verdict).

The native mode (the OpenAI tools API) gets the same four warnings in the agent. The guided profile (a labelled
ablation) reads one ``Tool call: name(args)`` line or ``Final response: {...}`` per turn (:func:`read_turn`) and
words its warnings otherwise (:func:`warning_kind` maps them to the same four). Pure Python.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from teachbot.language.json_reply import closing_index

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
        end = closing_index(reply, brace)
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


# ---------------------------------------------------------------------- the guided profile's turns
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
    return find_final(text)


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
