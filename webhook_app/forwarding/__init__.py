"""Forwarding successful syncs to Airflow datasets, exactly once per (sync, URI).

The worker side is not imported here, so the web process stays free of ``requests``.
"""
