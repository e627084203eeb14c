"""Exceptions of the Airflow side; each says when it is raised."""

from __future__ import annotations

from .compat import AirflowException


class FivetranSyncFailed(AirflowException):
    """Raised by the sensor when the history decides FAIL for the run's target.

    An ``AirflowException``, not ``AirflowFailException``, on purpose: task retries
    apply, and a retry after a later successful sync passes.
    """
