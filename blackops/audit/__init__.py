"""Signed checkpoints, proofs and receipts of the journal (docs/audit.md).

``checkpoints.CheckpointService`` signs and journals C2SP checkpoints (one signer at a time
across processes) and calls its ``listeners`` with every new signed note; ``tree`` keeps
the RFC 6962 tree for O(log n) proofs; ``receipts`` builds an event's tlog-proof receipt;
``keys`` reads and writes signing key files.
"""
