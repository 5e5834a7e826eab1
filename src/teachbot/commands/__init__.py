"""Subcommands of the ``teachbot`` tool, one module each.

Every module defines ``register(subparsers)`` (adds its parser and sets ``func=run`` on it) and
``run(args) -> int`` (the exit status). ``teachbot.cli`` lists the modules in COMMANDS."""
