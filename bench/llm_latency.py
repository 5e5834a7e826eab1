#!/usr/bin/env python3
"""LLM time to action: streaming with early execution against waiting for the stop string.

A fake OpenAI-compatible endpoint on loopback (test/fake_openai_server.py) answers like a base model
continuing the console transcript: a ~15-token statement, ~40 tokens of invented console output,
then the next ``>>>``; 0.4 s to the first token, 40 tokens/s. Each episode has 10 steps with 10
different statements; the prompt is a fixed static part of ~1,500 tokens, ``SYSTEM_END``, and a
transcript that grows each step by the previous statement and its short output.

(a) ``stream: true`` with ``until=first_statement_complete``: the stream is closed as soon as the
first statement is complete. (b) a whole reply, cut by the server at the stop string ``>>>``.
Time to action = from the request to the statement read out of the reply, ready to execute.

Goals: (a) at least 2x faster to action than (b); (a) generates at most the statement's tokens + 5;
each step's chat messages (system + user text, as sent) start with the previous step's for >= 80 %.

Usage: python bench/llm_latency.py [--runs 2] [--steps 10] [--smoke]
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from typing import Any

import _common as C

C.ensure_importable()

FIRST_TOKEN_S = 0.4
TOKENS_PER_S = 40.0
GOAL_SPEEDUP = 2.0
GOAL_EXTRA_TOKENS = 5
GOAL_PREFIX_SHARE = 0.80

STATEMENTS = (
    "blocks = [name for name in get_obj_names() if name.endswith('block')]",
    "say('I will put the red block into the blue bowl first.')",
    "pos = get_obj_pos('red block'); print([round(v, 3) for v in pos])",
    "put_first_on_second('red block', 'blue bowl')",
    "bowls = [name for name in get_obj_names() if name.endswith('bowl')]",
    "say(f'I can see {len(bowls)} bowls on the table right now.')",
    "put_first_on_second('green block', 'yellow bowl')",
    "print(is_obj_visible('green block'), is_obj_visible('gray cup'))",
    "say('Both blocks are in their bowls. Anything else for me?')",
    "request = wait_for_trigger(); print(request['text'][:48])",
)
OUTPUTS = (  # what the console really printed: the transcript grows by these
    "['red block', 'green block']", "", "[0.112, -0.452, 0.021]", "'success'", "['blue bowl', 'yellow bowl']", "",
    "'success'", "True False", "", "put the green cup on the plate",
)
INVENTED = (  # what a base model predicts as output: about 40 tokens, dropped by the console
    "['red block', 'green block', 'orange block', 'purple block', 'white block', 'pink block', 'gray block', 'black block']\n"
    "{'type': 'dialog', 'text': 'yes'}",
    "{'type': 'dialog', 'text': 'ok, go ahead please'}\n{'type': 'dialog', 'text': 'and then the green one into the yellow bowl'}\n"
    "{'type': 'dialog', 'text': 'thanks'}",
    "[0.112, -0.452, 0.021]\n[0.245, -0.331, 0.021]\n[-0.081, -0.512, 0.021]\n[0.3, -0.3, 0.02]\n[0.1, -0.5, 0.02]\n"
    "[0.2, -0.4, 0.02]\n[0.0, -0.6, 0.02]",
    "'success'\n{'type': 'dialog', 'text': 'great, now please put the green block into the yellow bowl as well'}\n'success'\n"
    "{'type': 'dialog', 'text': 'good'}",
    "['blue bowl', 'yellow bowl', 'green bowl', 'red bowl', 'white bowl', 'black bowl', 'gray bowl', 'pink bowl']\n"
    "{'type': 'dialog', 'text': 'ok'}",
    "{'type': 'dialog', 'text': 'yes, there are two bowls; put the green block in the yellow one next'}\n'success'\nNone\n"
    "{'type': 'dialog', 'text': 'ok'}",
    "'success'\n{'type': 'dialog', 'text': 'thank you, that is exactly what I wanted to see on the table'}\n'success'\n"
    "{'type': 'dialog', 'text': 'now stop'}",
    "True False\nTrue True\nFalse False\n['green block', 'yellow bowl', 'red block', 'blue bowl', 'gray cup', 'white plate']\n"
    "True\nFalse\nTrue",
    "{'type': 'dialog', 'text': 'no, that is all for now, thank you very much, robot'}\nNone\n{'type': 'dialog', 'text': 'bye'}\n"
    "{'type': 'dialog', 'text': 'see you'}",
    "put the green cup on the plate and then tell me what you did\n{'type': 'dialog', 'text': 'thanks, robot'}\nNone\n"
    "{'type': 'dialog', 'text': 'go on'}",
)


def load_fake_server() -> Any:
    """test/fake_openai_server.py, imported by path (the test helpers are not a package)."""
    spec = importlib.util.spec_from_file_location("fake_openai_server", C.REPO / "test" / "fake_openai_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def static_part(tokens: int = 1500) -> str:
    """The prompt's fixed instructions: a robot API listing of about ``tokens`` tokens (4 characters each)."""
    lines = ["You control a robot arm through a Python console. Answer with the next statement only.",
             "The robot API is already imported:", ""]
    verbs = ("get", "put", "say", "move", "open", "close", "find", "pick", "place", "wait", "look", "push")
    things = ("obj_pos", "obj_names", "gripper", "bowl", "block", "trigger", "camera", "table", "drawer", "cup")
    i = 0
    while sum(len(line) + 1 for line in lines) < tokens * 4:
        verb, thing = verbs[i % len(verbs)], things[(i // len(verbs)) % len(things)]
        doc = f"{verb.title()} the {thing.replace('_', ' ')} named ``name`` at ``speed`` (0..1); returns 'success' or why not."
        lines += [f"def {verb}_{thing}_{i}(name: str, speed: float = 0.5) -> str:", f'    """{doc}"""']
        i += 1
    return "\n".join(lines)


def prompts(base: Any) -> list[str]:
    """The 10 prompts of an episode: static part, SYSTEM_END, the scene and the transcript so far."""
    head = "objects = ['red block', 'green block', 'blue bowl', 'yellow bowl']\n{'type': 'dialog', 'text': 'sort the blocks'}\n>>> "
    out, transcript = [], head
    for statement, output in zip(STATEMENTS, OUTPUTS):
        out.append(f"{static_part()}{base.SYSTEM_END}{transcript}")
        transcript += statement + "\n" + (output + "\n" if output else "") + ">>> "
    return out


def reply_for(body: dict[str, Any]) -> str:
    """The base model's continuation: the step's statement, invented output, the next prompt and statement."""
    text = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
    step = min(text.count("\n>>> ") - 1, len(STATEMENTS) - 1)
    return f"{STATEMENTS[step]}\n{INVENTED[step]}\n>>> {STATEMENTS[(step + 1) % len(STATEMENTS)]}\n"


def common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    p = C.parser(__doc__.splitlines()[0], runs=2, smoke={"runs": 1, "steps": 3})
    p.add_argument("--steps", type=int, default=len(STATEMENTS), help=f"steps timed per episode (default {len(STATEMENTS)})")
    args = p.parse_args()
    from teachbot.language.reply import first_statement_complete, read_reply
    from teachbot.llm import base
    from teachbot.llm.openai_model import OpenAIModel

    fake = load_fake_server()
    episode = prompts(base)
    results: dict[str, dict[str, list[float]]] = {m: {"seconds": [], "tokens": [], "extra": []} for m in ("streaming", "waiting")}
    shares, prompt_tokens = [], []
    with fake.FakeOpenAIServer() as server:
        server.respond = reply_for
        server.first_token_delay, server.token_delay = FIRST_TOKEN_S, 1.0 / TOKENS_PER_S
        models = {"streaming": OpenAIModel("base-model", base_url=server.base_url, stream=True, retries=0),
                  "waiting": OpenAIModel("base-model", base_url=server.base_url, stream=False, retries=0)}
        previous = ""
        for step, prompt in enumerate(episode):
            sent = "".join(m["content"] for m in models["waiting"].messages(prompt))
            prompt_tokens.append(base.estimate_tokens(sent))
            if step:
                shares.append(common_prefix(previous, sent) / len(sent))
            previous = sent
        for run in range(args.runs):
            for mode, model in models.items():
                for step, prompt in enumerate(episode[:args.steps]):
                    until = first_statement_complete if mode == "streaming" else None
                    t0 = time.perf_counter()
                    completion = model.generate(prompt, until=until)
                    statements = read_reply(completion.text).statements
                    seconds = time.perf_counter() - t0
                    assert statements and statements[0] == STATEMENTS[step], (mode, step, completion.text, statements)
                    statement_tokens = len(fake.pieces(STATEMENTS[step]))
                    results[mode]["seconds"].append(seconds)
                    results[mode]["tokens"].append(completion.completion_tokens)
                    results[mode]["extra"].append(completion.completion_tokens - statement_tokens)
                timed = len(episode[:args.steps])
                C.say(f"run {run + 1} {mode:9s}: median {statistics.median(results[mode]['seconds'][-timed:]):.3f} s to action, "
                      f"{statistics.median(results[mode]['tokens'][-timed:]):.0f} tokens generated per step")
    stream_s = statistics.median(results["streaming"]["seconds"])
    wait_s = statistics.median(results["waiting"]["seconds"])
    speedup = wait_s / stream_s
    extra = statistics.median(results["streaming"]["extra"])
    share = statistics.median(shares)
    statement_tokens = statistics.median(len(fake.pieces(s)) for s in STATEMENTS)
    C.say(f"time to action: streaming {stream_s:.3f} s, waiting for '>>>' {wait_s:.3f} s: {speedup:.2f}x faster (goal {GOAL_SPEEDUP}x)")
    C.say(f"tokens generated per step: streaming {statistics.median(results['streaming']['tokens']):.0f}, "
          f"waiting {statistics.median(results['waiting']['tokens']):.0f}, statement {statement_tokens:.0f} "
          f"(streaming extra {extra:.0f}, goal <= {GOAL_EXTRA_TOKENS})")
    C.say(f"prompt: median {statistics.median(prompt_tokens):.0f} tokens per step, {share:.1%} an unchanged prefix of "
          f"the previous step's (goal >= {GOAL_PREFIX_SHARE:.0%})")
    meets = {"speedup": speedup >= GOAL_SPEEDUP, "extra_tokens": extra <= GOAL_EXTRA_TOKENS, "prefix_share": share >= GOAL_PREFIX_SHARE}
    C.emit({
        "benchmark": "llm_latency", "unit": "s", "runs": args.runs, "steps": len(results["streaming"]["seconds"]),
        "median": round(stream_s, 4), "median_waiting": round(wait_s, 4),
        "speedup": round(speedup, 3), "goal_speedup": GOAL_SPEEDUP, "ratio_speedup": round(speedup / GOAL_SPEEDUP, 4),
        "tokens_streaming": statistics.median(results["streaming"]["tokens"]),
        "tokens_waiting": statistics.median(results["waiting"]["tokens"]), "tokens_statement": statement_tokens,
        "extra_tokens": extra, "goal_extra_tokens": GOAL_EXTRA_TOKENS, "ratio_extra_tokens": round(extra / GOAL_EXTRA_TOKENS, 4),
        "prompt_tokens": statistics.median(prompt_tokens), "prefix_share": round(share, 4), "goal_prefix_share": GOAL_PREFIX_SHARE,
        "ratio_prefix_share": round(share / GOAL_PREFIX_SHARE, 4), "meets_goal": all(meets.values()), "meets": meets,
        "streaming": C.summary(results["streaming"]["seconds"]), "waiting": C.summary(results["waiting"]["seconds"]),
        "endpoint": {"first_token_s": FIRST_TOKEN_S, "tokens_per_s": TOKENS_PER_S}, "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
