#!/usr/bin/env python3
"""Console overhead per step, LLM generation excluded: prompt build, completion parsing, the sandbox
round trip and one robot call to the no-op skill (``wait`` with duration 0) through its ROS action.

The model is scripted (it answers at once; its own latency is subtracted anyway). Episodes of 20
statements each, so the prompt grows as in a real session. Goal: median under 15 ms, p99 under 60 ms.

Tracing (teachbot.tracing, on by default): episodes alternate between traced ones (an episode span, each step's
statement, LLM call, skill goal and skill execution spans, written as JSON Lines by the configured batch processor
into a temporary folder) and untraced ones (the OpenTelemetry no-op tracer: what ``tracing.enabled: false``
costs); ``tracing_added_ms`` is the difference of their medians. Goal: under 1 ms.

The skills node and the client run in this process (InProcessStack without the sim); the arm is the sim node
in a child process, as a robot's driver runs beside the stack (real time, the arm at rest, camera off): every
skill, the no-op wait too, reads the arm's joint states before it runs, so a stack without one cannot answer.

Usage: python bench/console_step.py [--runs 300] [--smoke]
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import _common as C

C.setup()

GOAL_MEDIAN_MS = 15.0
GOAL_P99_MS = 60.0
GOAL_TRACING_MS = 1.0
EPISODE = 20
READY_TIMEOUT = 120.0  # a guard against a hang, not a goal: a loaded machine may take long to start nodes
WARMUP = 10


def main() -> None:
    args = C.parser(__doc__.splitlines()[0], runs=300, smoke={"runs": 10}).parse_args()
    # episodes alternate traced and untraced: short ones when there are few steps, so both kinds are measured
    episode_steps = max(2, min(EPISODE, (WARMUP + args.runs) // 4))
    from opentelemetry import trace

    from teachbot.console.prompt import PromptBuilder
    from teachbot.console.session import ConsoleSession, SessionConfig
    from teachbot.language.registry import ApiFunction, RobotApi
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.stack import InProcessStack
    from teachbot.sandbox.executor import SandboxExecutor
    from teachbot.tracing import EPISODE_SPAN, span
    from teachbot.tracing import spans as tracing_spans
    from teachbot.tracing.setup import configure, flush

    traces = tempfile.TemporaryDirectory(prefix="teachbot-bench-traces-")
    os.environ["TEACHBOT_TRACE_DIR"] = traces.name  # before the stack configures this process's tracing
    configure("bench-console-step")
    traced_tracer = tracing_spans._tracer
    untraced = trace.NoOpTracer()  # what a process without a provider (tracing.enabled: false) hands out
    arm = C.spawn_arm()
    stack = InProcessStack(sim=False)
    executor = None
    steps_ms: list[float] = []
    by_tracing: dict[bool, list[float]] = {True: [], False: []}
    episode = contextlib.ExitStack()
    try:
        try:
            client = stack.start(wait=READY_TIMEOUT)
            C.wait_for_arm(client, READY_TIMEOUT)
        except Exception:
            C.check_alive(arm)  # its log's tail when the arm died
            raise
        api = RobotApi("bench", (ApiFunction("noop_skill", "() -> str", "The no-op skill: returns its outcome at once."),))

        def noop_skill() -> str:
            result = client.call("wait", duration=0.0)
            if not result.success:  # the step's error below: a failed call is not a measurement
                raise RuntimeError(f"wait(duration=0) failed: {result.message}")
            return "success"

        executor = SandboxExecutor(api.bind({"noop_skill": noop_skill}))
        prompts = PromptBuilder(api, "You control a robot.\n\n{api}\n")
        config = SessionConfig(max_rounds=EPISODE + 1, loop_repeats=EPISODE + 1)
        for i in range(WARMUP + args.runs):
            if i % episode_steps == 0:
                episode.close()
                traced = (i // episode_steps) % 2 == 0  # episodes alternate, so drift of the machine hits both alike
                tracing_spans._tracer = traced_tracer if traced else (lambda: untraced)
                episode.enter_context(span(EPISODE_SPAN))
                model = ScriptedModel(respond=lambda prompt: f"r{len(prompt) % 997} = noop_skill()\nr")
                session = ConsoleSession(executor, model, prompts, config=config)
            seconds, outcome = C.timed(session.step)
            if outcome.result is None or outcome.result.error is not None:
                raise RuntimeError(f"step {i}: {outcome.result}")
            if i >= WARMUP:
                steps_ms.append((seconds - outcome.completion.latency) * 1e3)
                by_tracing[traced].append(steps_ms[-1])
    finally:
        episode.close()
        tracing_spans._tracer = traced_tracer
        if executor is not None:
            executor.close()
        C.stop_stack(stack)
        C.stop_all()
        C.remove_logs()
    flush()
    written = sum(len(path.read_text().splitlines()) for path in Path(traces.name).glob("*.jsonl"))
    traces.cleanup()
    stats = C.summary(steps_ms, 3)
    p99 = round(C.percentile(steps_ms, 99), 3)
    on, off = C.summary(by_tracing[True], 3), C.summary(by_tracing[False], 3)
    added = round(on["median"] - off["median"], 3) if on["median"] is not None and off["median"] is not None else None
    C.say(f"console step overhead: median {stats['median']} ms, p99 {p99} ms over {len(steps_ms)} steps; tracing adds "
          f"{added} ms (median {on['median']} ms traced, {off['median']} ms untraced; {written} spans written)")
    C.emit({
        "benchmark": "console_step", "unit": "ms", "runs": len(steps_ms), "median": stats["median"], "p99": p99,
        **C.goal_fields(stats["median"], GOAL_MEDIAN_MS), "goal_p99": GOAL_P99_MS, "meets_goal_p99": p99 < GOAL_P99_MS,
        "tracing_added_ms": added, "goal_tracing_ms": GOAL_TRACING_MS, "meets_goal_tracing": added is not None and added < GOAL_TRACING_MS,
        "traced_steps": on, "untraced_steps": off, "spans_written": written,
        "steps": stats, "arm": f"sim node in a child process {C.ARM_PARAMS}", "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
