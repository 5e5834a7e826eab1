#!/usr/bin/env python3
"""Console overhead per step, LLM generation excluded: prompt build, completion parsing, the sandbox
round trip and one robot call to the no-op skill (``wait`` with duration 0) through its ROS action.

The model is scripted (it answers at once; its own latency is subtracted anyway). Episodes of 20
statements each, so the prompt grows as in a real session. Goal: median under 15 ms, p99 under 60 ms.

The skills node and the client run in this process (InProcessStack without the sim); the arm is the sim node
in a child process, as a robot's driver runs beside the stack (real time, the arm at rest, camera off): every
skill, the no-op wait too, reads the arm's joint states before it runs, so a stack without one cannot answer.

Usage: python bench/console_step.py [--runs 300] [--smoke]
"""

from __future__ import annotations

import _common as C

C.setup()

GOAL_MEDIAN_MS = 15.0
GOAL_P99_MS = 60.0
EPISODE = 20
READY_TIMEOUT = 120.0  # a guard against a hang, not a goal: a loaded machine may take long to start nodes
WARMUP = 10


def main() -> None:
    args = C.parser(__doc__.splitlines()[0], runs=300, smoke={"runs": 10}).parse_args()
    from teachbot.console.prompt import PromptBuilder
    from teachbot.console.session import ConsoleSession, SessionConfig
    from teachbot.language.registry import ApiFunction, RobotApi
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.stack import InProcessStack
    from teachbot.sandbox.executor import SandboxExecutor

    arm = C.spawn_arm()
    stack = InProcessStack(sim=False)
    executor = None
    steps_ms: list[float] = []
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
            if i % EPISODE == 0:
                model = ScriptedModel(respond=lambda prompt: f"r{len(prompt) % 997} = noop_skill()\nr")
                session = ConsoleSession(executor, model, prompts, config=config)
            seconds, outcome = C.timed(session.step)
            if outcome.result is None or outcome.result.error is not None:
                raise RuntimeError(f"step {i}: {outcome.result}")
            if i >= WARMUP:
                steps_ms.append((seconds - outcome.completion.latency) * 1e3)
    finally:
        if executor is not None:
            executor.close()
        C.stop_stack(stack)
        C.stop_all()
        C.remove_logs()
    stats = C.summary(steps_ms, 3)
    p99 = round(C.percentile(steps_ms, 99), 3)
    C.say(f"console step overhead: median {stats['median']} ms, p99 {p99} ms over {len(steps_ms)} steps")
    C.emit({
        "benchmark": "console_step", "unit": "ms", "runs": len(steps_ms), "median": stats["median"], "p99": p99,
        **C.goal_fields(stats["median"], GOAL_MEDIAN_MS), "goal_p99": GOAL_P99_MS, "meets_goal_p99": p99 < GOAL_P99_MS,
        "steps": stats, "arm": f"sim node in a child process {C.ARM_PARAMS}", "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
