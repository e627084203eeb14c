"""bench/dropin.py's two variants of each example DAG: only the import lines and the
DAG id differ, so the providers run the same DAG side by side."""

from __future__ import annotations

import difflib

import pytest

from bench.dropin import DAGS, EXAMPLES, variant


class TestVariants:
    @pytest.mark.parametrize(("filename", "dag_id"), list(EXAMPLES.items()))
    def test_astronomers_variant_changes_the_imports_and_the_dag_id_only(
        self, filename: str, dag_id: str
    ) -> None:
        ours, our_id = variant((DAGS / filename).read_text(), dag_id, theirs=False)
        theirs, their_id = variant((DAGS / filename).read_text(), dag_id, theirs=True)
        assert (our_id, their_id) == (f"{dag_id}_ours", f"{dag_id}_theirs")
        changed = [
            line[1:]
            for line in difflib.unified_diff(ours.splitlines(), theirs.splitlines(), n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")
        ]
        assert changed, "the variants are the same"
        for line in changed:
            assert "import Fivetran" in line or f'"{dag_id}_' in line, line
        assert "airflow_plugin" not in theirs and "fivetran_provider_async" not in ours
        assert "from fivetran_provider_async.sensors import FivetranSensor" in theirs or (
            "FivetranSensor" not in ours
        )
