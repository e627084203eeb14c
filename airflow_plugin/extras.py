"""The optional extras parts of the Airflow side need, and the error naming a missing one.

``[airflow]`` serves the provider, plugin, sensor and triggers; the DAG factory also needs
``[sql]`` (sqlglot, common.sql): without them it fails naming the extra, not "No module named".
"""

from __future__ import annotations

from importlib.util import find_spec

from fivetran_events import __version__
from fivetran_events.exceptions import MissingExtraError

#: What each extra brings that the Airflow side imports, as module names.
EXTRA_MODULES = {"sql": ("sqlglot", "airflow.providers.common.sql")}


def missing_extra(extra: str, part: str, module: str) -> MissingExtraError:
    wheel = f"fivetran_events-{__version__}-py3-none-any.whl"
    return MissingExtraError(
        f"{part} needs the [{extra}] extra, which is not installed (no module {module!r}): "
        f"install our wheel with it, e.g. pip install 'dist/{wheel}[airflow,{extra}]' "
        "(docs/install.md)",
        name=module,
    )


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require_extra(extra: str, part: str) -> None:
    """Raise MissingExtraError unless every module ``extra`` brings can be imported."""
    for module in EXTRA_MODULES[extra]:
        if not _installed(module):
            raise missing_extra(extra, part, module)
