"""The provider's hooks, one module per service they reach.

``history``: ``FivetranEventsRedisHook``, the Redis that holds the sync history
(connection type ``fivetran_events``). ``fivetran_api``: ``FivetranApiHook``, Fivetran's
REST API (connection type ``fivetran``).
"""
