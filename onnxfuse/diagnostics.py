"""Diagnostics: what onnxfuse tells the user about a model, and the error that carries them.

A diagnostic names a stable code (listed in onnxfuse/codes.py and docs/diagnostics.md), a
severity, where it happened (file, node, tensor), a one-sentence message and a hint.
Errors the user can cause are raised as `OnnxfuseError`, never as bare Python exceptions,
so the CLI can print them as sentences and exit 1.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Iterable, Sequence

from onnxfuse.codes import Code


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    code: Code
    severity: Severity
    message: str
    node: str | None = None
    tensor: str | None = None
    hint: str | None = None
    file: str | None = None

    @classmethod
    def error(cls, code: Code, message: str, **where) -> "Diagnostic":
        return cls(code, Severity.ERROR, message, **where)

    @classmethod
    def warning(cls, code: Code, message: str, **where) -> "Diagnostic":
        return cls(code, Severity.WARNING, message, **where)

    @classmethod
    def info(cls, code: Code, message: str, **where) -> "Diagnostic":
        return cls(code, Severity.INFO, message, **where)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def with_file(self, file: str | None) -> "Diagnostic":
        return dataclasses.replace(self, file=file) if file and not self.file else self

    def to_text(self) -> str:
        """One line, compiler style: `file: node 'n': error OFX201: message (hint: ...)`."""
        where = []
        if self.file:
            where.append(self.file)
        if self.node:
            where.append(f"node '{self.node}'")
        if self.tensor:
            where.append(f"tensor '{self.tensor}'")
        head = ": ".join(where)
        text = f"{self.severity.value} {self.code.id} [{self.code.name}]: {self.message}"
        if head:
            text = f"{head}: {text}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_json(self) -> dict:
        return {
            "code": self.code.id,
            "name": self.code.name,
            "severity": self.severity.value,
            "node": self.node,
            "tensor": self.tensor,
            "file": self.file,
            "message": self.message,
            "hint": self.hint,
        }

    def __str__(self) -> str:
        return self.to_text()


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.is_error for d in diagnostics)


def diagnostics_to_json(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps({"diagnostics": [d.to_json() for d in diagnostics]}, indent=2)


class OnnxfuseError(Exception):
    """A user-caused failure, carrying one or more diagnostics. The CLI prints them and exits 1."""

    def __init__(self, diagnostics: Diagnostic | Sequence[Diagnostic]):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("\n".join(d.to_text() for d in self.diagnostics))

    @classmethod
    def of(cls, code: Code, message: str, **where) -> "OnnxfuseError":
        return cls(Diagnostic.error(code, message, **where))

    def with_file(self, file: str | None) -> "OnnxfuseError":
        return OnnxfuseError([d.with_file(file) for d in self.diagnostics])
