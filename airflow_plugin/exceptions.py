"""Exceptions of the Airflow side; each says when it is raised."""

from __future__ import annotations

from .compat import AirflowException


class FivetranSyncFailed(AirflowException):
    """Raised by the sensor when the history decides FAIL for the run's target.

    An ``AirflowException``, not ``AirflowFailException``, on purpose: task retries
    apply, and a retry after a later successful sync passes.
    """


class FivetranHistoryUnavailable(Exception):
    """Raised when the history's Redis stayed unreachable for a whole retry window.

    Raised by a poke, by the deferrable sensor's first check, and by ``execute_complete``
    when the trigger reports the same, so Airflow treats it alike in every mode: as an
    error in ``poke`` (``silent_fail`` keeps waiting, ``never_fail`` skips, otherwise
    the task fails and ``retries`` apply). Deliberately not an ``AirflowException``:
    Airflow skips an ``AirflowException`` from ``execute_complete`` under ``soft_fail``
    but not one from ``poke``, and an outage is no answer that may skip a run.
    """


class ConnectorNameError(ValueError):
    """Raised when a sensor's ``connector_name`` names no recorded connector, or several.

    Its message names the candidates (id and group), so the DAG author can add
    ``destination_name`` or switch to ``connector_id``. A ValueError: the DAG's input is
    wrong, though retries apply (a connector becomes known with its first webhook).
    """
