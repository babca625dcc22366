"""One exception hierarchy; each error knows the exit code the CLI returns for it."""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# A measurement that ran and came out below its bar (`ernie-ops eval`'s pass rate): apart from 1, which says it could
# not be measured (model unreachable), so a script can tell a worse model from a broken run.
EXIT_BELOW = 3


class ErnieOpsError(Exception):
    """Base of every expected failure: the CLI prints it as one clear message, never a traceback."""

    exit_code = EXIT_FAILED


class UsageError(ErnieOpsError):
    """The operator asked for something that cannot be done as asked (bad port, bad flag)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong in the config file, located as precisely as YAML allows."""

    file: str
    line: int | None
    field: str
    value: object
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        shown = "" if self.value is _MISSING else f" = {self.value!r}"
        return f"{where}: {self.field}{shown}: {self.message}"


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING = _Missing()
MISSING = _MISSING


class ConfigError(UsageError):
    """The config cannot be used; carries every problem found, not only the first."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in the config:\n{lines}")


class ProbeFailed(ErnieOpsError):
    """A health tier (alive, model, completion) did not pass."""
