"""Episode traces with OpenTelemetry: one trace per console episode, spans from every node that worked on it.

``configure`` (teachbot.tracing.setup) installs the process's tracer provider from config/tracing.yaml: a JSONL
file per day (teachbot.tracing.jsonl) and, with one config key, OTLP to a collector. ``span``, ``trace_parent`` and
``record_span`` (teachbot.tracing.spans) are what the code calls; they cost next to nothing when tracing is off.
The trace context crosses the ROS boundary as the W3C ``traceparent`` text in each goal's and request's
``trace_parent`` field. ``teachbot trace show`` and the web page read the files back (teachbot.tracing.tree).
"""

from teachbot.tracing.spans import (
    EPISODE_ID,
    EPISODE_SPAN,
    attribute_text,
    current_trace_id,
    evaluation_run,
    fail,
    record_span,
    set_attributes,
    span,
    trace_parent,
)

__all__ = ["EPISODE_ID", "EPISODE_SPAN", "attribute_text", "current_trace_id", "evaluation_run", "fail", "record_span", "set_attributes",
           "span", "trace_parent"]
