"""The Code-as-Policies tabletop benchmark spec (config/benchmarks/cap_tabletop.yaml) as typed data.

The file is kept byte-equal to ../shared/benchmarks/cap_tabletop.yaml, whose success rules are prose;
the tolerances are read out of that prose here, and a rule whose wording changes fails loudly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.paths import config_path

SPLITS = ("SA-SI", "UA-SI", "UA-UI")
# split -> (attributes, instructions): "seen" or "unseen"
SPLIT_PARTS = {"SA-SI": ("seen", "seen"), "UA-SI": ("unseen", "seen"), "UA-UI": ("unseen", "unseen")}
DIRECTIONS = {"top": (0.0, 1.0), "bottom": (0.0, -1.0), "left": (-1.0, 0.0), "right": (1.0, 0.0)}
CORNERS = ("top left corner", "top right corner", "bottom left corner", "bottom right corner")


@dataclass(frozen=True)
class SuccessRules:
    """Tolerances of the benchmark's success rules, metres (slopes are |dy/dx|)."""

    on_point: float
    on_bowl: float
    on_block: float
    a_little_max: float
    a_lot_min: float
    line_distance: float
    horizontal_max_slope: float
    diagonal_slope: tuple[float, float]
    vertical_min_slope: float


@dataclass(frozen=True)
class Attributes:
    """The attribute values of one side (seen or unseen): key -> allowed values."""

    values: dict[str, tuple[str, ...]]

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self.values[key]

    @property
    def colors(self) -> tuple[str, ...]:
        return self.values["color"]


@dataclass(frozen=True)
class Benchmark:
    named_points: dict[str, tuple[float, float]]
    normalized_area: dict[str, tuple[float, float]]
    attributes: dict[str, Attributes]  # "seen" / "unseen"
    instructions: dict[str, tuple[str, ...]]  # "seen" / "unseen" -> templates
    success: SuccessRules
    splits: tuple[str, ...]
    source: str = ""

    @classmethod
    def load(cls, path: str | Path | None = None) -> Benchmark:
        path = Path(path) if path else config_path("benchmarks", "cap_tabletop.yaml")
        raw = load_yaml(path)
        try:
            ws = raw["workspace"]
            pair = lambda v: (float(v[0]), float(v[1]))  # noqa: E731
            splits = tuple(raw["protocol"]["splits"])
            if set(splits) != set(SPLITS):
                raise ValueError(f"protocol.splits {list(splits)} are not {list(SPLITS)}")
            return cls(
                named_points={k: pair(v) for k, v in ws["named_points"].items()},
                normalized_area={k: pair(v) for k, v in ws["normalized_area"].items()},
                attributes={side: Attributes({k: tuple(v) for k, v in raw["attributes"][side].items()}) for side in ("seen", "unseen")},
                instructions={side: tuple(raw["instructions"][side]) for side in ("seen", "unseen")},
                success=_success_rules(raw["success"]),
                splits=splits,
                source=str(path),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError(f"{path}: malformed benchmark spec ({exc}); compare with ../shared/benchmarks/cap_tabletop.yaml") from None

    def split_attributes(self, split: str) -> Attributes:
        return self.attributes[_split_parts(split)[0]]

    def split_instructions(self, split: str) -> tuple[str, ...]:
        return self.instructions[_split_parts(split)[1]]


def _split_parts(split: str) -> tuple[str, str]:
    if split not in SPLIT_PARTS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return SPLIT_PARTS[split]


_NUMBER = r"([0-9]*\.?[0-9]+)"


def _number(text: str, pattern: str, rule: str) -> float:
    match = re.search(pattern.replace("N", _NUMBER), text)
    if not match:
        raise ValueError(f"success.{rule}: cannot read a tolerance from {text!r} (expected /{pattern}/)")
    return float(match.group(1))


def _success_rules(raw: dict) -> SuccessRules:
    line = str(raw["line"])
    diag = re.search(rf"{_NUMBER}\.\.{_NUMBER} diagonal", line)
    if not diag:
        raise ValueError(f"success.line: cannot read the diagonal slope range from {line!r}")
    return SuccessRules(
        on_point=_number(str(raw["on_point"]), r"xy distance < N", "on_point"),
        on_bowl=_number(str(raw["on_bowl"]), r"xy distance < N and above the bowl", "on_bowl"),
        on_block=_number(str(raw["on_block"]), r"xy distance < N and above the block", "on_block"),
        a_little_max=_number(str(raw["a_little"]), r"distance <= N", "a_little"),
        a_lot_min=_number(str(raw["a_lot"]), r"distance > N", "a_lot"),
        line_distance=_number(line, r"within N of the line", "line"),
        horizontal_max_slope=_number(line, r"\|slope\| < N horizontal", "line"),
        diagonal_slope=(float(diag.group(1)), float(diag.group(2))),
        vertical_min_slope=_number(line, r"> N vertical", "line"),
    )
