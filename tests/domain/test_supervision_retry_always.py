"""``Supervision.retry_always_on``: failures retried for as long as they recur, never
spending ``max_attempts`` (what DW-DEL-3's unproven stop and DW-SPEC-7's verifier trouble
need); the others still count, alone."""

from __future__ import annotations

import pytest

from blackops import OperationRejected, Retryable, Supervision
from domain.errors import BackendUnavailable


class Waiting(Retryable):
    pass


def test_spared_failures_are_retryable_and_described() -> None:
    policy = Supervision(max_attempts=2, retry_always_on=(Waiting,))
    assert policy.is_retryable(Waiting()) and policy.spares(Waiting())
    assert not policy.spares(BackendUnavailable("x")) and not policy.spares(Retryable())
    assert not policy.spares(OperationRejected("conflict", "c", "m"))
    assert policy.describe()["retry_always_on"] == [f"{__name__}.Waiting"]
    assert "retry_always_on" not in Supervision().describe()  # journaled forms unchanged
    with pytest.raises(ValueError, match="retry_always_on"):
        Supervision(retry_always_on=("Waiting",))  # type: ignore[arg-type]


def test_an_inline_run_spends_its_budget_on_them_too() -> None:
    """An Inline run retries inside its caller, who must get an answer: there a spared
    failure counts like any other (it retried for ever in the caller: found by review)."""
    from blackops import Application

    app = Application("memory://")
    calls: list[int] = []

    @app.operation("t.wait", supervision=Supervision(max_attempts=2, retry_always_on=(Waiting,)))
    def waiting(ctx: object, params: dict[str, object]) -> None:
        calls.append(1)
        if len(calls) > 50:  # the old loop: end the test, not the run
            raise RuntimeError("still retrying")
        raise Waiting()

    result = app.run("t.wait", {}, actor="a", tenant="default")
    assert len(calls) == 2 and result.status == "failed"
    app.close()


@pytest.mark.parametrize("jitter", ["false", 0, 1, None])
def test_jitter_is_a_bool(jitter: object) -> None:
    """ "false" was taken, journaled as such, and jittered the delays (found by a spec
    review, stop 36); every other field was checked already."""
    with pytest.raises(ValueError, match="jitter"):
        Supervision(jitter=jitter)  # type: ignore[arg-type]
    assert Supervision(jitter=True).jitter is True
