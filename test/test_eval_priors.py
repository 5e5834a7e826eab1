"""Equal priors (issue 27, item 2): every method starts from the same examples, and nothing unseen is in them.

The core paper's splits keep some attributes (colours, corners, directions, ...) and some instructions out of
everything a method starts from, so UA-SI and UA-UI measure generalisation. This test reads every method's static
prompt (the console's system part, CaP's few-shot prompt, HELPER's reflection prompt) and every tabletop seed
example, and fails on any unseen attribute value or any unseen instruction (config/benchmarks/cap_tabletop.yaml).
"""

from __future__ import annotations

import re

import pytest

from teachbot.config import load_yaml
from teachbot.console.prompt import PromptBuilder
from teachbot.evaluation.baselines import CapPrompt, cap_example, seed_programs
from teachbot.evaluation.harness import UNBOUND
from teachbot.language.registry import RobotApi
from teachbot.paths import config_path, share_dir

BENCHMARK = load_yaml(config_path("benchmarks", "cap_tabletop.yaml"))
# an unseen direction is a word in everyday use too ("that's right"): it counts where it names a direction
DIRECTION = r"(to|from|on) the {}\b"
# the words of an unseen instruction that no seen one has (its <placeholders> are attributes, checked above)
UNSEEN_INSTRUCTION_WORDS = {
    "put all the blocks in different corners": r"different corners",
    "put the blocks in the bowls with mismatched colors": r"mismatched colou?rs",
    "stack all the blocks on the <corner_or_side>": r"\bstack",
    "pick up the <block> and place it <magnitude> to the <direction> of the <bowl>": r"\ba (little|lot) to the\b",
    "pick up the <block> and place it in the corner <distance> to the <bowl>": r"\bin the corner (closest|farthest)",
    "put all the blocks in a <line> line": r"\b(in|into) a (\w+ )?line\b",
}


def texts() -> dict[str, str]:
    api = RobotApi.load("tabletop").without(UNBOUND)
    prompts = share_dir() / "prompts"
    found = {"console prompt": PromptBuilder.for_profile(api).base(), "cap prompt": CapPrompt(api, seed_programs()).static,
             "helper prompt": (prompts / "helper_reflect.txt").read_text()}
    for path in sorted((share_dir() / "memory_store" / "tabletop").glob("*.txt")):
        found[f"seed {path.name}"] = path.read_text()
    return found


def unseen_patterns() -> dict[str, str]:
    patterns = {}
    for key, values in BENCHMARK["attributes"]["unseen"].items():
        for value in values:
            words = re.escape(value)
            patterns[f"{key} {value!r}"] = DIRECTION.format(words) if key == "direction" else rf"\b{words}\b"
    assert set(UNSEEN_INSTRUCTION_WORDS) == set(BENCHMARK["instructions"]["unseen"]), "a new unseen instruction: add its words"
    patterns.update({f"instruction {k!r}": v for k, v in UNSEEN_INSTRUCTION_WORDS.items()})
    return patterns


@pytest.mark.parametrize("name", sorted(texts()))
def test_nothing_unseen_in_what_a_method_starts_from(name):
    text = texts()[name]
    hits = {what: m.group(0) for what, pattern in unseen_patterns().items() if (m := re.search(pattern, text, re.I))}
    assert not hits, f"{name} holds what the unseen splits keep out: {hits}"


def test_the_scanner_finds_what_it_looks_for():
    """The patterns are not vacuous: each unseen attribute and instruction is found in its own words."""
    patterns = unseen_patterns()
    samples = {"color 'cyan'": "put the cyan block", "direction 'right'": "place it to the right of the bowl",
               "corner_or_side 'bottom side'": "on the bottom side", "line 'diagonal'": "a diagonal line",
               "instruction 'stack all the blocks on the <corner_or_side>'": "stack the blocks"}
    for what, sample in samples.items():
        assert re.search(patterns[what], sample, re.I), what
    assert not re.search(patterns["direction 'right'"], "that's right, the top right corner", re.I)


def test_cap_starts_from_exactly_the_console_seeds():
    """The CaP prompt holds no examples of its own: its few-shot part is the tabletop seeds, each written as a program,
    so cap and the console start from the same knowledge (dynamic-cap and helper retrieve those same seeds)."""
    template = (share_dir() / "prompts" / "cap_tabletop.txt").read_text()
    assert not re.search(r"^objects = \[", template, re.M) and "{examples}" in template, "the CaP prompt has examples again"
    api = RobotApi.load("tabletop").without(UNBOUND)
    static = CapPrompt(api, seed_programs()).static
    seeds = sorted((share_dir() / "memory_store" / "tabletop").glob("*.txt"))
    assert len(seed_programs()) == len(seeds)
    for path in seeds:
        program = cap_example(path.read_text())
        assert program.startswith("objects = [") and program in static, path.name
        first = next(line for line in program.splitlines() if line.startswith("# "))
        assert static.count(first) >= 1, path.name
    assert "(none here" in CapPrompt(api).static and not re.search(r"^objects = \[", CapPrompt(api).static, re.M)
