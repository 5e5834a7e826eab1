"""Task memory for multi-task work (the multi-task memory paper): procedural memory (task specifications),
declarative memory (per-task logs of actions and the world after them) and working memory (per task:
reminders, state, relevant objects), for a coordinator -- the interaction LLM -- that switches between
tasks and resumes them. Pure Python, no ROS: the memory node serves it, the console calls it."""

from teachbot.taskmemory.log import LogRecord, TaskLogStore
from teachbot.taskmemory.memory import MEMORY_FUNCTIONS, ConsoleTaskMemory, TaskMemory, without_memory
from teachbot.taskmemory.specs import Goal, ObjectInfo, TaskMemoryConfig, TaskSpec, prompt_block, steps
from teachbot.taskmemory.working import LogExtractor, TaskRun, WorkerLLM, WorkerStats, WorkingMemory

__all__ = [
    "MEMORY_FUNCTIONS", "ConsoleTaskMemory", "Goal", "LogExtractor", "LogRecord", "ObjectInfo", "TaskLogStore",
    "TaskMemory", "TaskMemoryConfig", "TaskRun", "TaskSpec", "WorkerLLM", "WorkerStats", "WorkingMemory", "prompt_block", "steps",
    "without_memory",
]
