"""What the host reads of a child that runs a deployer's code (decisions R9, R10, C13):
the ABI verifier's verdict and the replay sandbox's answer are read with a hard cap,
as they come, so bundle code that writes to the answer's pipe (found through
/proc/self/fd) cannot grow the host's memory; a flooded verdict is the bundle's
verdict, not verifier trouble; a child that dies or answers nonsense is a clear
``invalid_request``, never an internal error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from resource_helpers import (
    ACTOR,
    SPACE,
    deployed_worker,
    op_status,
    ready_workflow,
    sync,
    upload,
    work,
)

from blackops import Application
from blackops.control.abi_check import MAX_VERDICT_BYTES, TOO_LARGE, verify_abi
from blackops.control.bundle_source import BundleSource
from blackops.control.replay_sandbox import BASE_ANSWER_BYTES, check_in_child
from blackops.http.app import create_http_app
from domain.errors import InvalidRequest

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="the bundle finds the answer's pipe in /proc"
)

CHUNK = 65_536
FLOW = (
    "class Flow:\n    def __init__(self, env): pass\n    def run(self, event, step): return None\n"
)


def flooding(total: int, *, record: Path | None = None, data: str = "b'x' * 65536") -> str:
    """Top-level code that writes ``total`` bytes (chunks of ``data``) to the answer's
    pipe, counting each finished write in ``record``; then a good Flow."""
    count = f"open({str(record)!r}, 'a').write('.')" if record is not None else "pass"
    return (
        textwrap.dedent(f"""\
        import os
        target = None
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2:
                try:
                    if os.readlink(f"/proc/self/fd/{{fd}}").startswith("pipe:"):
                        target = fd
                except OSError:
                    pass
        chunk = {data}
        written = 0
        while written < {total}:
            written += os.write(target, chunk)
            {count}
        """)
        + FLOW
    )


def answering(answer: str, size: int) -> str:
    """Top-level code that writes ``answer`` (an expression of ``size`` bytes) to the
    answer's pipe and exits at once."""
    return flooding(size, data=answer) + "os._exit(0)\n"


def writes(record: Path) -> int:
    """Bytes the bundle managed to write (it counts finished 64 KiB writes)."""
    return len(record.read_text()) * CHUNK if record.exists() else 0


def _source(main: str, key: str) -> BundleSource:
    return BundleSource(key, {"m": main}, "m", "Flow", {}, ())


# -- the ABI verifier's verdict ----------------------------------------------------------------


def test_dw_abi_1_a_verdict_flood_stops_at_the_cap_and_is_the_bundles_verdict(
    tmp_path: Path,
) -> None:
    """DW-ABI-1: the host stops reading just past 1 MiB (the child, killed, wrote
    little more than the pipe holds) and the verdict says why: not loaded."""
    record = tmp_path / "writes"
    verdict = verify_abi("k-flood", {"m": flooding(32 * 2**20, record=record)}, "m")
    assert verdict == {"loaded": False, "error": TOO_LARGE, "classes": {}}
    assert 0 < writes(record) <= MAX_VERDICT_BYTES + 2 * 2**20  # not the 32 MiB


def test_dw_abi_1_a_verdict_just_within_the_cap_is_read_whole() -> None:
    """DW-ABI-1: an answer of exactly 1 MiB is read (unreadable, but not too large)."""
    main = answering(f"b'{{}}' + b' ' * {MAX_VERDICT_BYTES - 2}", MAX_VERDICT_BYTES)
    verdict = verify_abi("k-edge", {"m": main}, "m")
    assert verdict["error"] == "verifier output was unreadable"


def test_dw_abi_1_a_verdict_nested_too_deep_is_unreadable_not_raised() -> None:
    """DW-ABI-1: a verdict whose JSON recurses past the parser's depth is unreadable."""
    verdict = verify_abi("k-deep", {"m": answering("b'[' * 200_000", 200_000)}, "m")
    assert verdict == {"loaded": False, "error": "verifier output was unreadable", "classes": {}}


_PEAK = """\
import json, resource, sys
sys.path[:0] = [{root!r}, {tests!r}]
from control.test_untrusted_child_answers import flooding
{setup}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
{call}
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"growth_kib": after - before, "said": said}}))
"""


def _peak_growth(setup: str, call: str) -> tuple[int, str]:
    """``call`` (which sets ``said``) in a fresh interpreter: how much its peak resident
    set grew (KiB), and what it said."""
    tests = Path(__file__).resolve().parent.parent
    script = _PEAK.format(root=str(tests.parent), tests=str(tests), setup=setup, call=call)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return int(result["growth_kib"]), str(result["said"])


def test_dw_abi_1_a_verdict_flood_does_not_grow_the_hosts_memory() -> None:
    """DW-ABI-1: 512 MiB written to the verdict's pipe; the host's peak grows by far
    less than that (it grew by more than twice that before the cap)."""
    growth, said = _peak_growth(
        "from blackops.control.abi_check import verify_abi",
        "said = verify_abi('k-peak', {'m': flooding(512 * 2**20)}, 'm')['error']",
    )
    assert growth < 128 * 1024, f"peak grew by {growth // 1024} MiB"
    assert said == TOO_LARGE


def test_dw_abi_1_a_flooded_verdict_is_recorded_at_once_not_retried(app: Application) -> None:
    """Decisions R9: verifier trouble (a crash, a timeout) is retried; a verdict over
    the cap is the bundle's doing, recorded on the first attempt as its verdict."""
    app.access.create_space(SPACE, app.access_context(ACTOR, SPACE))
    worker = str(app.control.create_worker(SPACE, "w1", ACTOR)["uid"])
    view = app.control.upload_version(
        SPACE, worker, {"modules": {"flows": flooding(8 * 2**20)}, "main": "flows"}, ACTOR
    )
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    verification = app.control.version_in(SPACE, view["version"]).verification
    assert verification == {"loaded": False, "error": TOO_LARGE, "classes": {}}


# -- the replay sandbox's answer ---------------------------------------------------------------


def test_c13_an_answer_line_that_never_ends_stops_at_the_cap(tmp_path: Path) -> None:
    """Decisions C13: one line with no newline is not read past the cap: the check is
    an invalid_request that says so, and the child is killed."""
    record = tmp_path / "writes"
    source = _source(flooding(64 * 2**20, record=record), "k-line")
    with pytest.raises(InvalidRequest, match=r"answer was larger than 16\.0 MiB"):
        check_in_child("cand", {"wf-x": source}, [])
    assert 0 < writes(record) <= BASE_ANSWER_BYTES + 4 * 2**20  # not the 64 MiB


def test_c13_endless_progress_lines_stop_at_the_cap() -> None:
    """Decisions C13: the cap is on the whole answer, progress lines included."""
    progress: list[int] = []
    source = _source(flooding(64 * 2**20, data="b'{\"done\": 1}\\n' * 5461"), "k-progress")
    with pytest.raises(InvalidRequest, match="answer was larger than"):
        check_in_child("cand", {"wf-x": source}, [], progress=progress.append)
    assert 0 < len(progress) <= (BASE_ANSWER_BYTES + 2**20) // 12


def test_c13_an_answer_flood_does_not_grow_the_hosts_memory() -> None:
    """Decisions C13: 512 MiB with no newline; the host's peak grows by far less."""
    growth, said = _peak_growth(
        "from blackops.control.replay_sandbox import check_in_child\n"
        "from blackops.control.bundle_source import BundleSource\n"
        "from domain.errors import InvalidRequest\n"
        "source = BundleSource('k-peak', {'m': flooding(512 * 2**20)}, 'm', 'Flow', {}, ())",
        "try:\n"
        "    check_in_child('cand', {'wf-x': source}, [])\n"
        "    said = 'checked'\n"
        "except (InvalidRequest, AssertionError) as error:\n"
        "    said = repr(error)",
    )
    assert growth < 128 * 1024, f"peak grew by {growth // 1024} MiB"
    assert "answer was larger than" in said


@pytest.mark.parametrize(
    ("main", "reason"),
    [
        ("import ctypes\nctypes.string_at(0)\n", "crashes before answering"),
        ("import os\nos._exit(0)\n", "exits before answering"),
        (answering("b'[' * 200_000 + b'\\n'", 200_001), "answers JSON nested too deep"),
        (answering("b'\"a string\"\\n'", 11), "answers something that is not a report"),
    ],
    ids=["crash", "exit", "deep", "not-a-report"],
)
def test_c13_a_child_without_a_readable_answer_is_an_invalid_request(
    main: str, reason: str
) -> None:
    """Decisions C13: whatever the child does instead of answering, the caller gets
    the documented invalid_request ("gave no readable report"), never another error."""
    source = _source(main + FLOW, f"k-{reason}")
    with pytest.raises(InvalidRequest, match="gave no readable report"):
        check_in_child("cand", {"wf-x": source}, [])


# -- over HTTP: the dry run of a Version whose run crashes the child ---------------------------

TOKEN = "child-answers-token"
CRASHING_RUN = """\
class Flow:
    def __init__(self, env): pass
    async def run(self, event, step):
        import ctypes
        ctypes.string_at(0)
"""


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    with TestClient(create_http_app(app, TOKEN), raise_server_exceptions=False) as test_client:
        yield test_client


def test_c9_the_dry_run_of_a_version_that_kills_the_child_is_invalid_request(
    app: Application, client: TestClient
) -> None:
    """Decisions C9, C13: ``POST .../deployment/check`` with a Version whose run crashes
    the replay child answers 400 invalid_request, not 500 internal_error."""
    app.access.create_space(SPACE, app.access_context(ACTOR, SPACE))
    deployed = deployed_worker(app)
    uid = ready_workflow(app, deployed.worker)
    sync(app.workflow(uid).create(id="c1"))
    work(app)
    bad = upload(app, deployed.worker, {"modules": {"flows": CRASHING_RUN}, "main": "flows"})
    work(app)
    verification = app.control.version_in(SPACE, bad).verification
    assert verification is not None and verification["loaded"] is True  # its class is fine
    answer = client.post(
        f"/v1/spaces/{SPACE}/workers/{deployed.worker}/deployment/check",
        json={"allocation": [{"version": bad, "weight": 100}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert "gave no readable report" in error["message"]
