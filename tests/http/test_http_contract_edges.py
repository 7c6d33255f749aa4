"""Where the service did something its contract does not say (found by a defect hunt against
the OpenAPI document, stop 34): an instance id holding a line feed was created and listed but
every route of it answered 404 (P42: every scalar value works); a ``Prefer`` header sent as
two field lines was read as its first line only, so a proxy's own line turned a Deferred
submit into an Inline run (RFC 9110 5.3: one comma-joined value); a HEAD of a receipt signed
a checkpoint on the spot (H11: a GET that writes is not run for a HEAD)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http.app import create_http_app

AUTH = {"Authorization": "Bearer systok"}


def with_space(app: Application) -> Application:
    context = app.access_context({"id": "root", "kind": "system"}, "default")
    app.access.create_space("default", context)
    return app


class Wait:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        await step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
        return {}


def test_an_instance_id_with_a_line_feed_is_reached_by_every_route(store_url: str) -> None:
    app = with_space(Application(store_url))
    binding = app.register_workflow(Wait)
    instance = "nl-1\nx"
    asyncio.run(binding.create(id=instance))
    base = f"/v1/spaces/default/workflows/Wait/instances/{instance.replace(chr(10), '%0A')}"
    with TestClient(create_http_app(app, "systok")) as client:
        status = client.get(base, headers=AUTH)
        assert status.status_code == 200 and status.json()["status"] == "queued"
        sent = client.post(f"{base}/events", headers=AUTH, json={"type": "other"})
        assert sent.status_code in (200, 201, 202), sent.text
        stopped = client.post(f"{base}/terminate", headers=AUTH)
        assert stopped.status_code == 200, stopped.text
        receipt = client.get(f"{base}/receipt", headers=AUTH)
        assert receipt.json().get("error", {}).get("message") != "Not Found", receipt.text
    app.close()


def ok_app(tmp_path: Path) -> Application:
    """A journal with Space ``default`` and an operation ``t.ok`` answering ``{}``."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    app.operation("t.ok")(lambda ctx, params: {})
    return app


def test_prefer_sent_as_two_lines_is_one_value(tmp_path: Path) -> None:
    app = ok_app(tmp_path)
    with TestClient(create_http_app(app, "systok")) as client:
        answer = client.post(
            "/v1/spaces/default/operations/t.ok",
            headers=[
                ("Authorization", "Bearer systok"),
                ("Prefer", "wait=5"),  # a proxy's line first
                ("Prefer", "respond-async"),
                ("Idempotency-Key", "two-lines-1"),
            ],
            json={},
        )
    app.close()
    assert answer.status_code == 202, answer.text  # Deferred: accepted, not run


@pytest.mark.parametrize(
    ("prefer", "status"),
    [
        ('handling=lenient; note="a,respond-async,b"', 200),  # a quoted comma: Inline
        ('note="a\\",respond-async"', 200),  # an escaped quote stays inside the value
        ('note="x", respond-async', 202),
        ("wait=5;x=1, RESPOND-ASYNC; y", 202),
    ],
)
def test_prefer_splits_preferences_only_outside_quoted_values(
    tmp_path: Path, prefer: str, status: int
) -> None:
    """RFC 7240: a comma inside a quoted value is part of it; ``respond-async`` inside one
    asked for nothing, and the operation ran Deferred (found by a defect hunt, stop 39)."""
    app = ok_app(tmp_path)
    with TestClient(create_http_app(app, "systok")) as client:
        answer = client.post(
            "/v1/spaces/default/operations/t.ok",
            headers={"Authorization": "Bearer systok", "Prefer": prefer},
            json={},
        )
    app.close()
    assert answer.status_code == status, answer.text


def test_two_traceparent_lines_are_no_trace_context(tmp_path: Path) -> None:
    """W3C Trace Context's test suite: a duplicated ``traceparent`` starts a new trace; the
    first line was recorded (found by a defect hunt, stop 39). One line is still recorded."""
    app = ok_app(tmp_path)
    first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    second = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
    recorded = {}
    with TestClient(create_http_app(app, "systok")) as client:
        for lines in ([first, second], [first]):
            answer = client.post(
                "/v1/spaces/default/operations/t.ok",
                headers=[("Authorization", "Bearer systok")]
                + [("traceparent", line) for line in lines],
                json={},
            )
            assert answer.status_code == 200, answer.text
            events = app.events(answer.json()["operationId"])
            recorded[len(lines)] = {e["context"].get("traceparent") for e in events}
    app.close()
    assert recorded[2] == {None}
    assert recorded[1] == {first}


def test_a_head_of_a_receipt_writes_nothing(tmp_path: Path) -> None:
    app = ok_app(tmp_path)
    binding = app.register_workflow(Wait)
    asyncio.run(binding.create(id="a/receipt"))  # its status, not a receipt
    operation = app.run("t.ok", {}, actor="a", tenant="default").operation_id
    with TestClient(create_http_app(app, "systok")) as client:
        before = app.store.last_position()
        for path in (
            f"/v1/operations/{operation}/receipt",
            "/v1/spaces/default/workflows/Wait/instances/x/receipt",
        ):
            refused = client.head(path, headers=AUTH)
            assert refused.status_code == 405 and refused.headers["allow"] == "GET", path
        assert app.store.last_position() == before  # no checkpoint signed for a HEAD
        status = client.head(
            "/v1/spaces/default/workflows/Wait/instances/a%2Freceipt", headers=AUTH
        )
        assert status.status_code == 200
        # A letter of the route word percent-encoded: the router decodes it and runs the
        # export or the receipt, so the HEAD must not (it exported and journaled the export,
        # or signed a checkpoint: found by a defect hunt, stop 37).
        for path in (
            "/v1/journal/%65xport",
            "/v1/spaces/default/journal/%65xport",
            f"/v1/operations/{operation}/%72eceipt",
            # A '/' sent as %2F: the router decodes it as well (found by review, stop 37).
            "/v1/journal%2Fexport",
            "/v1/journal%2fexport",
            "/v1%2Fjournal%2Fexport",
            "/v1/spaces/default%2Fjournal/export",
            f"/v1/operations/{operation}%2Freceipt",
            # A final line feed: the router's ``$`` matches before it (found by a defect
            # hunt, stop 38: these exported, or signed a checkpoint, for a HEAD).
            "/v1/journal/export%0A",
            "/v1/spaces/default/journal/export%0A",
            f"/v1/operations/{operation}/receipt%0A",
        ):
            refused = client.head(path, headers=AUTH)
            assert refused.status_code == 405, (path, refused.status_code)
            assert refused.headers["allow"] == "GET", path
        # The console's pages that show a receipt make it the same way (found by review).
        for path in (
            f"/ui/operations/{operation}",
            f"/ui/operations/{operation}/receipt.json",
            "/ui/spaces/default/workflows/Wait/instances/a%2Freceipt",
            "/ui/spaces/default/workflows/Wait/receipts/x",
            # A '/' sent as %2F, a line feed in an id (found by review, stop 37).
            "/ui/spaces/default/workflows/Wait%2Finstances/i2",
            "/ui%2Fspaces/default/workflows/Wait/instances/i4",
            "/ui/spaces/default/workflows/Wait/receipts/i2%0Az",
            "/v1/spaces/default/workflows/Wait/instances/i3%0Az/receipt",
            f"/ui/operations/{operation}%0A",
            f"/ui/operations/{operation}/receipt.json%0A",
        ):
            refused = client.head(path, follow_redirects=False)
            assert refused.status_code == 405 and refused.headers["allow"] == "GET", path
        assert client.head("/ui/operations", follow_redirects=False).status_code == 303
        assert app.store.last_position() == before
    app.close()


def test_a_405_names_the_methods_of_an_instance_whose_id_holds_a_slash(tmp_path: Path) -> None:
    """An id sent with ``%2F`` (P42) is one segment: its 405 named no method at all (the
    decoded path matched no template), or POST for an id ending in ``/events`` (found by a
    defect hunt, stop 37)."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    binding = app.register_workflow(Wait)
    for instance in ("a/b", "x/events"):
        asyncio.run(binding.create(id=instance))
    instances = "/v1/spaces/default/workflows/Wait/instances/"
    with TestClient(create_http_app(app, "systok")) as client:
        for segment in ("a%2Fb", "x%2Fevents"):
            assert client.get(instances + segment, headers=AUTH).status_code == 200
            answer = client.delete(instances + segment, headers=AUTH)
            assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD", segment
        plain = client.delete(instances + "i1", headers=AUTH)
        assert plain.status_code == 405 and plain.headers["allow"] == "GET, HEAD"
        # A path the router decodes into an export: what it answers there is named.
        export = client.delete("/v1/journal%2Fexport", headers=AUTH)
        assert export.status_code == 405 and export.headers["allow"] == "GET"
    app.close()


def test_query_integers_are_decimal_digits(tmp_path: Path) -> None:
    """``type: integer`` in the schema; Python's reading let ``1_0``, ``+3``, ``4.0`` and
    `` 5`` through as 10, 3, 4 and 5."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    app.operation("t.ok")(lambda ctx, params: {})
    done = app.run("t.ok", {}, actor="t", tenant="default").operation_id
    with TestClient(create_http_app(app, "systok")) as client:
        for bad in ("1_0", "+3", "4.0", " 5", "5 ", "٥", "1e1"):
            for path in ("/v1/journal", "/v1/operations", "/v1/journal/stream"):
                answer = client.get(path, params={"limit": bad, "max_seconds": 1}, headers=AUTH)
                assert answer.status_code == 400, (path, bad, answer.text)
                assert answer.json()["error"]["code"] == "invalid_request"
            # A receipt's other event too (it was read as a number: found by a defect hunt).
            receipt = client.get(
                f"/v1/operations/{done}/receipt", params={"position": bad}, headers=AUTH
            )
            assert receipt.status_code == 400, (bad, receipt.text)
            proof = client.get(
                "/v1/proofs/consistency", params={"from": bad, "to": 2}, headers=AUTH
            )
            assert proof.status_code == 400, (bad, proof.text)
        for bad in ("1_0", "+1", "1.", ".5", " 1", "inf", "0x1"):
            answer = client.get("/v1/journal/stream", params={"max_seconds": bad}, headers=AUTH)
            assert answer.status_code == 400, (bad, answer.text)
        assert client.get("/v1/journal", params={"limit": "05"}, headers=AUTH).status_code == 200
        for good in ("0.2", "2e-1", "5e-324"):  # JSON numbers, as schemathesis sends them
            ended = client.get("/v1/journal/stream", params={"max_seconds": good}, headers=AUTH)
            assert ended.status_code == 200, (good, ended.text)
    app.close()


def test_a_whole_number_written_with_a_zero_fraction_is_an_integer() -> None:
    """JSON Schema counts ``100.0`` as an integer (and RFC 8785 writes it ``100``): a weight
    or ``terminalHistories`` so written was refused as "must be an integer" (found by the
    contract's fuzzer)."""
    import pytest

    from domain.errors import InvalidRequest
    from domain.resources import check_allocation, whole_number

    version = "sha256:" + "0" * 64
    assert check_allocation([{"version": version, "weight": 100.0}]) == [
        {"version": version, "weight": 100}
    ]
    assert [whole_number(v) for v in (5, 5.0, -0.0, 5.5, True, "5", None)] == [
        5, 5, 0, None, None, None, None,
    ]  # fmt: skip
    with pytest.raises(InvalidRequest):
        check_allocation([{"version": version, "weight": 99.5}])


def test_every_operation_type_parameter_publishes_the_length_the_service_takes(
    tmp_path: Path,
) -> None:
    """The path's ``{type}`` published only its pattern, which admits 519 characters: a
    schema-valid type of 182 was refused with 400 (found by a defect hunt, stop 37)."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    document = create_http_app(app, "systok").openapi()
    found = [
        (path, parameter["schema"].get("maxLength"))
        for path, methods in document["paths"].items()
        for operation in methods.values()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "type"
    ]
    assert len(found) >= 2 and {length for _, length in found} == {128}, found
    app.close()


def test_a_token_label_of_null_is_refused_as_its_schema_says(tmp_path: Path) -> None:
    """``label`` is a string in the published schema; ``null`` was taken as no label (found
    by a defect hunt, stop 37). Leaving it out is how to ask for none."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    tokens = "/v1/spaces/default/principals/zz/tokens"
    with TestClient(create_http_app(app, "systok")) as client:
        put = client.put("/v1/spaces/default/principals/zz", json={"role": "reader"}, headers=AUTH)
        assert put.status_code == 200, put.text
        before = app.store.last_position()
        refused = client.post(tokens, json={"label": None}, headers=AUTH)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
        assert app.store.last_position() == before
        issued = client.post(tokens, json={}, headers=AUTH)
        assert issued.status_code == 201 and issued.json()["label"] is None
    app.close()


def test_an_unknown_operation_id_is_named_in_part(tmp_path: Path) -> None:
    """A 60,000-character id came back whole in its 404 (found by a defect hunt, stop 37);
    instance and workflow ids were already named up to 128 characters."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    with TestClient(create_http_app(app, "systok")) as client:
        answer = client.get("/v1/operations/" + "a" * 60_000, headers=AUTH)
        assert answer.status_code == 404 and len(answer.content) < 400, len(answer.content)
    app.close()


def test_an_instance_receipt_route_word_percent_encoded_is_the_receipt(tmp_path: Path) -> None:
    """``%72eceipt`` is ``receipt`` (RFC 3986 6.2.2.2): it answered 404 "no such route", read
    as the status of an instance whose id ends in ``/receipt`` (seen by a review, stop 37);
    an id that does end so, sent with ``%2F``, is still that instance's status."""
    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    binding = app.register_workflow(Wait)
    asyncio.run(binding.create(id="x"))
    asyncio.run(binding.create(id="a/receipt"))
    base = "/v1/spaces/default/workflows/Wait/instances"
    with TestClient(create_http_app(app, "systok")) as client:
        plain = client.get(f"{base}/x/receipt", headers=AUTH)
        encoded = client.get(f"{base}/x/%72eceipt", headers=AUTH)
        status = client.get(f"{base}/a%2Freceipt", headers=AUTH)
    app.close()
    assert plain.status_code == 404 and "no terminal event" in plain.text  # not terminal yet
    assert (encoded.status_code, encoded.json()) == (plain.status_code, plain.json())
    assert status.status_code == 200 and status.json()["status"] == "queued", status.text


def test_behind_a_prefix_a_client_percent_encodes_a_head_of_a_receipt_writes_nothing(
    tmp_path: Path,
) -> None:
    """Under ``Mount("/my api")`` a client sends ``/my%20api``: the decoded prefix was
    compared with the path as sent, stayed in it, and a HEAD of an instance's receipt ran
    the GET and signed a checkpoint (found by review, stop 38)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from blackops.audit.checkpoints import CheckpointService
    from replay.notes import SigningKey

    app = with_space(Application(f"sqlite:///{tmp_path}/j.sqlite3"))
    binding = app.register_workflow(Wait)
    instance = asyncio.run(binding.create(id="x"))
    asyncio.run(instance.terminate())
    signer = CheckpointService(app.store, SigningKey.generate("example.com/r"), app.clock)
    receipt = "v1/spaces/default/workflows/Wait/instances/x/receipt"
    for prefix, sent in (("/my api", "/my%20api"), ("/bl\u00e4ck", "/bl%C3%A4ck")):
        api = create_http_app(app, "systok", checkpoints=signer)
        with TestClient(Starlette(routes=[Mount(prefix, app=api)])) as client:
            before = app.store.last_position()
            refused = client.head(f"{sent}/{receipt}", headers=AUTH)
            assert refused.status_code == 405, (prefix, refused.status_code)
            assert app.store.last_position() == before, prefix  # no checkpoint signed
            assert client.get(f"{sent}/{receipt}", headers=AUTH).status_code == 200, prefix
    app.close()
