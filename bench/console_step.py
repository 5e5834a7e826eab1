#!/usr/bin/env python3
"""Console overhead per step, LLM generation excluded: prompt build, completion parsing, the sandbox
round trip and one robot call to the no-op skill (``wait`` with duration 0) through its ROS action.

The model is scripted (it answers at once; its own latency is subtracted anyway). Episodes of 20
statements each, so the prompt grows as in a real session. Goal: median under 15 ms, p99 under 60 ms.

Usage: python bench/console_step.py [--runs 300]
"""

from __future__ import annotations

import _common as C

C.setup()

GOAL_MEDIAN_MS = 15.0
GOAL_P99_MS = 60.0
EPISODE = 20


def main() -> None:
    args = C.parser(__doc__.splitlines()[0], runs=300).parse_args()
    from teachbot.console.prompt import PromptBuilder
    from teachbot.console.registry import ApiFunction, RobotApi
    from teachbot.console.sandbox import SandboxExecutor
    from teachbot.console.session import ConsoleSession, SessionConfig
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.stack import InProcessStack

    stack = InProcessStack(sim=False)
    client = stack.start()
    api = RobotApi("bench", (ApiFunction("noop_skill", "() -> str", "The no-op skill: returns its outcome at once."),))

    def noop_skill() -> str:
        result = client.call("wait", duration=0.0)
        return "success" if result.success else result.message

    executor = SandboxExecutor(api.bind({"noop_skill": noop_skill}))
    prompts = PromptBuilder(api, "You control a robot.\n\n{api}\n")
    config = SessionConfig(max_rounds=EPISODE + 1, loop_repeats=EPISODE + 1)
    steps_ms: list[float] = []
    try:
        for i in range(10 + args.runs):
            if i % EPISODE == 0:
                model = ScriptedModel(respond=lambda prompt: f"r{len(prompt) % 997} = noop_skill()\nr")
                session = ConsoleSession(executor, model, prompts, config=config)
            seconds, outcome = C.timed(session.step)
            assert outcome.result is not None and outcome.result.error is None, outcome.result
            if i >= 10:  # warm-up
                steps_ms.append((seconds - outcome.completion.latency) * 1e3)
    finally:
        executor.close()
        C.stop_stack(stack)
    stats = C.summary(steps_ms, 3)
    p99 = round(C.percentile(steps_ms, 99), 3)
    C.say(f"console step overhead: median {stats['median']} ms, p99 {p99} ms over {len(steps_ms)} steps")
    C.emit({
        "benchmark": "console_step", "unit": "ms", "runs": len(steps_ms), "median": stats["median"], "p99": p99,
        **C.goal_fields(stats["median"], GOAL_MEDIAN_MS), "goal_p99": GOAL_P99_MS, "meets_goal_p99": p99 < GOAL_P99_MS,
        "steps": stats, "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
