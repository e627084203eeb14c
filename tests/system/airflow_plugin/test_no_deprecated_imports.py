"""The plugin imports nothing that the installed Airflow marks deprecated.

Airflow 3 still answers the old ``airflow.exceptions`` names but warns (a
``FutureWarning``) on every such import, and the warning names the importing line: a
user's DAG parse would print it for a name we chose. A fresh interpreter imports every
module of the plugin and reports the deprecation warnings raised from our own files.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import airflow_plugin

# Airflow routes warnings to its logs when it configures itself (captureWarnings):
# import it first, so that the recording below is the last word on showwarning.
PROBE = """
import importlib, json, sys, warnings
import airflow.configuration
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in sys.argv[1:]:
        importlib.import_module(name)
ours = [
    f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}"
    for w in caught
    if issubclass(w.category, (DeprecationWarning, FutureWarning))
    and "airflow_plugin" in w.filename.replace("\\\\", "/")
]
print(json.dumps(ours))
"""


def test_plugin_modules_import_without_deprecation_warnings() -> None:
    names = [m.name for m in pkgutil.walk_packages(airflow_plugin.__path__, "airflow_plugin.")]
    assert "airflow_plugin.compat" in names
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
