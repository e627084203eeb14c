"""Exceptions of the Airflow side; each says when it is raised."""

from __future__ import annotations

from .compat import AirflowException


class FivetranSyncFailed(AirflowException):
    """Raised when the history decides FAIL for the run's target.

    Not ``AirflowFailException``: a retry after a later successful sync passes.
    """


class FivetranHistoryUnavailable(Exception):
    """Raised when the history's Redis stayed unreachable for a whole retry window.

    Airflow treats it as an error in ``poke`` in every mode (``silent_fail`` keeps
    waiting, ``never_fail`` skips, otherwise ``retries`` apply). Not an
    ``AirflowException``: Airflow skips one from ``execute_complete`` under ``soft_fail``,
    and an outage is no answer that may skip a run.
    """


class ConnectorNameError(ValueError):
    """Raised when a ``connector_name`` names no connector, or several (named in the message).

    A ValueError: the DAG's input is wrong, though retries apply (a connector becomes
    known with its first webhook).
    """
