"""The web page's server without ROS: a fake robot behind the hub, real uvicorn on a free loopback port, real HTTP
and websocket clients. The guards (CSP and friends, loopback Host, same-origin websockets, the token and its
cookie, message checks, the rate limit, the client limit), the events a page gets, and camera frames at their rate.
An episode's trace: spans written as the exporter writes them (JSON Lines, children before parents) into a trace
folder of the test's own, read back for the page in tree order, the running episode found by its statements."""

from __future__ import annotations

import contextlib
import json
import time

import httpx
import numpy as np
import pytest
from timing import deadline, pytest_timeout, timeout
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from teachbot.errors import ConfigError
from teachbot.memory.example import InteractionExample
from teachbot.tracing.jsonl import day_file
from teachbot.web.app import COOKIE, CSP, PageApp
from teachbot.web.config import WebConfig
from teachbot.web.frames import FrameSource, unpack
from teachbot.web.hub import Hub, RobotUnavailable
from teachbot.web.protocol import Limits, RateLimit, Refused, clean_text, parse
from teachbot.web.server import WebServer
from teachbot.web.traces import TraceReader, rows

pytestmark = pytest.mark.timeout(pytest_timeout(60))
TOKEN = "correct-horse-battery-staple"


class FakeRobot:
    """The hub's Robot: records what the page asked for; two lessons in its memory."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.stops: list[bool] = []
        self.ended = 0
        self.confirm: list[bool] = []
        self.memory_up = True
        self.lessons = [
            InteractionExample(id="l1", transcript=">>> wait_for_trigger()", improvement="Take the green block.",
                               problem="It took the red block.", scope="always", created="2026-01-01T10:00:00+00:00"),
            InteractionExample(id="l2", transcript=">>> say('<script>alert(1)</script>')", improvement="Ask first.",
                               created="2026-01-02T10:00:00+00:00"),
        ]

    def say(self, text):
        self.said.append(text)

    def emergency_stop(self, engaged):
        self.stops.append(engaged)

    def end_conversation(self):
        self.ended += 1

    def list_lessons(self):
        if not self.memory_up:
            raise RobotUnavailable("memory/list is not served: is the memory node running?")
        return list(self.lessons)

    def remove_lesson(self, example_id):
        self.lessons = [e for e in self.lessons if e.id != example_id]
        return f"removed lesson {example_id}"

    def set_confirm(self, on):
        self.confirm.append(on)
        return "ok"


class Page:
    """A served page over a FakeRobot."""

    def __init__(self, **overrides) -> None:
        self.config = WebConfig.load(port=0, **overrides).with_token({})
        self.robot = FakeRobot()
        self.hub = Hub(self.robot, max_clients=overrides.get("max_clients", 8))
        self.frames = FrameSource(self.config.camera_fps, self.config.camera_width, self.config.jpeg_quality)
        self.server = WebServer(self.config, PageApp(self.config, self.hub, self.frames, max_text_chars=100))
        self.url = self.server.start()
        self.origin = self.url.rstrip("/")

    def ws(self, path="/ws", origin=None, **kw):
        return connect(self.url.replace("http", "ws", 1).rstrip("/") + path, origin=origin or self.origin, **kw)

    def close(self):
        self.server.stop()


@pytest.fixture()
def page():
    p = Page()
    yield p
    p.close()


def events(ws, until, seconds=5.0):
    """Events from ``ws`` until one satisfies ``until`` (returned last), for up to ``seconds`` (scaled)."""
    got = []
    end = deadline(seconds)
    while time.monotonic() < end:
        event = json.loads(ws.recv(timeout=end - time.monotonic()))
        got.append(event)
        if until(event):
            return got
    raise AssertionError(f"no matching event; got {got}")


def test_the_page_and_its_files_are_served_with_the_guard_headers(page):
    index = httpx.get(page.url)
    assert index.status_code == 200 and 'src="/static/app.js"' in index.text
    assert index.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe" not in CSP and "default-src 'none'" in CSP
    assert index.headers["x-content-type-options"] == "nosniff" and index.headers["x-frame-options"] == "DENY"
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css"), ("highlight.css", "text/css")):
        asset = httpx.get(page.url + "static/" + name)
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind), name
    assert "innerHTML" not in httpx.get(page.url + "static/app.js").text  # the page never parses text as markup
    assert "eval(" not in httpx.get(page.url + "static/app.js").text
    for missing in ("static/index.html", "static/../config.py", "static/nothing.js", "admin"):
        assert httpx.get(page.url + missing).status_code == 404, missing


def test_a_page_addressed_by_another_name_is_refused(page):
    """DNS rebinding: a page of evil.example resolving to 127.0.0.1 reaches the server with its own Host."""
    assert httpx.get(page.url, headers={"host": f"evil.example:{page.server.port}"}).status_code == 403
    assert httpx.get(page.url, headers={"host": f"localhost:{page.server.port}"}).status_code == 200
    assert httpx.get(page.url + "lessons.jsonl", headers={"host": "evil.example"}).status_code == 403


def test_a_websocket_from_another_origin_is_refused(page):
    with pytest.raises(InvalidStatus) as refused:
        page.ws(origin="http://evil.example")
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        page.ws(path="/ws/camera", origin="http://evil.example")


def test_a_page_gets_the_state_and_its_words_reach_the_robot(page):
    page.hub.dialog("robot", "Hello <b>there</b>")
    page.hub.transcript("ep1", 0, [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'hi'}"])
    page.hub.objects([{"name": "red block", "position": [0.1, -0.5, 0.02]}])
    with page.ws() as ws:
        got = events(ws, lambda e: e["type"] == "pending")
        kinds = [e["type"] for e in got]
        assert kinds == ["status", "objects", "dialog", "transcript", "pending"]
        assert got[2]["text"] == "Hello <b>there</b>"  # text, shown as text by the page
        assert got[3]["lines"][0] == [["gp", ">>> "], ["n", "wait_for_trigger"], ["p", "()"]]
        ws.send(json.dumps({"type": "say", "text": "  put the\nred block\u202e in the bowl "}))
        ws.send(json.dumps({"type": "stop"}))
        events(ws, lambda e: e["type"] == "note" and "engaged" in e["text"])
        assert page.robot.said == ["put the red block in the bowl"] and page.robot.stops == [True]
        page.hub.dialog("user", "put the red block in the bowl")
        assert events(ws, lambda e: e["type"] == "dialog")[-1]["speaker"] == "user"


def test_bad_messages_are_refused_and_never_reach_the_robot(page):
    bad = ["not json", "[1, 2]", json.dumps({"type": "exec", "code": "1"}), json.dumps({"type": "say"}),
           json.dumps({"type": "say", "text": 5}), json.dumps({"type": "say", "text": "x" * 101}),
           json.dumps({"type": "say", "text": "hi", "extra": 1}), json.dumps({"type": "say", "text": "\u200b \n"}),
           json.dumps({"type": "remove", "id": "../../etc/passwd"}), json.dumps({"type": "confirm_mode", "on": "yes"}),
           json.dumps({"type": "lessons", "query": "q" * 201})]
    with page.ws() as ws:
        events(ws, lambda e: e["type"] == "pending")
        for message in bad:
            ws.send(message)
            event = events(ws, lambda e: e["type"] == "note")[-1]
            assert event["error"] and event["text"].startswith("refused: "), message
        ws.send(b"\x00\x01")
        assert events(ws, lambda e: e["type"] == "note")[-1]["text"] == "refused: binary messages are not accepted"
    assert page.robot.said == [] and page.robot.lessons[0].id == "l1"


def test_a_message_over_the_size_limit_closes_the_connection(page):
    with page.ws(max_size=None) as ws:
        events(ws, lambda e: e["type"] == "pending")
        ws.send(json.dumps({"type": "say", "text": "x" * 20000}))
        with pytest.raises(Exception):  # noqa: B017 - the server closes with 1009 (message too big)
            events(ws, lambda e: False, seconds=3.0)
    assert page.robot.said == []


def test_a_flood_of_messages_is_cut_by_the_rate_limit():
    limit = RateLimit(per_second=20.0, window=5.0)
    passed = sum(limit.allow(0.0) for _ in range(500))
    assert passed == 100  # 5 s of 20/s at once, then nothing
    assert limit.allow(0.1) and limit.allow(0.1) and not limit.allow(0.1)  # 0.1 s refills two


def test_lessons_search_remove_undo_and_export(page):
    with page.ws() as ws:
        events(ws, lambda e: e["type"] == "pending")
        ws.send(json.dumps({"type": "lessons", "query": ""}))
        listed = events(ws, lambda e: e["type"] == "lessons")[-1]["lessons"]
        assert [row["id"] for row in listed] == ["l2", "l1"]  # newest first
        ws.send(json.dumps({"type": "lessons", "query": "GREEN always"}))
        assert [row["id"] for row in events(ws, lambda e: e["type"] == "lessons")[-1]["lessons"]] == ["l1"]
        exported = httpx.get(page.url + "lessons.jsonl")
        assert exported.headers["content-disposition"] == 'attachment; filename="lessons.jsonl"'
        assert [json.loads(line)["id"] for line in exported.text.splitlines()] == ["l2", "l1"]
        ws.send(json.dumps({"type": "undo"}))
        assert "removed the last lesson (l2)" in events(ws, lambda e: e["type"] == "note")[-1]["text"]
        ws.send(json.dumps({"type": "remove", "id": "l1"}))
        events(ws, lambda e: e["type"] == "note")
        assert page.robot.lessons == []
        ws.send(json.dumps({"type": "undo"}))
        assert events(ws, lambda e: e["type"] == "note")[-1]["text"] == "there is no learned lesson to undo"
        page.robot.memory_up = False
        ws.send(json.dumps({"type": "lessons", "query": ""}))
        event = events(ws, lambda e: e["type"] == "note")[-1]
        assert event["error"] and "memory node" in event["text"]
        assert httpx.get(page.url + "lessons.jsonl").status_code == 503


def test_more_pages_than_allowed_are_turned_away():
    page = Page(max_clients=1)
    try:
        with page.ws() as first:
            events(first, lambda e: e["type"] == "pending")
            with page.ws() as second:
                assert "pages are open already" in json.loads(second.recv(timeout=timeout(5)))["text"]
    finally:
        page.close()


def test_a_token_is_needed_for_every_request_and_kept_in_a_cookie(tmp_path):
    page = Page(token=TOKEN)
    try:
        assert httpx.get(page.url).status_code == 401
        assert httpx.get(page.url + "?token=wrong-token-of-some-length").status_code == 401
        assert httpx.get(page.url + "static/app.js").status_code == 401
        with pytest.raises(InvalidStatus):
            page.ws()
        opened = httpx.get(page.url + "?token=" + TOKEN)
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"]
        assert f"{COOKIE}={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        with httpx.Client(cookies={COOKIE: TOKEN}) as browser:
            assert browser.get(page.url).status_code == 200
            assert browser.get(page.url + "lessons.jsonl").status_code == 200
        with page.ws(additional_headers={"Cookie": f"{COOKIE}={TOKEN}"}) as ws:
            assert json.loads(ws.recv(timeout=timeout(5)))["type"] == "status"
    finally:
        page.close()


def test_another_address_than_loopback_needs_a_token(tmp_path):
    with pytest.raises(ConfigError, match="without a token"):
        WebConfig.load(host="0.0.0.0").with_token({})
    with pytest.raises(ConfigError, match="at least 16 characters"):
        WebConfig.load(host="0.0.0.0").with_token({"TEACHBOT_WEB_TOKEN": "short"})
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    pem = tmp_path / "tls.pem"  # readable is all the config checks (test_web_trust serves over TLS)
    pem.write_text("")
    served = WebConfig.load(host="0.0.0.0", token_file=str(token_file), tls_cert=str(pem), tls_key=str(pem))
    assert served.with_token({}).token == TOKEN
    assert WebConfig.load(host="::1").with_token({}).token == ""
    with pytest.raises(ConfigError, match="web.camera_fps"):
        WebConfig.load(camera_fps=0.0)


def test_camera_frames_come_at_the_configured_rate_newest_first(page):
    image = np.zeros((240, 320, 3), dtype=np.uint8)
    image[:, :, 2] = 255  # blue in bgr8 order
    with page.ws(path="/ws/camera") as cam:
        until = deadline(2.0)
        while page.frames.watchers == 0 and time.monotonic() < until:
            time.sleep(0.01)
        assert page.frames.watchers == 1
        got, started = [], time.monotonic()
        while time.monotonic() - started < 2.0:
            page.frames.offer(image.tobytes(), 320, 240, "bgr8", 320 * 3, time.time())
            with contextlib.suppress(TimeoutError):
                got.append(cam.recv(timeout=0.02))
        header, jpeg = unpack(got[-1])
        assert jpeg[:2] == b"\xff\xd8" and header["width"] == 320 and header["height"] == 240
        rate = len(got) / 2.0
        assert 2.0 <= rate <= page.config.camera_fps + 1.0, rate  # 4 fps configured, ~100 images offered a second
        assert [unpack(m)[0]["seq"] for m in got] == sorted(unpack(m)[0]["seq"] for m in got)
    until = deadline(3.0)
    while page.frames.watchers and time.monotonic() < until:
        time.sleep(0.02)
    assert page.frames.watchers == 0  # the bridge unsubscribes from the camera


def test_the_checks_of_a_message():
    limits = Limits(max_text_chars=10)
    assert parse('{"type": "say", "text": " a\\tb "}', limits) == {"type": "say", "text": "a b"}
    assert parse('{"type": "lessons"}', limits) == {"type": "lessons", "query": "", "offset": 0}
    assert clean_text("x\u0000y\u200bz\u202e!") == "xyz!"
    with pytest.raises(Refused, match="unexpected field"):
        parse('{"type": "stop", "now": true}', limits)
    with pytest.raises(Refused, match="must be bool"):
        parse('{"type": "confirm_mode", "on": 1}', limits)


# ---------------------------------------------------------------------------------------------- episode traces
T0 = 1_790_000_000_000_000_000  # ns: a day of 2026; every span of these tests falls on it


class Spans:
    """Writes spans into a trace folder as the JSONL exporter does: one line per finished span, appended."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.count = 0

    def span(self, trace: str, name: str, start_ms: float, ms: float, parent: str | None = None, status: str = "unset",
             message: str = "", **attributes) -> str:
        self.count += 1
        span_id = f"{self.count:016x}"
        start = T0 + int(start_ms * 1e6)
        record = {"trace_id": trace * 32 if len(trace) == 1 else trace, "span_id": span_id, "parent_id": parent,
                  "name": name, "service": "teachbot-stack", "kind": "internal", "start_ns": start,
                  "end_ns": start + int(ms * 1e6), "status": status, "status_message": message,
                  "attributes": attributes, "events": []}
        self.write(json.dumps(record) + "\n")
        return span_id

    def write(self, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with day_file(self.directory, T0).open("a") as f:
            f.write(text)


TRANSCRIPT = [(0, [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'put the block in the blue bowl'}"]),
              (2, [">>> put_first_on_second('red block', 'blue bowl')", "'success'"]),
              (4, [">>> say('Done')", "None"])]


def episode(spans: Spans, trace: str, episode_id: str, finished: bool = True, at: float = 0.0) -> None:
    """The spans of an episode like the console's, ``at`` ms after T0, children first (a span is written when it ends)."""
    root, goal = "e" + trace[0] * 15, "a" + trace[0] * 15
    spans.span(trace, "statement", at + 1, 300, root, **{"console.source": "wait_for_trigger()", "console.line": 0})
    spans.span(trace, "llm.call", at + 305, 20, root, **{"llm.role": "interaction", "llm.tokens_in": 3263})
    spans.span(trace, "skill.execute", at + 340, 900, goal, status="error", message="the gripper slipped",
               **{"teachbot.node": "skills", "skill.action": "put_first_on_second", "skill.result": "failure"})
    spans.span(trace, "skill.goal", at + 330, 950, None, **{"skill.action": "put_first_on_second"})  # its parent: below
    statement = spans.span(trace, "statement", at + 328, 960, root,
                           **{"console.source": "put_first_on_second('red block', 'blue bowl')", "console.line": 2})
    _fix_parent(spans, goal, statement)
    if finished:
        start = T0 + int(at * 1e6)
        spans.write(json.dumps({"trace_id": trace * 32, "span_id": root, "parent_id": None, "name": "episode",
                                "start_ns": start, "end_ns": start + int(2000e6), "status": "unset",
                                "attributes": {"teachbot.episode_id": episode_id}}) + "\n")


def _fix_parent(spans: Spans, goal: str, statement: str) -> None:
    """Give the skill.goal line (written with a placeholder) its span id and its statement parent, as the exporter would."""
    path = day_file(spans.directory, T0)
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["name"] == "skill.goal" and record["parent_id"] is None:
            record["span_id"], record["parent_id"] = goal, statement
            lines[i] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def traced(tmp_path, monkeypatch):
    """A page whose trace folder is the test's own, with two episodes' transcripts and a finished episode's trace."""
    monkeypatch.setenv("TEACHBOT_TRACE_DIR", str(tmp_path / "traces"))
    spans = Spans(tmp_path / "traces")
    episode(spans, "b", "ep0")  # an older episode: its spans never show under ep1
    episode(spans, "c", "ep1", at=2500)
    p = Page()
    for first, lines in TRANSCRIPT:
        p.hub.transcript("ep1", first, lines)
    p.spans = spans
    yield p
    p.close()


def ask(ws, **message) -> dict:
    ws.send(json.dumps({"type": "trace", **message}))
    return events(ws, lambda e: e["type"] in ("trace", "note"))[-1]


def test_an_episodes_spans_come_in_tree_order_with_their_lines_and_nodes(traced):
    with traced.ws() as ws:
        events(ws, lambda e: e["type"] == "pending")
        got = ask(ws, episode="ep1")
        assert got["type"] == "trace" and got["done"] is True and got["trace_id"] == "c" * 32
        rows = [(s["depth"], s["name"], s["line"], s["node"]) for s in got["spans"]]
        assert rows == [(0, "episode", None, ""), (1, "statement", 0, ""), (1, "llm.call", None, ""),
                        (1, "statement", 2, ""), (2, "skill.goal", None, ""), (3, "skill.execute", None, "skills")]
        execute = got["spans"][-1]
        assert execute["status"] == "error" and execute["error"] == "the gripper slipped"
        assert execute["start_ms"] == 340.0 and execute["ms"] == 900.0 and got["total_ms"] == 2000.0
        assert ["skill.action", "put_first_on_second"] in execute["shown"]
        assert got["spans"][0]["shown"] == [["teachbot.episode_id", "ep1"]]
        assert ask(ws)["spans"] == got["spans"]  # no id: the newest episode of the transcript
        assert ask(ws, episode="ep0")["trace_id"] == "b" * 32
        assert ask(ws, episode="ep1", known=got["version"]) == {"type": "trace", "episode": "ep1",
                                                               "version": got["version"], "unchanged": True}
        traced.spans.span("c", "memory.add", 4000, 5, "e" + "c" * 15, **{"teachbot.node": "memory"})  # written late
        later = ask(ws, episode="ep1", known=got["version"])
        assert "unchanged" not in later and [s["name"] for s in later["spans"]][-1] == "memory.add"
        assert ask(ws, episode="nothing-yet")["spans"] == []
        refused = ask(ws, episode="../../etc")
        assert refused["type"] == "note" and refused["error"] and "not an episode id" in refused["text"]
    over_http = httpx.get(traced.url + "trace.json", params={"episode": "ep0"})
    assert over_http.status_code == 200 and over_http.headers["content-security-policy"] == CSP
    assert [s["name"] for s in over_http.json()["spans"]][:2] == ["episode", "statement"]
    assert httpx.get(traced.url + "trace.json", params={"episode": "<script>"}).status_code == 400
    assert httpx.get(traced.url + "trace.json", headers={"host": "evil.example"}).status_code == 403


def test_a_running_episode_is_found_by_its_statements_at_its_transcript_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("TEACHBOT_TRACE_DIR", str(tmp_path / "traces"))
    spans = Spans(tmp_path / "traces")
    page = Page()
    try:
        for first, lines in TRANSCRIPT[:2]:
            page.hub.transcript("ep2", first, lines)
        assert page.hub.trace("ep2")["spans"] == []  # nothing written yet
        episode(spans, "d", "ghost", finished=False)  # a killed run's episode: its episode span never came
        episode(spans, "f", "ep1", at=2500)  # began after the ghost began: the ghost is not the running episode
        shifted = T0 + int(5000e6)
        for trace, source in (("7", "put_first_on_second('green block', 'blue bowl')"), ("9", "say('hi')")):
            spans.span(trace, "statement", 5001, 10, "r" * 16, **{"console.source": source, "console.line": 2})
        spans.span("8", "statement", 5001, 10, "r" * 16, **{"console.source": "wait_for_trigger()", "console.line": 4})
        assert page.hub.trace("ep2")["spans"] == []  # other code at line 2, or a line not published yet
        root = "0" * 16
        spans.span("a", "statement", 5000, 200, root, **{"console.source": "wait_for_trigger()", "console.line": 0})
        spans.span("a", "statement", 5210, 900, root,
                   **{"console.source": "put_first_on_second('red block', 'blue bowl')", "console.line": 2})
        running = page.hub.trace("ep2")
        assert running["trace_id"] == "a" * 32 and running["done"] is False
        assert [(s["depth"], s["line"]) for s in running["spans"]] == [(0, 0), (0, 2)]  # the root is not written yet
        spans.write(json.dumps({"trace_id": "a" * 32, "span_id": root, "parent_id": None, "name": "episode",
                                "start_ns": shifted - 1000, "end_ns": shifted + int(2000e6),
                                "attributes": {"teachbot.episode_id": "ep2"}}) + "\n")
        ended = page.hub.trace("ep2")
        assert ended["done"] is True and [(s["depth"], s["name"]) for s in ended["spans"]] == [
            (0, "episode"), (1, "statement"), (1, "statement")]
    finally:
        page.close()


def test_a_learning_span_names_its_running_episode(tmp_path):
    spans = Spans(tmp_path)
    spans.span("a", "statement", 0, 10, "0" * 16, **{"console.source": "wait_for_trigger()", "console.line": 0})
    spans.span("b", "statement", 20, 10, "1" * 16, **{"console.source": "wait_for_trigger()", "console.line": 0})
    spans.span("a", "improvement.serve", 50, 10, "2" * 16, **{"learning.episode_id": "ep5"})
    reader, lines = TraceReader(tmp_path), {0: ">>> wait_for_trigger()"}
    assert reader.spans("ep5", lines)[0][0].trace_id == "a" * 32  # named, though "b" is newer and matches too
    assert reader.spans("ep6", lines)[0][0].trace_id == "b" * 32


def test_a_statement_span_names_its_running_episode(tmp_path):
    """The console names the episode on each statement span: the running episode's trace is then known exactly, even
    where another trace (a killed run's, at the same line with the same code) is newer."""
    spans = Spans(tmp_path)
    spans.span("a", "statement", 0, 10, "0" * 16, **{"console.source": "wait_for_trigger()", "console.line": 0,
                                                     "teachbot.episode_id": "ep7"})
    spans.span("b", "statement", 20, 10, "1" * 16, **{"console.source": "wait_for_trigger()", "console.line": 0,
                                                      "teachbot.episode_id": "ep8"})
    reader, lines = TraceReader(tmp_path), {0: ">>> wait_for_trigger()"}
    assert reader.spans("ep7", lines)[0][0].trace_id == "a" * 32
    assert reader.spans("ep8", lines)[0][0].trace_id == "b" * 32
    assert reader.spans("ep9", lines)[0] == []  # both name another episode


def test_the_trace_reader_reads_a_day_file_again_only_where_it_grew(tmp_path):
    spans = Spans(tmp_path)
    episode(spans, "c", "ep1")
    reader = TraceReader(tmp_path)
    assert len(reader.spans("ep1", {})[0]) == 6 and reader.reads == 1
    for _ in range(3):
        reader.refresh()
    assert reader.reads == 1  # unchanged files are only stat'ed
    spans.write(json.dumps({"trace_id": "c" * 32, "span_id": "9" * 16, "parent_id": "e" + "c" * 15,
                            "name": "memory.add", "start_ns": T0, "end_ns": T0 + 1})[:40])  # a line half written
    assert len(reader.spans("ep1", {})[0]) == 6 and reader.reads == 2
    spans.write(json.dumps({"trace_id": "c" * 32, "span_id": "9" * 16, "parent_id": "e" + "c" * 15,
                            "name": "memory.add", "start_ns": T0, "end_ns": T0 + 1})[40:] + "\n")
    assert [r.name for r in reader.spans("ep1", {})[0]].count("memory.add") == 1 and reader.reads == 3
    spans.write("not a span\n")
    assert len(reader.spans("ep1", {})[0]) == 7  # a line that is not a span is skipped
    cut = rows(reader.spans("ep1", {})[0], limit=2)
    assert [row["name"] for row in cut["spans"]] == ["episode", "memory.add"] and cut["left_out"] == 5  # tree order
    day_file(tmp_path, T0).write_text("")  # cut (a new file in its place): read again from the start
    assert reader.spans("ep1", {}) == ([], False)


def test_the_trace_needs_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("TEACHBOT_TRACE_DIR", str(tmp_path))
    episode(Spans(tmp_path), "c", "ep1")
    page = Page(token=TOKEN)
    try:
        refused = httpx.get(page.url + "trace.json", params={"episode": "ep1"})
        assert refused.status_code == 401 and "spans" not in refused.text
        assert httpx.get(page.url + "trace.json", params={"episode": "ep1"},
                         cookies={COOKIE: "wrong-token-of-some-length"}).status_code == 401
        with httpx.Client(cookies={COOKIE: TOKEN}) as browser:
            allowed = browser.get(page.url + "trace.json", params={"episode": "ep1"})
        assert allowed.status_code == 200 and len(allowed.json()["spans"]) == 6
        with pytest.raises(InvalidStatus):
            page.ws()  # the page's own way to the spans: the websocket, refused without the cookie
    finally:
        page.close()
