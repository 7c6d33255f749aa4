"""Witnesses and monitors (docs/audit.md): the C2SP tlog-witness server an outside party runs
(``state``, ``server``), the service's side that pushes its checkpoints to witnesses and keeps
their cosignatures (``push``, ``cosigned``), and the auditor's monitor (``monitor``).

May import ``replay`` (the formats), ``journal`` and ``projections``; never the HTTP app, the
CLI or the application (the witness must run without the product's service around it).
"""
