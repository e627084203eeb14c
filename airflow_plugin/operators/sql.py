"""The DAG factory's SQL task: the common.sql operator, aware of Fivetran re-syncs.

After a resync the triggering event's ``extra.full_refresh`` is true and so is the
templates' ``full_refresh``, unless ``reset_allowed`` is false for a table the task
writes (then it runs incrementally, as dbt's ``full_refresh: false`` does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator

from fivetran_events.uris import dataset_uri

log = logging.getLogger(__name__)


def full_refresh_event(context: Mapping[str, Any], uris: Iterable[str]) -> Mapping[str, Any] | None:
    """The ``extra`` of a triggering event of ``uris`` (any, if none) asking for a full refresh."""
    wanted = set(uris)
    events = (
        context.get("triggering_asset_events") or context.get("triggering_dataset_events") or {}
    )
    for key in list(events):
        uri = getattr(key, "uri", None) or str(key)
        if wanted and uri not in wanted:
            continue
        for event in events[key]:
            extra = getattr(event, "extra", None) or {}
            if extra.get("full_refresh"):
                return extra
    return None


class FivetranSqlOperator(SQLExecuteQueryOperator):
    """Run SQL on a connection, with ``full_refresh`` in the template context."""

    ui_color = "#e8f1fb"

    template_fields = (*SQLExecuteQueryOperator.template_fields, "session_sql")

    def __init__(
        self,
        *,
        source_connectors: Iterable[str] = (),
        reset_allowed: bool = True,
        session_sql: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_connectors = list(source_connectors)
        self.reset_allowed = reset_allowed
        self.session_sql = list(session_sql)

    def execute(self, context: Any) -> Any:
        # One list runs in one session (DbApiHook.run), so session statements such as
        # USE, SET or ATTACH apply to the task's own statements.
        if isinstance(self.sql, str):
            self.sql = [*self.session_sql, *DbApiHook.split_sql_string(self.sql)]
        return super().execute(context)  # type: ignore[no-untyped-call]  # untyped in Airflow

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        context["full_refresh"] = self._full_refresh(context)
        super().render_template_fields(context, jinja_env)

    def _full_refresh(self, context: Mapping[str, Any]) -> bool:
        uris = [dataset_uri(c) for c in self.source_connectors]
        extra = full_refresh_event(context, uris)
        if extra is None:
            return False
        what = (
            f"sync {extra.get('sync_id')} of connector {extra.get('connector_id')} after a re-sync"
        )
        if not self.reset_allowed:
            self.log.warning(
                "full refresh requested by %s REFUSED: reset_allowed = false "
                "for a table this task writes; running incrementally",
                what,
            )
            return False
        self.log.info("full refresh requested by %s: templates see full_refresh = true", what)
        return True
