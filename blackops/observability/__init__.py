"""What an operator sees of a running service: Prometheus metrics, structured logs and
OpenTelemetry spans (docs/operations-guide.md, decisions M1-M12).

Everything starts from one place: the journal store tells :class:`Observability` of every
transaction this process commits (``EventStore.add_commit_observer``); the events it held
carry their execution context (operation or instance id, type, tenant, attempt, fencing
token, worker, traceparent), and become counters, log lines and spans (``facts``). What
never reaches the journal (lease renewals and losses, executor restarts) is told through
``Signals``, which the worker holds via its ``Runtime``. Gauges that a projection or the
due-work index knows are read when Prometheus scrapes (``metrics``).

Imports: ``journal``, ``projections``, ``domain`` and ``blackops.runtime``; never the
application, the HTTP edge or the CLI (they import this). ``prometheus_client`` is
imported only by ``metrics`` and ``server``, ``opentelemetry`` only by ``tracing`` and
only when it is installed: ``import blackops`` and the CLI's read commands load neither.
"""
