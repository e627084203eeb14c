"""Logging for the server, the worker and the CLI: one JSON object a line, or text for people.

All goes through stdlib ``logging``, formatted by structlog: gunicorn's and RQ's lines match ours.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

import structlog

from fivetran_events.settings import log_settings

if TYPE_CHECKING:
    from flask import Flask

#: ``auto`` (JSON unless stderr is a terminal), ``json`` or ``console``; the commands that
#: start other processes set it for them.
FORMAT_ENV = "FIVETRAN_EVENTS_LOG_FORMAT"

#: Keys whose values are never written, whoever logs them (belt and braces: nothing of
#: ours logs a secret, but a library's ``extra`` might).
_SECRET_KEY = re.compile(r"(?i)(password|secret|token|authorization|signature|credential)")
#: ``user:password@`` in a URL (a Redis or Airflow URL in an error message).
_URL_PASSWORD = re.compile(r"(?<=://)([^/@:\s]*):[^/@\s]+@")
#: Marks the handler this module installs, so configuring twice replaces it.
_HANDLER_NAME = "fivetran-events"


@functools.lru_cache(maxsize=1024)
def _secret_named(key: str) -> bool:
    """Whether a field's name says it holds a secret (a line's keys repeat: ask once each)."""
    return bool(_SECRET_KEY.search(key)) and not key.startswith("_")


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Drop secret-looking fields and passwords in URLs before anything is rendered."""
    for key, value in list(event_dict.items()):
        if value is not None and _secret_named(key):
            event_dict[key] = "[redacted]"
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = _URL_PASSWORD.sub(r"\1:[redacted]@", value)
    return event_dict


_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.ExtraAdder(),
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    _redact,
]


def wants_json(stream: TextIO | None = None) -> bool:
    """JSON unless asked for text, or ``auto`` and the stream is a terminal."""
    choice = log_settings().log_format
    if choice in ("json", "console"):
        return choice == "json"
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return not (isatty and isatty())


def formatter(as_json: bool) -> structlog.stdlib.ProcessorFormatter:
    """A logging formatter rendering stdlib and structlog records alike."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    tail: list[Any] = [structlog.processors.format_exc_info] if as_json else []
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
    )


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Write to whatever ``sys.stderr`` is when a record comes (a test runner swaps it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure(stream: TextIO | None = None) -> None:
    """Send every logger's records to ``stream`` (stderr) in the chosen format; idempotent."""
    handler = logging.StreamHandler(stream) if stream else _StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter(wants_json(stream or sys.stderr)))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(log_settings().log_level)
    _skip_unused_record_fields()
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _skip_unused_record_fields() -> None:
    """Stop the stdlib filling in record fields no line of ours shows (logging HOWTO,
    "Optimization")."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def bind(**ids: str | None) -> None:
    """Attach ids (request, connector, sync, delivery) to every line logged from here on."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in ids.items() if v})


def clear() -> None:
    structlog.contextvars.clear_contextvars()


@contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Bind ids for the block only (a worker's attempt), whatever was bound before."""
    tokens = structlog.contextvars.bind_contextvars(**{k: v for k, v in ids.items() if v})
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


#: A client's X-Request-Id is kept only if it looks like an id (no log injection).
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def init_app(app: Flask) -> None:
    """Give every request an id (the client's ``X-Request-Id`` or a new one) on its lines
    and in its response; configure logging unless something did (gunicorn's workers)."""
    import uuid

    from flask import g, request

    if not any(h.get_name() == _HANDLER_NAME for h in logging.getLogger().handlers):
        configure()

    @app.before_request
    def bind_request_id() -> None:
        clear()
        given = request.headers.get("X-Request-Id", "")
        g.request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        bind(request_id=g.request_id)

    @app.after_request
    def echo_request_id(resp: Any) -> Any:
        rid = g.get("request_id")
        if rid:
            resp.headers["X-Request-Id"] = rid
        return resp


def __getattr__(name: str) -> Any:
    """``webhook_app.logs.GunicornLogger``, the class gunicorn's configs name, built (and
    gunicorn imported) only when gunicorn asks: the worker and the CLI log through this
    module too, and never load gunicorn (PEP 562)."""
    if name == "GunicornLogger":
        return _gunicorn_logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _gunicorn_logger() -> type:
    from gunicorn import glogging

    class GunicornLogger(glogging.Logger):  # type: ignore[misc]
        """gunicorn's logger with our format; the access record carries what the app bound for
        the request, so it is a webhook delivery's one line, outcome included."""

        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            _skip_unused_record_fields()
            fmt = formatter(wants_json())
            for log in (self.error_log, self.access_log):
                for handler in log.handlers:
                    handler.setFormatter(fmt)

        def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
            if not self.cfg.accesslog:
                clear()
                return
            self.access_log.info(
                "request",
                extra={
                    "method": environ.get("REQUEST_METHOD"),
                    "path": environ.get("PATH_INFO"),
                    "status": resp.status_code,
                    "bytes": getattr(resp, "sent", None),
                    "duration_us": request_time.seconds * 1_000_000 + request_time.microseconds,
                    "remote": environ.get("REMOTE_ADDR"),
                    "user_agent": environ.get("HTTP_USER_AGENT"),
                },
            )
            clear()  # the request is over: gunicorn's next lines are not its

    return GunicornLogger
