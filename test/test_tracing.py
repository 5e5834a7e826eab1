"""Episode traces without ROS (teachbot.tracing): spans nest, cross a boundary as traceparent text, are written as
JSON Lines by day and read back, and `teachbot trace` prints them. The spans themselves go through the real
OpenTelemetry SDK into an in-memory exporter (one provider per process: conftest's trace folder is untouched).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from teachbot.errors import ConfigError
from teachbot.tracing import EPISODE_ID, EPISODE_SPAN, record_span, span, trace_parent
from teachbot.tracing.jsonl import JsonlSpanExporter, read_spans, span_dict
from teachbot.tracing.setup import TracingConfig
from teachbot.tracing.spans import set_attribute_limit
from teachbot.tracing.tree import episode_trace, episodes, ordered, render


class Spans:
    """A private tracer provider whose spans land in memory (the global provider belongs to the process)."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "test"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))

    def dicts(self) -> list[dict]:
        return [span_dict(s) for s in self.memory.get_finished_spans()]


@pytest.fixture()
def spans(monkeypatch: pytest.MonkeyPatch) -> Spans:
    made = Spans()
    monkeypatch.setattr("teachbot.tracing.spans._tracer", lambda: made.provider.get_tracer("teachbot"))
    return made


def test_spans_nest_and_a_server_joins_through_traceparent(spans: Spans) -> None:
    carried: list[str] = []
    with span(EPISODE_SPAN, {EPISODE_ID: "ep1"}), span("statement", {"console.source": "pick('red block')"}):
        carried.append(trace_parent())
        record_span("llm.call", 0.25, {"llm.role": "interaction", "llm.tokens_in": 120})

    def server() -> None:  # another thread has no current span: only the carried text links it
        with span("skill.execute", {"skill.action": "pick"}, parent=carried[0], node="skills"):
            pass

    worker = threading.Thread(target=server)
    worker.start()
    worker.join()
    by_name = {d["name"]: d for d in spans.dicts()}
    root, statement = by_name[EPISODE_SPAN], by_name["statement"]
    assert root["parent_id"] is None and root["attributes"][EPISODE_ID] == "ep1"
    assert statement["parent_id"] == root["span_id"]
    assert by_name["llm.call"]["parent_id"] == statement["span_id"]
    assert by_name["skill.execute"]["parent_id"] == statement["span_id"]
    assert by_name["skill.execute"]["attributes"]["teachbot.node"] == "skills"
    assert len({d["trace_id"] for d in spans.dicts()}) == 1
    llm = by_name["llm.call"]
    assert llm["end_ns"] - llm["start_ns"] == 250_000_000  # the backend's measured latency, not the span's own time
    assert carried[0].startswith("00-" + root["trace_id"] + "-" + statement["span_id"])


def test_an_exception_marks_the_span_failed_and_is_raised_on(spans: Spans) -> None:
    with pytest.raises(ValueError, match="bad"), span("statement"):
        raise ValueError("bad")
    (failed,) = spans.dicts()
    assert failed["status"] == "error" and "bad" in failed["status_message"]
    assert failed["events"][0]["name"] == "exception"


def test_long_texts_are_cut_and_values_kept_typed(spans: Spans) -> None:
    set_attribute_limit(40)
    try:
        with span("statement", {"console.source": "x" * 100, "ids": ("a", "b"), "scores": [0.5, 1], "none": None,
                                "object": Path("/p")}):
            pass
    finally:
        set_attribute_limit(4000)
    attributes = spans.dicts()[0]["attributes"]
    assert attributes["console.source"] == "x" * 40 + "... (60 more characters)"
    assert attributes["ids"] == ["a", "b"] and attributes["scores"] == [0.5, 1.0] and "none" not in attributes
    assert attributes["object"] == "/p"


def test_no_trace_parent_outside_a_recording_span() -> None:
    assert trace_parent() == ""


def write_episode(spans: Spans, tmp_path: Path, episode: str) -> None:
    with span(EPISODE_SPAN, {EPISODE_ID: episode}), span("statement", {"console.source": "say('hi')", "console.result": "None"}):
        time.sleep(0.02)  # the call began after the statement did
        record_span("llm.call", 0.01, {"llm.role": "interaction", "llm.model": "m"})
    JsonlSpanExporter(tmp_path).export(spans.memory.get_finished_spans())
    spans.memory.clear()


def test_jsonl_round_trip_pick_an_episode_and_render_it(spans: Spans, tmp_path: Path) -> None:
    write_episode(spans, tmp_path, "first0000001")
    write_episode(spans, tmp_path, "second000002")
    (day,) = list(tmp_path.glob("*.jsonl"))
    with day.open("a") as torn:
        torn.write('{"trace_id": "abc", "span_')  # a writer killed mid-line
    records = read_spans(tmp_path)
    assert [e.episode_id for e in episodes(records)] == ["first0000001", "second000002"]
    newest = episode_trace(records)
    assert {r.attributes.get(EPISODE_ID) for r in newest} == {"second000002", None}
    chosen = episode_trace(records, "first")
    assert [(depth, r.name) for depth, r in ordered(chosen)] == [(0, EPISODE_SPAN), (1, "statement"), (2, "llm.call")]
    text = render(chosen)
    lines = text.splitlines()
    assert lines[0].split()[3] == EPISODE_SPAN and "episode_id='first0000001'" in lines[0]
    assert "    llm.call" in lines[2] and "role='interaction'" in lines[2]
    with pytest.raises(ConfigError, match="no episode matches 'nope'.*first0000001, second000002"):
        episode_trace(records, "nope")
    with pytest.raises(ConfigError, match="no episode traces found"):
        episode_trace([])


def test_trace_command_lists_and_shows(spans: Spans, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from teachbot.cli import main

    write_episode(spans, tmp_path, "abcdef123456")
    assert main(["trace", "list", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("abcdef123456 ")
    assert main(["trace", "show", "abc", "--dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line.split()[3] for line in shown] == [EPISODE_SPAN, "statement", "llm.call"]
    assert main(["trace", "show", "--json", "--dir", str(tmp_path)]) == 0
    assert [json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()] == [EPISODE_SPAN, "statement", "llm.call"]
    assert main(["trace", "show", "zzz", "--dir", str(tmp_path)]) == 2
    assert "no episode matches 'zzz'" in capsys.readouterr().err


def test_config_where_the_files_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "tracing.yaml"
    config.write_text("tracing:\n  directory: /somewhere\n  otlp_endpoint: http://127.0.0.1:4318/v1/traces\n")
    monkeypatch.delenv("TEACHBOT_TRACE_DIR", raising=False)
    loaded = TracingConfig.load(config)
    assert loaded.trace_dir() == Path("/somewhere") and loaded.endpoint() == "http://127.0.0.1:4318/v1/traces"
    monkeypatch.setenv("TEACHBOT_TRACE_DIR", str(tmp_path / "env"))
    assert loaded.trace_dir() == tmp_path / "env"
    config.write_text("tracing:\n  directory: ''\n")
    monkeypatch.delenv("TEACHBOT_TRACE_DIR")
    monkeypatch.setenv("TEACHBOT_RUN_DIR", str(tmp_path / "run"))
    assert TracingConfig.load(config).trace_dir() == tmp_path / "run" / "traces"
    config.write_text("tracing:\n  enabled: 'yes'\n")
    with pytest.raises(ConfigError, match="tracing.enabled must be true or false"):
        TracingConfig.load(config)
    config.write_text("tracing:\n  exporter: zipkin\n")
    with pytest.raises(ConfigError, match="unknown key"):
        TracingConfig.load(config)


def test_the_shipped_config_traces_by_default() -> None:
    shipped = TracingConfig.load()
    assert shipped.enabled and shipped.otlp_endpoint == ""



def test_each_evaluation_run_is_a_trace_named_in_its_result(spans: Spans) -> None:
    """RAIDER's benchmark as the example (the other evaluations wrap their runs the same way): each case is the root
    span of its own trace, with the checker's LLM call under it, and its score names that trace."""
    from teachbot.evaluation.raider_benchmark import checker_factory, run_cases
    from teachbot.evaluation.raider_cases import load_cases
    from teachbot.llm.scripted import ScriptedModel

    cases = [c for c in load_cases() if c.world == "tabletop"][:2]
    model = ScriptedModel(respond=lambda prompt: '{"final_response": "none", "explanation": "free", "grounding": []}',
                          name="interaction:scripted", stop=())
    scores = run_cases(cases, checker_factory("visual-obs", model))
    made = spans.dicts()
    runs = [d for d in made if d["name"] == "evaluation.run"]
    assert [r["attributes"]["evaluation.task"] for r in runs] == [c.id for c in cases]
    assert all(r["parent_id"] is None and r["attributes"]["evaluation.kind"] == "raider" for r in runs)
    assert [s.trace_id for s in scores] == [r["trace_id"] for r in runs] and len({s.trace_id for s in scores}) == 2
    for run in runs:
        calls = [d for d in made if d["name"] == "llm.call" and d["trace_id"] == run["trace_id"]]
        assert len(calls) == 1 and calls[0]["parent_id"] == run["span_id"]
        assert calls[0]["attributes"]["llm.role"] == "interaction"


def test_otlp_sends_the_spans_to_a_collector(spans: Spans) -> None:
    """tracing.otlp_endpoint's exporter (OTLP/HTTP, protobuf) against a collector stand-in on loopback."""
    import http.server

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from teachbot.tracing.setup import _otlp

    received: list[tuple[str, bytes]] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with span(EPISODE_SPAN, {EPISODE_ID: "otlp00000001"}):
            pass
        exporter = _otlp(f"http://127.0.0.1:{server.server_port}/v1/traces")
        assert exporter.export(spans.memory.get_finished_spans()).name == "SUCCESS"
    finally:
        server.shutdown()
    (path, body), = received
    sent = ExportTraceServiceRequest.FromString(body)
    (one,) = [s for r in sent.resource_spans for scope in r.scope_spans for s in scope.spans]
    assert path == "/v1/traces" and one.name == EPISODE_SPAN
    assert {a.key: a.value.string_value for a in one.attributes}[EPISODE_ID] == "otlp00000001"
