"""The second replay of a replay check, in its own process under another hash seed.

Started by ``replay_check._second_replays`` as ``python -m blackops.workflows.replay_child``
with ``PYTHONHASHSEED`` set: reads the pickled jobs on stdin (the parent's ``sys.path``,
how to load each workflow's candidate, one plan per history), replays each under the
shifted clock and the second seed exactly as the parent does, and writes the traces and
ends, pickled, on the original stdout. What the candidate prints goes to stderr. No
store is opened and no host exists: nothing can be appended, no effect runs.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
from typing import Any


def main() -> int:
    payload: dict[str, Any] = pickle.load(sys.stdin.buffer)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the candidate's prints must not reach the results
    sys.stdout = sys.stderr
    sys.path[:] = payload["path"]
    from blackops.workflows.context import run_context
    from blackops.workflows.replay_clock import NO_HOST, shifted_clock

    codes: dict[str, Any] = {}
    results: list[Any] = []
    for job in payload["jobs"]:
        if job is None:
            results.append(None)
            continue
        workflow, plan = job
        if workflow not in codes:
            codes[workflow] = payload["sources"][workflow].load(workflow)
        code = codes[workflow]
        trace: list[tuple[str, str]] = []
        random.seed(payload["seed"])
        with shifted_clock(payload["shift"]):
            end = run_context(plan, code.cls, code.env, NO_HOST, trace=trace, replay_only=True)
        results.append((trace, end))
    out.write(pickle.dumps(results))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
