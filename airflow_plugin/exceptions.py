"""Exceptions of the Airflow side; each says when it is raised."""

from __future__ import annotations

from .compat import AirflowException


class FivetranSyncFailed(AirflowException):
    """Raised when the history decides FAIL for the run's target (not
    ``AirflowFailException``: a retry after a later successful sync passes)."""


class FivetranHistoryUnavailable(Exception):
    """Raised when the history's Redis stayed unreachable for a whole retry window (in
    ``poke`` in every mode); not an ``AirflowException``, which Airflow skips from
    ``execute_complete`` under ``soft_fail``: an outage is no answer to skip a run on."""


class ConnectorNameError(ValueError):
    """Raised when a ``connector_name`` names no connector, or several; a ValueError (the
    DAG's input is wrong), though retries apply: a connector is known from its first webhook."""


class ViewError(Exception):
    """Raised by the "Fivetran syncs" view (ui/app.py) for a request it cannot answer (an
    unknown connector, a bad parameter); rendered as a small page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
