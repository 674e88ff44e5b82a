"""The one exception type memwall raises for bad input, and how it names the culprit.

Every loader (units, hierarchy files, trace files, machine profiles, networks,
measurements) raises :class:`InputError` with the file, the line or field, and the
reason, so the CLI can print one clear line and exit non-zero instead of a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a file, line or field that cannot be used, and why."""

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file) + (f":{self.line}" if self.line is not None else ""))
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.field:
            where.append(f"field '{self.field}'")
        return (": ".join(where) + ": " if where else "") + self.reason

    def within(
        self, *, file: str | None = None, field_prefix: str | None = None, line: int | None = None
    ) -> InputError:
        """The same error, placed inside a file and/or under an enclosing field."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(
            self.reason,
            file=self.file or file,
            line=self.line if self.line is not None else line,
            field=field,
        )


class RetiredField(InputError):
    """A key memwall no longer reads (said with what replaces it). Listed after a file's
    other problems: a retired key is easy to fix and seldom the reason a profile is wrong."""


def real_first(errors: list[InputError]) -> list[InputError]:
    """``errors`` with every :class:`RetiredField` moved after the others, order kept."""
    return sorted(errors, key=lambda err: isinstance(err, RetiredField))
