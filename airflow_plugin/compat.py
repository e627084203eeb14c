"""The one place for imports and version checks that differ between Airflow 2.10+ and 3.x.

Airflow 3 moved the authoring API to the Task SDK (``airflow.sdk``) and renamed
datasets to assets; Airflow 2.10/2.11 keep the old paths.
"""

from __future__ import annotations

from typing import Any, cast

from airflow import __version__ as AIRFLOW_VERSION
from airflow.plugins_manager import AirflowPlugin
from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Airflow's (major, minor): every version check of ``airflow_plugin`` reads it here.
AIRFLOW_VERSION_INFO = tuple(int(p) for p in AIRFLOW_VERSION.split(".")[:2])
AIRFLOW_V_3 = AIRFLOW_VERSION_INFO >= (3, 0)
#: FastAPI plugin apps with the auth dependencies the plugin's view needs (Airflow 3.3+).
AIRFLOW_V_3_3 = AIRFLOW_VERSION_INFO >= (3, 3)

if AIRFLOW_V_3:
    from airflow.providers.standard.operators.python import ShortCircuitOperator
    from airflow.sdk import (
        Asset,
        BaseOperator,
        BaseOperatorLink,
        BaseSensorOperator,
        Connection,
        PokeReturnValue,
    )
    from airflow.sdk import Context as Context

    if AIRFLOW_VERSION_INFO >= (3, 2):
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSkipException,
        )
    else:  # Airflow 3.0 / 3.1: the Task SDK did not have them all yet
        from airflow.exceptions import (  # type: ignore[no-redef,attr-defined]
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSkipException,
        )
        from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined]
else:  # Airflow 2.10 / 2.11
    from airflow.datasets import Dataset as Asset  # type: ignore[no-redef]

    # Airflow 3 keeps these in airflow.exceptions only as deprecated aliases.
    from airflow.exceptions import (  # type: ignore[no-redef,attr-defined]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
    )
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined]
    from airflow.models import BaseOperator
    from airflow.models.baseoperatorlink import (  # type: ignore[no-redef]
        BaseOperatorLink,
    )
    from airflow.models.connection import Connection  # type: ignore[assignment]
    from airflow.operators.python import ShortCircuitOperator  # type: ignore[no-redef]
    from airflow.sensors.base import (  # type: ignore[no-redef]
        BaseSensorOperator,
        PokeReturnValue,
    )
    from airflow.utils.context import Context  # type: ignore[no-redef,attr-defined]


async def aget_connection(conn_id: str) -> Connection:
    """Fetch an Airflow connection without blocking the event loop (triggers need this)."""
    getter = getattr(BaseHook, "aget_connection", None)
    if getter is not None:  # Airflow 3
        return cast(Connection, await getter(conn_id))
    import asyncio

    return await asyncio.to_thread(BaseHook.get_connection, conn_id)


def default_deferrable() -> bool:
    """Return ``[operators] default_deferrable`` (False when unset), as providers do."""
    from airflow.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def run_after(context: Context) -> Any:
    """Return the run's ``run_after`` (Airflow 3) or its logical date (Airflow 2)."""
    dag_run = context.get("dag_run")
    value = getattr(dag_run, "run_after", None) if dag_run is not None else None
    return value if value is not None else context.get("logical_date")


__all__ = [
    "AIRFLOW_VERSION_INFO",
    "AIRFLOW_V_3",
    "AIRFLOW_V_3_3",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowPlugin",
    "AirflowSkipException",
    "Asset",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "BaseTrigger",
    "Connection",
    "Context",
    "PokeReturnValue",
    "ShortCircuitOperator",
    "TriggerEvent",
    "aget_connection",
    "default_deferrable",
    "run_after",
]
