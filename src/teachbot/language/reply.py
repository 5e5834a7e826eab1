"""Reading an LLM's reply to the console prompt: the statements to run, and what to drop.

The prompt ends with ``>>> ``; the model should answer with one statement (``... `` continuation
lines), but real models add reasoning, prose, markdown fences and invented console output.
``read_reply`` keeps the statements and drops the rest; ``first_statement_complete`` tells a
streaming caller when the first statement can no longer change, so it can close the stream.

The rules, in order (each is exercised by ``test/fixtures/llm_replies.yaml``):

1. ``\\r\\n`` and ``\\r`` become ``\\n``; trailing whitespace is dropped.
2. A leaked end-of-turn token (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, ...) ends the reply.
   Reasoning: ``<think>``/``<thinking>``/``<reasoning>`` blocks are dropped. A closing tag with no
   opening tag before it (DeepSeek-R1 templates put ``<think>`` into the prompt) drops everything up
   to it; an opening tag that is never closed drops the rest of the reply.
3. Fence lines (three backticks with an optional language) cut the text into segments, alternately
   outside and inside fences. The statements come from the first segment holding a strong statement
   (rule 5), so prose around a fence is dropped and the first fenced block with code wins.
4. Within a segment a statement may start at any line (after a ``>>> `` prefix, if any). Its extent
   is that line, the lines that close its brackets or strings, ``... `` lines, and for a block (a
   line ending in ``:`` or starting with a compound keyword) the lines indented below it (across
   blank lines only when more indented lines follow) and dedented ``else/elif/except/finally``
   clauses. The longest head of the extent that ``ast.parse`` accepts is the statement; a line that
   starts none is prose or invented output and is dropped.
   A segment holding a ``>>> `` line is console text: after its first statement only ``>>> `` lines
   start statements, all else is invented output.
5. Weak statements, taken only when they are the whole reply, are prose or output that happens to
   parse: a bare literal (``'success'``, ``['red block']``) and, outside fences, an expression with
   no call (``Sure``, ``not sure``) or an annotation without a value (``Answer: get_obj_names()``).
   A line typed after ``>>> `` is never weak.
6. With no statement found: the first single-backtick span that holds a strong statement
   ("Calling `get_obj_names()` now."), else an error line.

Streaming: the first statement is final once a following line cannot continue it under rule 4
whatever else arrives (a line that is not blank, indented, ``... `` or a prefix of it; a fence;
``>>>``; for a block, a dedented line that cannot become a clause, or a blank line followed by
one). A prose-led reply with no think tag is never taken as final: it may be reasoning whose
``<think>`` the chat template stripped, which a later ``</think>`` would discard. (A reasoning
text that starts with a Python statement is the one case this cannot see coming.)
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from teachbot.language.completion import syntax_error

EMPTY_ERROR = "EmptyCompletion: the model wrote nothing after >>>"
UNCLOSED_ERROR = ("IncompleteReply: the reply ended inside <think> before any statement "
                  "(keep the reasoning short, then write one Python statement after >>>)")
NO_STATEMENT_ERROR = "SyntaxError: no statement to run (write one Python statement after >>>; prose goes in say('...'))"

_OPEN_TAG = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_END_OF_TURN = re.compile(r"<\|(?:im_end|eot_id|endoftext|end)\|>|</s>|<｜end▁of▁sentence｜>")
_FENCE = re.compile(r"\s*(`{3,}|~{3,})\s*[\w.+#-]*\s*")
_SPECIAL = re.compile(r"[#'\"()\[\]{}]")
_INLINE = re.compile(r"(`{1,3})([^`\n]+?)\1")
_CLAUSES = ("else", "elif", "except", "finally")
_DECORATED = ("@", "def", "class", "async")
_COMPOUND = {"if", "for", "while", "with", "def", "class", "try", "async", "match"}
_FENCE_LANGUAGES = {"python", "py", "pycon", "python3"}
_PROMPT, _CONT = ">>>", "..."
_MAX_STATEMENT_LINES = 100  # no console input is longer; bounds the work on long prose


@dataclass(frozen=True)
class Reply:
    """What a reply holds: ``statements`` to run in order, the ``dropped`` rest, or one ``error`` line."""

    statements: tuple[str, ...]  # complete statements as source, without '>>> '/'... ' prefixes
    dropped: str                 # think blocks, prose, fences, invented output ('' when nothing)
    error: str = ""              # one console error line when no statement could be read


@dataclass(frozen=True)
class _Line:
    kind: str  # 'prompt' ('>>> ' line), 'cont' ('... ' line), 'fence' or 'plain'
    text: str  # without its prefix
    raw: str


@dataclass(frozen=True)
class _Found:
    sources: list[str]  # the top-level statements in this extent
    start: int          # first line index
    end: int            # one past the last line used
    certain: bool       # no continuation of the text can change this statement


@dataclass
class _Reading:
    lines: list[_Line]
    found: list[_Found]
    removed: list[str]    # think blocks and what followed an end-of-turn token
    seen_tag: bool        # a think tag occurred
    unclosed: bool        # the reply ends inside a think block
    rest: str             # the text without them


def read_reply(text: str) -> Reply:
    """The statements of an LLM reply to a console prompt (see the module docstring for the rules)."""
    if not text.strip():
        return Reply((), "", EMPTY_ERROR)
    reading = _read(text, partial=False)
    if reading.found:
        used = {k for f in reading.found for k in range(f.start, f.end)}
        statements = tuple(s for f in reading.found for s in f.sources)
        return Reply(statements, _dropped(reading, used))
    everything = _normalize(text).strip()
    if reading.unclosed:
        return Reply((), everything, UNCLOSED_ERROR)
    if not reading.rest.strip():
        return Reply((), everything, EMPTY_ERROR)
    content = [k for k, line in enumerate(reading.lines) if line.kind != "fence" and line.text.strip()]
    if len(content) == 1 and _parse(reading.lines[content[0]].text.strip()):
        # the whole reply is one weak statement ("Sure", "'done'"): run it; the console will answer
        return Reply((reading.lines[content[0]].text.strip(),), _dropped(reading, set(content)))
    inline, span = _inline_statement(reading.rest)
    if inline:
        prose = reading.rest.replace(span, "", 1).strip()
        return Reply((inline,), "\n".join(p for p in [*reading.removed, prose] if p))
    error = syntax_error(reading.lines[content[0]].text.strip()) if content else ""
    error = error or syntax_error(reading.rest.strip()) or NO_STATEMENT_ERROR
    return Reply((), everything, error)


def first_statement_complete(text: str) -> bool:
    """Whether the first statement of a reply still streaming in is complete and can no longer change.

    True once the statement is followed by a line that cannot continue it (or a closing fence). A
    reply that opens with prose and has shown no think tag stays False: it may be a reasoning model
    whose template strips ``<think>``, and a later ``</think>`` would discard all of it."""
    reading = _read(text, partial=True)
    return not reading.unclosed and bool(reading.found) and reading.found[0].certain


# ---------------------------------------------------------------------- reading


def _read(text: str, partial: bool) -> _Reading:
    """Read ``text``; with ``partial`` its last line may still grow (streaming)."""
    text = _normalize(text)
    if end_of_turn := _END_OF_TURN.search(text):  # a leaked special token: the model's turn ended there
        text, after = text[: end_of_turn.start()], text[end_of_turn.start():].strip()
    rest, removed, seen, unclosed = _strip_reasoning(text)
    if end_of_turn:
        removed.append(after)
    raw = rest.split("\n")
    partial_at = len(raw) - 1 if partial else -1
    strict = partial and not seen
    if strict:  # only the lines up to the first statement's longest extent can matter (long prose)
        first = next((k for k, r in enumerate(raw) if not _lead_in(_classify(r.rstrip(), False))), len(raw))
        if first + _MAX_STATEMENT_LINES + 2 < len(raw):
            raw, partial_at = raw[: first + _MAX_STATEMENT_LINES + 2], -1
    lines = [_classify(r if k == partial_at else r.rstrip(), k == partial_at) for k, r in enumerate(raw)]
    found: list[_Found] | None = []
    for lo, hi, fenced, closed in _segments(lines):
        found = _read_segment(lines, lo, hi, fenced, closed, partial_at, strict)
        if found is None:
            found = []
            break
        if found:
            break
    return _Reading(lines, found, removed, seen, unclosed, rest)


def strip_reasoning(text: str) -> str:
    """``text`` without its reasoning blocks, by the reply reader's rules (also for prose answers)."""
    return _strip_reasoning(_normalize(text))[0].strip()


def code_block(text: str) -> str:
    """The first fenced block of ``text`` (any language tag), else ``text`` itself."""
    match = re.search(r"```[\w+-]*[ \t]*\n(.*?)```", text, re.S)
    return match.group(1) if match else text


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _strip_reasoning(text: str) -> tuple[str, list[str], bool, bool]:
    """(text without think blocks, the blocks, whether a tag was seen, whether one is left open)."""
    parts: list[str] = []
    first_open, first_close = _OPEN_TAG.search(text), _CLOSE_TAG.search(text)
    seen = bool(first_open or first_close)
    if first_close and (not first_open or first_close.start() < first_open.start()):
        # '</think>' without '<think>': the chat template opened the block in the prompt
        parts.append(text[: first_close.end()].strip())
        text = "\n" + text[first_close.end():]
    while opening := _OPEN_TAG.search(text):
        closing = _CLOSE_TAG.search(text, opening.end())
        if not closing:
            parts.append(text[opening.start():].strip())
            return text[: opening.start()], parts, seen, True
        parts.append(text[opening.start(): closing.end()].strip())
        text = text[: opening.start()] + "\n" + text[closing.end():]
    return text, parts, seen, False


def _classify(raw: str, partial: bool) -> _Line:
    if not partial and _FENCE.fullmatch(raw):
        return _Line("fence", "", raw)
    if raw.startswith(_PROMPT):
        text = raw[len(_PROMPT):]
        return _Line("prompt", text[1:] if text.startswith(" ") else text, raw)
    if raw == _CONT or raw.startswith(_CONT + " "):
        return _Line("cont", raw[len(_CONT) + 1:], raw)
    return _Line("plain", raw, raw)


def _segments(lines: list[_Line]) -> list[tuple[int, int, bool, bool]]:
    """(start, end, inside a fence, ended by a fence line) of the runs between fence lines."""
    segments, start, fenced = [], 0, False
    for k, line in enumerate(lines):
        if line.kind == "fence":
            segments.append((start, k, fenced, True))
            start, fenced = k + 1, not fenced
    segments.append((start, len(lines), fenced, False))
    return segments


def _read_segment(lines: list[_Line], lo: int, hi: int, fenced: bool, closed: bool, partial_at: int,
                  strict: bool) -> list[_Found] | None:
    """The statements of one segment ([] when it holds no strong statement).

    ``strict`` (streaming, no think tag seen): only the first statement is read, and None is returned
    as soon as anything but blank lines and comments comes before it (a prose-led reply)."""
    console = any(line.kind == "prompt" for line in lines[lo:hi])
    found: list[_Found] = []
    settled = True  # every line skipped before the first statement was skipped for good
    i = lo
    while i < hi:
        line = lines[i]
        if not line.text.strip() or (found and console and line.kind != "prompt"):
            i += 1  # blank, or invented output after a console statement
            continue
        extent = _extent(lines, i, hi, closed, partial_at)
        parsed = _parse_head(extent.texts, extent.heads)
        if parsed is None or (line.kind != "prompt" and _weak(parsed[0].body[0], fenced)):
            if strict and not _lead_in(line):
                return None
            settled = settled and extent.certain
            i += parsed[1] if parsed else 1
            continue
        tree, used, source = parsed
        found.append(_Found(_split(tree, source), i, i + used, extent.certain and settled))
        if strict:
            break
        i += used
    return found


@dataclass
class _Extent:
    """The lines a statement starting at some line may use."""

    end: int            # one past the last line
    certain: bool       # no continuation of the text can change ``end``
    texts: list[str]    # the lines, without prefixes and the first line's indent
    heads: list[int]    # line counts after which no bracket or string is left open, longest first


def _extent(lines: list[_Line], i: int, hi: int, closed: bool, partial_at: int) -> _Extent:
    """The extent of a statement starting at line ``i`` (rule 4)."""
    first = lines[i]
    base = _indent(first.text)
    texts = [first.text.lstrip()]
    heads: list[int] = []
    if i == partial_at:
        return _Extent(i + 1, False, texts, heads)
    lexer = _Lexer()
    lexer.feed(texts[0])
    if not lexer.open:
        heads.append(1)
    head = texts[0].split(maxsplit=1)[0].rstrip(":")
    block = lexer.last == ":" or head in _COMPOUND or head.startswith("@")
    keywords = _DECORATED if head.startswith("@") else _CLAUSES
    j = i + 1
    while True:
        if lexer.bad:  # e.g. an unterminated one-line string: no later line can mend it
            return _Extent(j, True, texts, heads[::-1])
        if j >= hi:
            return _Extent(j, closed, texts, heads[::-1])
        if j - i >= _MAX_STATEMENT_LINES:
            return _Extent(j, True, texts, heads[::-1])
        line = lines[j]
        if j == partial_at:
            return _Extent(j, not _may_continue(line.raw, lexer.open, block, base, keywords), texts, heads[::-1])
        if lexer.open:
            texts.append(_body_text(line, base))
        elif line.kind == "cont" and line.text.strip():
            texts.append(line.text)
        elif block and line.kind == "plain" and line.text.strip() and (
                _indent(line.text) > base or _starts_with_word(line.text.lstrip(), keywords)):
            texts.append(_body_text(line, base))
        elif block and line.kind in ("plain", "cont") and not line.text.strip():
            # a blank line ends a block unless more of its body follows
            k = next((k for k in range(j, hi) if k == partial_at or lines[k].text.strip()), hi)
            if k == hi:
                return _Extent(j, closed, texts, heads[::-1])
            if k == partial_at:
                return _Extent(j, not _may_continue(lines[k].raw, False, False, base, ()), texts, heads[::-1])
            if not _is_body(lines[k], base):
                return _Extent(j, True, texts, heads[::-1])
            texts.extend("" for _ in range(j, k))
            j = k
            continue
        else:
            # a line that does not continue the statement. A blank '...' line, or one indented deeper
            # after a simple statement, is not read as a continuation but is not taken as proof either
            doubtful = line.kind == "cont" or (line.kind == "plain" and not block and _indent(line.raw) > base)
            return _Extent(j, not doubtful, texts, heads[::-1])
        was_open = not heads
        lexer.feed(texts[-1])
        if not lexer.open and not lexer.bad:
            heads.append(len(texts))
            block = block or (was_open and lexer.last == ":")  # a header over several lines
        j += 1


def _may_continue(raw: str, open_: bool, block: bool, base: int, keywords: tuple[str, ...]) -> bool:
    """Whether the unfinished last line ``raw`` could still become part of the statement."""
    if open_ or not raw or raw[0] in " \t" or raw.startswith(_CONT + " ") or _CONT.startswith(raw):
        return True
    if raw.startswith(_PROMPT):
        return False
    word = re.match(r"[@\w]*", raw).group()
    # 'el' may become 'else:'; 'else' too
    return block and (_starts_with_word(raw, keywords) or (word == raw and any(k.startswith(word) for k in keywords)))


def _is_body(line: _Line, base: int) -> bool:
    return (line.kind == "cont" and _indent(line.text) > 0) or (line.kind == "plain" and _indent(line.text) > base)


def _starts_with_word(text: str, words: tuple[str, ...]) -> bool:
    return any(text.startswith(w) and (w == "@" or not text[len(w):len(w) + 1].isidentifier()) for w in words)


def _body_text(line: _Line, base: int) -> str:
    """A following line of a statement: ``... `` lines as written, plain lines less the first line's indent."""
    if line.kind != "plain":
        return line.text
    return line.text[min(base, _indent(line.text)):]


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


class _Lexer:
    """Bracket depth and open strings of Python source fed line by line (enough to find its extent)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""   # an open triple quote
        self.last = ""    # the last significant character outside comments
        self.bad = False  # a one-line string left open ("I'll check"), or too many closing brackets

    @property
    def open(self) -> bool:
        return self.depth > 0 or bool(self.quote) or self.last == "\\"

    def feed(self, line: str) -> None:
        if self.last == "\\":
            self.last = ""
        i = 0
        while not self.bad:
            if self.quote:
                i = _string_end(line, i, self.quote)
                if i < 0:
                    return
                self.last, self.quote = self.quote[0], ""
            special = _SPECIAL.search(line, i)
            plain = line[i: special.start() if special else len(line)].rstrip()
            if plain:
                self.last = plain[-1]
            if not special or special.group() == "#":
                return
            char, i = special.group(), special.start()
            if char in "'\"":
                quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else char
                end = _string_end(line, i + len(quote), quote)
                if end < 0:
                    self.quote, self.bad = (quote, False) if len(quote) == 3 else ("", True)
                    return
                i = end
            else:
                self.depth += 1 if char in "([{" else -1
                self.bad = self.depth < 0
                i += 1
            self.last = char


def _string_end(line: str, i: int, quote: str) -> int:
    """Index just past ``quote`` closing a string at or after ``i`` in ``line``, or -1."""
    while (j := line.find(quote, i)) >= 0:
        k = j
        while k > i and line[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:  # not escaped
            return j + len(quote)
        i = j + 1
    return -1


def _parse(source: str) -> ast.Module | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SyntaxWarning for '\d' in a string
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    return tree if tree.body else None


def _parse_head(texts: list[str], heads: list[int]) -> tuple[ast.Module, int, list[str]] | None:
    """The longest head of ``texts`` that parses: (tree, lines used, those lines)."""
    for used in heads:
        head = [t.rstrip() for t in texts[:used]]
        tree = _parse("\n".join(head))
        if tree is not None:
            return tree, used, head
    return None


def _split(tree: ast.Module, source: list[str]) -> list[str]:
    """The top-level statements of ``tree`` as source; statements sharing a line stay together."""
    spans: list[list[int]] = []
    for node in tree.body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        end = node.end_lineno or node.lineno
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return ["\n".join(source[start - 1:end]).rstrip() for start, end in spans]


def _weak(node: ast.stmt, fenced: bool) -> bool:
    """Prose or invented output that happens to parse (rule 5)."""
    if isinstance(node, ast.Expr):
        if _is_literal(node.value):
            return True
        return not fenced and not any(isinstance(n, ast.Call) for n in ast.walk(node))
    return not fenced and isinstance(node, ast.AnnAssign) and node.value is None


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _inline_statement(prose: str) -> tuple[str, str]:
    """(statement, span with its backticks) of the first backtick span in ``prose`` that is one
    strong statement, else ('', '')."""
    for match in _INLINE.finditer(prose):
        code = match.group(2).strip()
        word, _, tail = code.partition(" ")
        for candidate in (code, tail.strip() if word.lower() in _FENCE_LANGUAGES else ""):
            candidate = candidate.removeprefix(_PROMPT).strip()
            tree = _parse(candidate) if candidate else None
            if tree is not None and len(tree.body) == 1 and not _weak(tree.body[0], fenced=False):
                return candidate, match.group()
    return "", ""


def _lead_in(line: _Line) -> bool:
    """Lines that may come before a first statement without making the reply prose-led."""
    return line.kind == "fence" or not line.text.strip() or line.text.lstrip().startswith("#")


def _dropped(reading: _Reading, used: set[int]) -> str:
    # a bare '>>>' or '...' marker is no content
    unused = [line.raw for k, line in enumerate(reading.lines) if k not in used and (line.kind == "fence" or line.text.strip())]
    return "\n".join(p for p in [*reading.removed, *unused] if p.strip())
