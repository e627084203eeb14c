"""The "Fivetran syncs" view: every connector's syncs and decisions in Airflow's UI.

A FastAPI app that the ``AirflowPlugin`` mounts in Airflow's API server (3.3+) under
``links.URL_PREFIX``, behind Airflow's own login. Server-rendered HTML with inline SVG:
nothing to build with npm. ``app.py`` routes and checks requests, ``queries.py`` reads
the history (bounded), ``render.py`` turns what it read into the page.
"""

from __future__ import annotations

from typing import Any


class LazyApp:
    """An ASGI app that builds the view on its first request.

    The plugin module is imported by every Airflow process that wants its macros, task
    processes included; building the app there would import FastAPI and Airflow's API
    security for nothing. Only the API server ever calls this.
    """

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from .app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)
