"""Durable workflows (DurableWorkflow §2–§3): the authors' API, the callers' binding, code
providers, execution contexts, the engine and its executor processes. May import
``blackops.runtime``, ``blackops.ids``, ``blackops.failures``, projections, journal, domain;
never operations or control."""
