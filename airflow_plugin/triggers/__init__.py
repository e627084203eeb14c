"""The provider's triggers, one module per wait.

``decision``: the deferred sensor's. ``sync``: a sync request's (``FivetranSyncOperator``).
``watcher``: an ``AssetWatcher``'s, turning recorded syncs into asset events (Airflow
3.3+). Nothing is imported here: the watcher's module needs Airflow 3.3, the others do
not. ``_wakeups`` is what they share: one pub/sub listener and one pool per triggerer.
"""
