"""Audit routes (docs/audit.md): the signed checkpoint, RFC 6962 proofs, receipts.

``GET /v1/checkpoint`` and ``GET /v1/proofs/consistency`` answer every authenticated
principal: they reveal only tree sizes and hashes. An inclusion proof or a receipt names an
event, so it needs read access to that event's Space (a system principal reads any).
"""

from __future__ import annotations

import base64
import threading
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.audit.checkpoints import CheckpointService
from blackops.audit.receipts import OPERATION_TERMINAL, receipt_for, terminal_position
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.capacity import EXPORT_READS, reader_key
from blackops.http.journal import tenant_of
from blackops.http.openapi import errors
from blackops.http.operations import OperationId, operation_of
from blackops.http.params import QUERY_INTEGER, SpacePath
from blackops.http.responses import JSON
from blackops.http.scopes import served_path
from domain.access import Action
from domain.errors import Conflict, InvalidRequest, NotFound
from journal.store import MAX_POSITION
from replay.observed import observed_line

router = APIRouter(tags=["audit"])
Size = Annotated[
    int, Query(ge=1, le=MAX_POSITION, description="a tree size (leaf count)"), QUERY_INTEGER
]
Position = Annotated[
    int, Query(ge=1, le=MAX_POSITION, description="an event's position"), QUERY_INTEGER
]
_TEXT: dict[int | str, dict[str, Any]] = {
    200: {"description": "text/plain", "content": {"text/plain": {"schema": {"type": "string"}}}}
}


class Receipt(BaseModel):
    """An event's receipt: its Observed line, its leaf index, a tlog-proof@v1 text."""

    model_config = ConfigDict(extra="forbid")
    entry: str
    index: int
    proof: str


class InclusionProof(BaseModel):
    model_config = ConfigDict(extra="forbid")
    position: int
    index: int
    treeSize: int  # noqa: N815 (the wire name)
    proof: list[str]


def checkpoints(request: Request) -> CheckpointService:
    """This server's checkpoint service (read only when it holds no signing key)."""
    state = request.app.state
    found: CheckpointService | None = getattr(state, "checkpoints", None)
    if found is None:
        from blackops.witness.cosigned import CosignatureBook

        served = state.blackops.application
        found = CheckpointService(served.store, None, served.clock)
        found.kept_cosignatures = CosignatureBook(served.store, read_only=True).lines
        state.checkpoints = found
    return found


@router.get(
    "/v1/checkpoint",
    summary="The latest signed checkpoint (C2SP tlog-checkpoint note, text/plain)",
    response_class=Response,
    responses={**_TEXT, **errors(404)},
)
async def checkpoint(
    who: Caller = Depends(caller), service: CheckpointService = Depends(checkpoints)
) -> Response:
    note = await run_in_threadpool(service.published)
    return Response(note, media_type="text/plain; charset=utf-8")


@router.get(
    "/v1/proofs/consistency",
    summary="RFC 6962 consistency proof between two tree sizes (one base64 hash a line)",
    response_class=Response,
    responses={**_TEXT, **errors(400, 404)},
)
async def consistency(
    from_: Annotated[
        int, Query(alias="from", ge=1, le=MAX_POSITION, description="old size"), QUERY_INTEGER
    ],
    to: Size,
    who: Caller = Depends(caller),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    def proof() -> str:
        tree = service.synced_tree()
        # Sizes the schema admits but this tree has no proof for are not_found (A9).
        if to > tree.size:
            raise NotFound(f"the tree has {tree.size} leaves, fewer than {to}")
        if from_ > to:
            raise NotFound("a smaller tree never extends a larger one: no proof from > to")
        return "".join(base64.b64encode(h).decode() + "\n" for h in tree.consistency(from_, to))

    return Response(await run_in_threadpool(proof), media_type="text/plain; charset=utf-8")


@router.get(
    "/v1/proofs/inclusion",
    summary="The audit path of the event at a position in the tree of a size",
    response_model=InclusionProof,
    responses=errors(400, 403, 404),
)
async def inclusion(
    position: Position,
    size: Size,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    def proof() -> dict[str, Any]:
        check_event_access(service, who, position)
        tree = service.synced_tree()
        index = tree.index_of(position)
        if index is None:
            raise NotFound("no such event")
        if not index < size <= tree.size:
            raise NotFound(
                f"the event is leaf {index}: trees of size {index + 1} to {tree.size} hold it"
            )
        path = [base64.b64encode(h).decode() for h in tree.inclusion(index, size)]
        return {"position": position, "index": index, "treeSize": size, "proof": path}

    return JSON(await run_in_threadpool(proof))


@router.get(
    "/v1/operations/{operation_id}/receipt",
    summary="The receipt of the operation's terminal event (tlog-proof@v1 to a signed checkpoint)",
    response_model=Receipt,
    responses=errors(400, 403, 404, 409),
)
async def operation_receipt(
    operation_id: OperationId,
    position: Annotated[
        int | None,
        Query(ge=1, le=MAX_POSITION, description="another event of the operation instead"),
        QUERY_INTEGER,  # digits only, as every other position (H14; found by a defect hunt)
    ] = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    def receipt() -> dict[str, Any]:
        operation_of(app, operation_id, who, Action.READ)
        events = app.events(operation_id)
        if position is None:
            chosen = terminal_position(events, OPERATION_TERMINAL)
        elif position in {int(e["position"]) for e in events}:
            chosen = position
        else:
            raise NotFound(f"position {position} is not an event of operation {operation_id}")
        return receipt_for(service, chosen)

    return JSON(await run_in_threadpool(receipt))


def check_event_access(service: CheckpointService, who: Caller, position: int) -> None:
    """Only a caller who may read the event's Space learns about it (system: any event)."""
    if who.principal.system:
        return
    rows = service.store.read_raw_after(position - 1, 1)
    tenant = tenant_of(observed_line(rows[0])) if rows and rows[0].id == position else None
    if tenant is None:
        raise NotFound("no such event")  # the same words for another Space's event
    try:
        who.check(tenant, Action.READ)
    except NotFound:
        raise NotFound("no such event") from None


_EXPORT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Observed JSONL; header Link names its manifest (rel=describedby)",
        "content": {"application/jsonl": {"schema": {"type": "string"}}},
        "headers": {
            "Link": {
                "description": 'the manifest: <...>; rel="describedby"',
                "schema": {"type": "string"},
            }
        },
    }
}
Until = Annotated[
    int | None,
    Query(ge=0, le=MAX_POSITION, description="stop at this position (inclusive)"),
    QUERY_INTEGER,
]
After = Annotated[
    int, Query(ge=0, le=MAX_POSITION, description="start after this position"), QUERY_INTEGER
]
_MANIFESTS_KEPT = 256


def _check_range(after: int, until: int | None) -> None:
    """An export covers (after, until]: ``until`` before ``after`` is a mistake, refused
    before anything is read or journaled (``until == after`` is the empty range)."""
    if until is not None and until < after:
        raise InvalidRequest(f"until ({until}) is before after ({after})")


def _export(
    app: Application,
    service: CheckpointService,
    who: Caller,
    after: int,
    until: int | None,
    space: str | None,
    manifests: _Manifests,
) -> tuple[bytes, str]:
    import io

    from blackops.audit.exports import attest
    from replay.custody import export_with_manifest

    out = io.BytesIO()
    after = min(after, app.store.last_position())  # nothing lies beyond: the same export
    until = _attestable_end(service, after, until)
    keep = None if space is None else (lambda line: tenant_of(line) == space)
    signed = service.key is not None or service.latest() is not None
    manifest = export_with_manifest(
        app.store, out, actor=who.actor, clock=app.clock, after=after, until=until,
        keep=keep, output_name="GET /v1/journal/export" + (f" (space {space})" if space else ""),
        space=space, attest=partial(attest, service) if signed else None,
    )  # fmt: skip
    export_id = manifest["custody"]["stream"].rsplit(":", 1)[1]
    manifests.keep(export_id, space, manifest)
    return out.getvalue(), export_id


def _attestable_end(service: CheckpointService, after: int, until: int | None) -> int | None:
    """Where an export ends so that it can be attested. A server without the signing key
    attests with the checkpoints other processes journal, and a checkpoint is journaled
    after the events it signs, so the newest never covers the journal's end: a whole-journal
    export was journaled, then refused with 404, every time (found by a defect hunt, stop
    35). Without the key, an export ends at the newest checkpoint by default, and a range
    past it is refused before anything is read or journaled (decisions A8)."""
    signed = None if service.key is not None else service.signed_through()
    if signed is None:  # this server signs, or nothing is signed: as before
        return until
    end = signed if until is None else until
    if max(after, end) > signed:
        covered = f"through position {signed}" if signed else "no event"
        raise Conflict(
            f"no signed checkpoint covers position {max(after, end, 1)} yet (the newest covers "
            f"{covered}; this server holds no signing key): export with until <= {signed}, "
            "or after the signer's next checkpoint"
        )
    return end


class _Manifests:
    """The manifests of the exports this server answered: the latest ``_MANIFESTS_KEPT``
    per Space, and as many of the whole journal's (``None``), each scope its own slots,
    so no tenant's exports push out another's (decisions A12)."""

    def __init__(self) -> None:
        # Exports run in the threadpool: keeping and evicting must not interleave.
        self._lock = threading.Lock()
        self._by_scope: dict[str | None, dict[str, dict[str, Any]]] = {}
        self._scope_of: dict[str, str | None] = {}

    def keep(self, export_id: str, space: str | None, manifest: dict[str, Any]) -> None:
        with self._lock:
            kept = self._by_scope.setdefault(space, {})
            kept[export_id] = manifest
            self._scope_of[export_id] = space
            while len(kept) > _MANIFESTS_KEPT:
                oldest = next(iter(kept))  # dicts keep insertion order: the oldest first
                del kept[oldest], self._scope_of[oldest]

    def get(self, export_id: str) -> tuple[str | None, dict[str, Any]] | None:
        """``(space, manifest)`` of a kept export, or None."""
        with self._lock:
            if export_id not in self._scope_of:
                return None
            space = self._scope_of[export_id]
            return space, self._by_scope[space][export_id]


def _manifests(request: Request) -> _Manifests:
    state = request.app.state
    if getattr(state, "export_manifests", None) is None:
        state.export_manifests = _Manifests()  # on the event loop: no two are made
    found: _Manifests = state.export_manifests
    return found


def _manifest_link(request: Request, export_id: str) -> dict[str, str]:
    """The export's ``Link`` to its manifest, under the prefix the API is served at (a
    proxy's ``--root-path``): without it, a client whose base URL has a path was sent to a
    404 and lost the export (found by a defect hunt, stop 35)."""
    manifest = served_path(request.scope, f"/v1/journal/exports/{export_id}/manifest")
    return {"Link": f'<{manifest}>; rel="describedby"'}


@router.get(
    "/v1/journal/export",
    summary="Export the whole journal (Observed JSONL) with a signed manifest; journaled",
    response_class=Response,
    responses={**_EXPORT, **errors(400, 403, 409)},
)
async def journal_export(
    request: Request,
    after: After = 0,
    until: Until = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    from domain.access import check_system

    check_system(who.principal, "exporting the whole journal")
    _check_range(after, until)
    manifests = _manifests(request)
    # On threads of their own: a range read held the API's pool (F168).
    body, export_id = await EXPORT_READS.run(
        reader_key(who.principal.id, None), _export, app, service, who, after, until, None,
        manifests,
    )  # fmt: skip
    return Response(
        body, media_type="application/jsonl", headers=_manifest_link(request, export_id)
    )


@router.get(
    "/v1/spaces/{space}/journal/export",
    summary="Export one Space's lines (Observed JSONL) with a signed manifest; journaled",
    response_class=Response,
    responses={**_EXPORT, **errors(400, 403, 404, 409)},
)
async def space_journal_export(
    space: SpacePath,
    request: Request,
    after: After = 0,
    until: Until = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    check_space(app, who, space, Action.READ)
    _check_range(after, until)
    manifests = _manifests(request)
    # On threads of their own: a range read held the API's pool (F168).
    body, export_id = await EXPORT_READS.run(
        reader_key(who.principal.id, space), _export, app, service, who, after, until, space,
        manifests,
    )  # fmt: skip
    return Response(
        body, media_type="application/jsonl", headers=_manifest_link(request, export_id)
    )


@router.get(
    "/v1/journal/exports/{export_id}/manifest",
    summary="The manifest of an export this server answered (in memory, the latest 256 per Space)",
    responses=errors(403, 404),
)
async def export_manifest(
    export_id: Annotated[str, PathParam(description="the id in the export's Link header")],
    request: Request,
    who: Caller = Depends(caller),
) -> Response:
    found = _manifests(request).get(export_id)
    if found is None:
        raise NotFound("no such export manifest on this server")
    space, manifest = found
    if space is None:
        from domain.access import check_system

        check_system(who.principal, "reading a whole-journal export's manifest")
    if space is not None and not who.principal.system:
        try:
            who.check(space, Action.READ)
        except NotFound:
            raise NotFound("no such export manifest on this server") from None
    return JSON(manifest)
