"""The robot console: the sandbox that runs LLM-written code, and the console session around it."""
