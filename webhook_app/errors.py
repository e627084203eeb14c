"""API errors: one exception class, one handler, JSON bodies that say what to fix."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Raised by a view for any error the client caused (or 503 when a dependency is down)."""

    def __init__(self, status_code: int, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "error", "error": self.message}
        if self.field:
            body["field"] = self.field
        return body
