"""The worker program: RQ workers that forward deliveries, their pool, the reconcile
schedule. It never loads the web program (Flask, Werkzeug, gunicorn, spectree).

``build``: the Forwarder a worker composes; ``queue``: the queue, its data-only
serializer and the jobs a worker may run; ``rq_worker``: the RQ worker and the forwarding
job; ``schedule``: the reconcile job and its schedule; ``pool``: worker processes under
one supervisor.
"""
