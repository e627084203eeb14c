"""Import-and-parse smoke test of our installed wheel in one Airflow (.ci/airflow-matrix.sh).

Run with the Airflow venv's Python, AIRFLOW_HOME set: ``airflow providers list`` names the
provider, ``airflow plugins`` the plugin, and Airflow's DagBag parses a DAG with the
sensor (deferrable) without an import error; on Airflow 3 also a DAG factory folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SENSOR_DAG = """
from datetime import datetime, timezone

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG

from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("fte_smoke_sensor", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    FivetranDateTimeSensor(task_id="wait", connector_id="smoke_connector", deferrable=True)
"""


def cli_json(*args: str) -> Any:
    out = subprocess.run(  # our own interpreter, fixed arguments
        [sys.executable, "-m", "airflow", *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out[out.index("[") :])  # past any line Airflow prints first


def parse(folder: Path) -> list[str]:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow before 3.1
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(folder), safe_mode=False)  # examples: LOAD_EXAMPLES=False
    assert not bag.import_errors, bag.import_errors
    return sorted(bag.dag_ids)


def main() -> None:
    examples = Path(sys.argv[1])
    providers = cli_json("providers", "list")
    ours = [p for p in providers if p.get("package_name") == "fivetran-events"]
    assert ours, f"airflow providers list: no fivetran-events in {providers}"
    plugins = cli_json("plugins")
    assert any(p.get("name") == "fivetran_events" for p in plugins), f"airflow plugins: {plugins}"
    home = Path(os.environ["AIRFLOW_HOME"])
    dags = home / "smoke_dags"
    dags.mkdir(exist_ok=True)
    (dags / "fte_smoke_sensor.py").write_text(SENSOR_DAG)
    parsed = parse(dags)
    assert parsed == ["fte_smoke_sensor"], parsed
    from airflow import __version__

    if int(__version__.split(".")[0]) >= 3:  # the DAG factory builds Task SDK DAGs
        shutil.copytree(examples, home / "examples", dirs_exist_ok=True)
        factory = home / "examples" / "dags"
        for path in factory.glob("*.py"):
            if path.name != "sales_sql.py":
                path.unlink()
        parsed += parse(factory)
    print(f"provider {ours[0].get('version')}, plugin fivetran_events, parsed {parsed}")


if __name__ == "__main__":
    main()
