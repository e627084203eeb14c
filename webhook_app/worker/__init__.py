"""The worker program: RQ workers that forward deliveries, their pool, the reconcile
schedule. It never loads the web program (Flask, Werkzeug, gunicorn, spectree).

``build`` composes the Forwarder; ``queue`` holds the data-only jobs; ``rq_worker`` runs them;
``schedule`` queues reconciles; ``pool`` supervises worker processes.
"""
