"""An operation's attempts end under the Supervision Policy its ``operation.received``
recorded, not under the one the code registers when they end (decisions P22): a redeploy
with another policy ran an operation recorded with ``max_attempts=1`` and ``dead_letter``
three times and ended it ``failed``, its journal still naming the first policy; a redrive,
which asks the recorded supervision, did the same (found by a spec hunt, stop 38). The
recorded exception types are matched by name along the error's MRO. Both stores."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from blackops import Application, Retryable, Supervision
from blackops.testing import FakeClock
from domain.supervision import RecordedSupervision


class GatewayDown(Exception):
    """Retried only by the first deployment's policy (``retry_on``)."""


class GatewayTimeout(GatewayDown):
    """A subclass: retried under a policy naming its parent."""


def deployed(store_url: str, clock: FakeClock, policy: Supervision, error: type) -> Application:
    app = Application(store_url, clock=clock)

    @app.operation("t.pay", supervision=policy)
    def pay(ctx: Any, params: dict[str, Any]) -> None:
        raise error("the gateway is down")

    return app


def drained(app: Application, clock: FakeClock, turns: int = 6) -> None:
    for _ in range(turns):
        asyncio.run(app.work_until_idle())
        clock.advance(60)


def test_attempts_end_under_the_policy_the_operation_was_received_under(store_url: str) -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    first = deployed(store_url, clock, Supervision(max_attempts=1, exhausted="dead_letter"),
                     Retryable)  # fmt: skip
    asked = first.submit("t.pay", {}, actor="u", tenant="acme")
    later = deployed(store_url, clock, Supervision(max_attempts=3, exhausted="failed"), Retryable)
    drained(later, clock)
    status = later.status(asked)
    assert (status["status"], status["attempt"]) == ("dead_letter", 1)
    redriven = later.redrive(asked, actor="ops")  # asks the recorded supervision (P22)
    drained(later, clock)
    status = later.status(redriven)
    assert (status["status"], status["attempt"]) == ("dead_letter", 1)
    first.close()
    later.close()


def test_recorded_retry_on_types_are_matched_by_name(store_url: str) -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    retrying = Supervision(max_attempts=3, retry_on=(GatewayDown,), initial_delay_seconds=1)
    first = deployed(store_url, clock, retrying, GatewayTimeout)
    asked = first.submit("t.pay", {}, actor="u", tenant="acme")
    later = deployed(store_url, clock, Supervision(max_attempts=3), GatewayTimeout)  # no retry_on
    drained(later, clock)
    status = later.status(asked)
    assert (status["status"], status["attempt"]) == ("failed", 3)  # retried: its record's
    first.close()
    later.close()


def test_a_recorded_policy_reads_back_as_it_was_written() -> None:
    policy = Supervision(max_attempts=4, backoff="exponential", initial_delay_seconds=2,
                         retry_on=(GatewayDown,), retry_always_on=(TimeoutError,),
                         exhausted="dead_letter")  # fmt: skip
    recorded = RecordedSupervision.from_record(policy.describe())
    assert recorded is not None and recorded.describe() == policy.describe()
    assert recorded.is_retryable(GatewayTimeout()) and not recorded.is_retryable(ValueError())
    assert recorded.spares(TimeoutError()) and not recorded.spares(GatewayDown())
    assert recorded.delay_after(3) == policy.delay_after(3)
    unreadable: list[object] = [
        None,
        [],
        {"max_attempts": 0},
        {**policy.describe(), "retry_on": [1]},
    ]
    for record in unreadable:
        assert RecordedSupervision.from_record(record) is None
