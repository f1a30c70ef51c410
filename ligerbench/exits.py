"""How a command ends: its exit code, and the errors the machinery raises for the CLI to turn into
one (ligerbench/cli.py alone maps them; nothing under ligerbench/ but the commands and the CLI
imports Typer).

    raise UsageError("unknown sweep 'x'; choose from tokens, vocab", "--sweep")   # exit 2, option named
    raise UnusableInput("cannot write the run folder under /ro: ...")            # exit 2, one line
    raise Refused()            # exit 1: the reason is already on the terminal (a named provider cannot load)
    return ExitCode.OK

The codes are the same for every command (docs/usage.md, "Exit codes and run manifests").
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # every check passed
    FAILED = 1  # a check failed or errored, or nothing was checked for what was asked
    USAGE = 2  # a usage error or unusable input (I/O errors included), said in one line
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, the shell's own convention
    TERMINATED = 143  # SIGTERM (`timeout`, CI runners, `kill`): 128 + 15, so a caller can tell it from Ctrl-C

    @property
    def status(self) -> str:
        """The word the --json output gives for it."""
        return _STATUS[self]

    @classmethod
    def of(cls, code: int) -> ExitCode:
        """A code as the enum; an unknown one reads as FAILED (never as a pass)."""
        try:
            return cls(code)
        except ValueError:
            return cls.FAILED


_STATUS = {
    ExitCode.OK: "passed",
    ExitCode.FAILED: "failed",
    ExitCode.USAGE: "unusable",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "interrupted",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while a run works (ligerbench/lifecycle.py). A kind of
    KeyboardInterrupt so that whatever cleans up after Ctrl-C does the same for it (the launcher
    kills the ranks' session: ligerbench/distributed/launch.py)."""


class CommandError(Exception):
    """A command cannot go on; `code` is its exit status and the message says why."""

    code = ExitCode.FAILED


class UsageError(CommandError):
    """The command line asks for something that does not exist or does not fit (exit 2, before any
    run folder is made); `option` is the option it is about, as the user typed it."""

    code = ExitCode.USAGE

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


class UnusableInput(CommandError):
    """A file the command must read or write cannot be used (exit 2, said in one line)."""

    code = ExitCode.USAGE


class Refused(CommandError):
    """Exit 1 with the reason already printed: a run that would check nothing of what was asked."""

    code = ExitCode.FAILED
