"""A killed executor group's survivors are waited for at most GROUP_WAIT_LIMIT: a member
the worker may not signal (it changed its user) or one stuck in an uninterruptible wait
never ends by waiting, and the wait runs on the thread that renews every lease (found by
review: it waited for ever, decisions W16)."""

from __future__ import annotations

import logging
import time

import pytest

from blackops.workflows import executor


def test_a_group_that_cannot_end_is_given_up_on_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def never_signalled(pgid: int, signum: int) -> None:
        raise PermissionError("a member that changed its user")

    monkeypatch.setattr("os.killpg", never_signalled)
    monkeypatch.setattr(executor, "_live_members", lambda pgid: True)
    monkeypatch.setattr(executor, "GROUP_WAIT_LIMIT", 0.3)
    began = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=executor.log.name):
        executor.wait_group_stopped(424242)
    assert time.monotonic() - began < 5
    assert "counted as escaped" in caplog.text
