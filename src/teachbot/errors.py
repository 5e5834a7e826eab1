"""One base error for everything the robot API reports, with a subclass per cause.

Errors the LLM (or a person) should read are raised as these; their message names the fix, and
``code`` maps onto teachbot_interfaces/SkillResult so nodes can carry them over actions.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Mirrors the constants of teachbot_interfaces/msg/SkillResult."""

    SUCCESS = 0
    UNKNOWN_OBJECT = 1
    OUT_OF_WORKSPACE = 2
    UNREACHABLE = 3
    LIMIT_EXCEEDED = 4
    GRASP_FAILED = 5
    PLACE_FAILED = 6
    NOT_HOLDING = 7
    ALREADY_HOLDING = 8
    BUSY = 9
    EMERGENCY_STOP = 10
    CANCELED = 11
    TIMEOUT = 12
    CONTROLLER_ERROR = 13
    INVALID_ARGUMENT = 14


class TeachbotError(Exception):
    """Base of every error the robot reports in words; the message says how to recover."""

    code: ErrorCode = ErrorCode.INVALID_ARGUMENT


class MemoryStoreError(TeachbotError):
    """Something cannot be stored, found or read back (an example, a lesson, a task log); the message says which and why."""


class ConfigError(TeachbotError):
    """A configuration file or value is missing or malformed."""


class SceneSpecError(TeachbotError):
    """A scene description (YAML or seed request) cannot be built."""


class InvalidArgumentError(TeachbotError):
    code = ErrorCode.INVALID_ARGUMENT


class ArgumentTooLarge(InvalidArgumentError):
    """A robot API argument or a say() over its size limit (the bounds block of config/interaction.yaml)."""


class UnknownObjectError(TeachbotError):
    code = ErrorCode.UNKNOWN_OBJECT


class OutOfWorkspaceError(TeachbotError):
    code = ErrorCode.OUT_OF_WORKSPACE


class UnreachableError(TeachbotError):
    code = ErrorCode.UNREACHABLE


class LimitExceededError(TeachbotError):
    code = ErrorCode.LIMIT_EXCEEDED


class GraspFailedError(TeachbotError):
    code = ErrorCode.GRASP_FAILED


class PlaceFailedError(TeachbotError):
    code = ErrorCode.PLACE_FAILED


class NotHoldingError(TeachbotError):
    code = ErrorCode.NOT_HOLDING


class AlreadyHoldingError(TeachbotError):
    code = ErrorCode.ALREADY_HOLDING


class BusyError(TeachbotError):
    code = ErrorCode.BUSY


class EmergencyStopError(TeachbotError):
    code = ErrorCode.EMERGENCY_STOP


class CanceledError(TeachbotError):
    code = ErrorCode.CANCELED


class MotionTimeoutError(TeachbotError):
    code = ErrorCode.TIMEOUT


class ControllerError(TeachbotError):
    code = ErrorCode.CONTROLLER_ERROR


class MotionNotApproved(TeachbotError):  # the console shows the class name: "MotionNotApproved: ..."
    """The person did not approve a motion (config/approval.yaml); it never started. The message holds the
    statement and what the person said instead of yes."""

    code = ErrorCode.CANCELED


class RobotTimeBudgetExceeded(TeachbotError):
    """The console's robot motions used up their time per snippet or per episode (config/sandbox.yaml)."""

    code = ErrorCode.LIMIT_EXCEEDED


_BY_CODE = {
    cls.code: cls
    for cls in (
        UnknownObjectError,
        OutOfWorkspaceError,
        UnreachableError,
        LimitExceededError,
        GraspFailedError,
        PlaceFailedError,
        NotHoldingError,
        AlreadyHoldingError,
        BusyError,
        EmergencyStopError,
        CanceledError,
        MotionTimeoutError,
        ControllerError,
        InvalidArgumentError,
    )
}


def error_from_code(code: int, message: str) -> TeachbotError:
    """Rebuild the error a node reported over an action result."""
    return _BY_CODE.get(ErrorCode(code), TeachbotError)(message)
