"""Who may hold a claim and for how long: the checks shared by every claimant.

A claim's lease lives in the due-work index (``journal/work_index.py``); its holder is
named by a worker id, and other claimants are kept off a row they are reserving for
``RESERVATION_HOLD`` while they claim it.
"""

from __future__ import annotations

import re
from datetime import timedelta

from domain.errors import InvalidRequest

#: How long a reservation keeps other workers off a row while this one claims it.
RESERVATION_HOLD = timedelta(seconds=5)
WORKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}$")


def check_worker_id(worker_id: object) -> str:
    if not isinstance(worker_id, str) or not WORKER_ID.fullmatch(worker_id):
        raise InvalidRequest("worker id must be 1-200 of [A-Za-z0-9._:@/+-], starting alphanumeric")
    return worker_id


def check_lease_seconds(lease_seconds: object) -> float:
    if (
        not isinstance(lease_seconds, int | float)
        or isinstance(lease_seconds, bool)
        or not 1 <= lease_seconds <= 86_400
    ):
        raise InvalidRequest("lease_seconds must be a number of seconds from 1 to 86400")
    return float(lease_seconds)
