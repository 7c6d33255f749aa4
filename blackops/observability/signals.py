"""What a worker tells its observer outside the journal: lease renewals and losses, and
executor restarts. The default does nothing; ``Observability`` counts and logs them."""

from __future__ import annotations


class Signals:
    """No-op receiver; ``kind`` is ``operation`` (Deferred attempts) or ``workflow``."""

    def leases_renewed(self, kind: str, count: int) -> None:
        """``count`` leases were extended by one heartbeat."""

    def lease_lost(self, kind: str, key: str, token: int, worker: str, why: str) -> None:
        """The lease of ``key`` (operation id or instance stream) at fencing ``token`` was
        lost or abandoned (``why``: ``not_renewed``, ``renewal_failing``, ``fenced``)."""

    def executor_restarted(self, why: str) -> None:
        """A workflow executor process was replaced (``why``: a short reason)."""


NO_SIGNALS = Signals()
