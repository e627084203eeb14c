"""tests/unit: pure functions and in-process objects; no Redis, no Airflow, no servers.

The whole folder runs in seconds. A test that needs a process belongs in
tests/integration (Redis, gunicorn, stand-ins) or tests/system (a real Airflow).
"""
