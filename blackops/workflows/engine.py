"""The workflow engine: claims instance contexts and commits their steps, in groups.

It shares the Deferred machinery (``journal/work_index.py``, ``journal/group_commit.py``):
instances have rows in the same due-work index (type ``workflow:<uid>``), workers
reserve due rows the same way, renew the same leases (heartbeats outside the
journal), and commit through the same group commit. A claim appends
``workflow.context_started`` with a fencing token one higher than any before it;
every later append of that context is made at the version the context last saw. If
the stream moved, the engine folds what was appended and decides again, unless it
now sees that its owner was fenced (a newer context, a termination request, an
end), in which case the context is told to stop and can never commit.

Where the context's code runs is not this module's business: under
``work_until_idle`` in the calling thread (``local_contexts.run_due_contexts``), in a worker in a
killable executor process (``blackops/workflows/executor.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from blackops.workflows.code import CodeProvider, WorkflowCode
from blackops.workflows.context import ContextEnd, ContextPlan
from blackops.workflows.retention import purge_instance
from blackops.workflows.stamping import event_context, fold_in, stamp
from domain.clock import Clock
from domain.errors import BlackOpsError
from domain.workflow import InstanceState, micros_instant, to_micros
from domain.workflow_rules import (
    Owner,
    Suspension,
    decide_claim,
    decide_end,
    decide_step,
    is_fenced,
)
from journal import instance_snapshots
from journal.group_commit import commit_group
from journal.instances import refresh
from journal.leases import RESERVATION_HOLD, check_lease_seconds
from journal.store import Append, EventStore
from journal.work_index import workflow_row_type

log = logging.getLogger("blackops.workflows")
#: How often one decision is retried after the stream moved under it.
_REBASES = 20


@dataclass(eq=False)
class _Item:
    """One append of a turn: a step request, a context's end, or a claim."""

    kind: str
    held: HeldContext | None
    state: InstanceState
    append: Append
    reply: tuple[Any, ...] | None


@dataclass(eq=False)
class HeldContext:
    """A context this engine claimed: the instance as the context last saw it."""

    state: InstanceState
    owner: Owner
    code: WorkflowCode
    plan: ContextPlan
    suspension: Suspension | None = None
    #: The error the host answered a step request with (``step_limit_exceeded``, a kind
    #: mismatch): the context's end is that error whatever the code reports (DW-STEP-5: a
    #: limit is the host's, no sentinel the code can catch to live on).
    verdict: tuple[str, str] | None = None
    abandoned: bool = False
    #: The version of the snapshot this context was folded from (0: none was used).
    snapshot_version: int = 0

    @property
    def lease(self) -> tuple[str, int]:
        return self.state.stream, self.owner.token

    @property
    def context(self) -> dict[str, Any]:
        return event_context(self.state, self.owner)


def plan_for(state: InstanceState, code: WorkflowCode, context: int) -> ContextPlan:
    # Shares the state's documents (no copy on the claim path): the context hands the code
    # only copies of them (``context.handed_out``), so the fold and its snapshots stay the
    # journal's even where the code runs in this process.
    return ContextPlan(
        stream=state.stream,
        workflow=state.workflow,
        version=code.version,
        instance_id=state.instance_id,
        params=state.params,
        steps={name: record.to_plan() for name, record in state.steps.items()},
        context=context,
    )


class WorkflowEngine:
    def __init__(
        self,
        store: EventStore,
        provider: CodeProvider,
        clock: Clock,
        worker_id: str,
        lease_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.provider = provider
        self.clock = clock
        self.worker_id = worker_id
        self.lease_seconds = check_lease_seconds(lease_seconds)
        self._told: set[tuple[str, str]] = set()  # (uid, Space) skipped and logged once

    @property
    def types(self) -> list[str]:
        return [workflow_row_type(uid) for uid in self.provider.workflows()]

    def _now(self) -> int:
        return to_micros(self.clock.now())

    # -- one turn: steps, ends and claims together -----------------------------------------

    def cycle(
        self,
        requests: Sequence[tuple[HeldContext, tuple[Any, ...]]],
        ends: Sequence[tuple[HeldContext, ContextEnd | None]],
        claim_limit: int,
    ) -> tuple[list[tuple[Any, ...]], list[HeldContext], int]:
        """Commit step requests, context ends and up to ``claim_limit`` new claims in
        **one** transaction (group commit), then answer the requests (DW-DO-3: a reply
        only after its commit).

        Returns the replies (in ``requests`` order), the contexts newly claimed, and how
        many rows the claims acted on. An item whose stream moved is decided again on
        its own; the rest of the group still commits.
        """
        now = self._now()
        at = micros_instant(now)
        replies: dict[HeldContext, tuple[Any, ...]] = {}
        group: list[tuple[list[Append], _Item]] = []
        for held, message in requests:
            append, reply = self._decide_request(held, message, now, at)
            if append is None:
                replies[held] = reply
            else:
                group.append(([append], _Item("request", held, held.state, append, reply)))
        ended: list[tuple[HeldContext, ContextEnd | None]] = []
        for held, end in ends:
            if end is None or held.abandoned:
                # Stopped from outside (fenced, lease lost): learn why from the journal.
                refresh(self.store, held.state)
            append = self._decide_end(held, end, now, at)
            if append is not None:
                ended.append((held, end))
                group.append(([append], _Item("end", held, held.state, append, None)))
        purges: list[tuple[InstanceState, list[int]]] = []
        if claim_limit > 0:
            claims, purges = self._prepare_claims(claim_limit, now, at)
            group += [([item.append], item) for item in claims]
        committed = commit_group(self.store, group)
        helds: list[HeldContext] = []
        done: set[int] = set()
        for item in committed:
            fold_in(item.state, item.append)
            done.add(id(item))
            if item.kind == "request":
                assert item.held is not None and item.reply is not None
                replies[item.held] = item.reply
            elif item.kind == "claim" and item.held is not None:
                helds.append(item.held)
        claimed = sum(1 for item in committed if item.kind == "claim")
        # Lost a race (an event arrived, a termination): fold it in and decide again.
        retry = [(h, m) for h, m in requests if h not in replies]
        for held, _ in retry:
            refresh(self.store, held.state)
        for held, reply in zip((h for h, _ in retry), self.request(retry), strict=True):
            replies[held] = reply
        unfinished = {id(i.held) for _, i in group if i.kind == "end" and id(i) not in done}
        if unfinished:
            again = [(h, e) for h, e in ended if id(h) in unfinished]
            for held, _ in again:
                refresh(self.store, held.state)
            self.finish(again)
        for state, positions in purges:
            self.purge(state, positions)
        self._keep_snapshots([i.held for i in committed if i.kind == "end" and i.held is not None])
        return [replies[held] for held, _ in requests], helds, claimed + len(purges)

    # -- claiming --------------------------------------------------------------------------

    def claim(self, limit: int) -> tuple[list[HeldContext], int]:
        """Claim up to ``limit`` due instances. Returns the contexts now held and how many
        rows were acted on (contexts started, instances ended or purged)."""
        _, helds, acted = self.cycle([], [], limit)
        return helds, acted

    def _prepare_claims(
        self, limit: int, now: int, at: str
    ) -> tuple[list[_Item], list[tuple[InstanceState, list[int]]]]:
        hold = now + int(min(self.lease_seconds, RESERVATION_HOLD.total_seconds()) * 1_000_000)
        streams = self.store.reserve_due_tails(now, hold, self.worker_id, self.types, limit)
        items: list[_Item] = []
        purges: list[tuple[InstanceState, list[int]]] = []
        for stream, (snapshot, tail) in streams.items():
            if not tail or not tail[-1].type.startswith("workflow."):
                continue
            state, events, since = instance_snapshots.fold_tail(self.store, stream, snapshot, tail)
            if state.purged or not state.exists:
                continue
            owner = Owner(state.contexts + 1, state.fencing_token + 1, self.worker_id)
            code = self._pick(state)
            version = code.version if code is not None else "unavailable"
            kind, decided = decide_claim(state, now, owner, version, self.lease_seconds)
            if kind == "purge":
                if since:  # the purge deletes every event: their positions, all of them
                    events = self.store.read_stream(stream)
                purges.append((state, [e.position for e in events]))
                continue
            if not decided or (kind == "context" and code is None):
                continue
            ctx = event_context(state, owner if kind == "context" else None)
            append = stamp(state, decided, at, ctx)
            held = None
            if kind == "context":
                assert code is not None
                plan = plan_for(state, code, owner.context)
                held = HeldContext(state, owner, code, plan, snapshot_version=since)
            items.append(_Item("claim", held, state, append, None))
        return items, purges

    def _pick(self, state: InstanceState) -> WorkflowCode | None:
        space = self.provider.space_of(state.workflow)
        if space is not None and space != state.space:
            # Another Space's instance of a uid this process registered for its own Space
            # (two applications on one store, one code registration each): its code and env
            # are that Space's, never run here; it stays due for its own workers. Their
            # reservations still take each other's rows for a turn (W15): said once.
            if (state.workflow, state.space) not in self._told:
                self._told.add((state.workflow, state.space))
                log.warning(
                    "workflow %r is registered here for Space %r and has instances of Space "
                    "%r on this store: they are not run here, and each Space's workers delay "
                    "the other's; give each Space's registration its own uid",
                    state.workflow, space, state.space,
                )  # fmt: skip
            return None
        try:
            return self.provider.pick(state.workflow)
        except LookupError:
            return None

    # -- step requests ---------------------------------------------------------------------

    def _decide_request(
        self, held: HeldContext, message: tuple[Any, ...], now: int, at: str
    ) -> tuple[Append | None, tuple[Any, ...]]:
        """The append a step request needs (None: answer at once) and its reply."""
        if held.abandoned or is_fenced(held.state, held.owner):
            return None, ("stop", "fenced", "")
        decision = decide_step(held.state, message, now)
        held.suspension = decision.suspension
        if decision.reply[0] == "stop" and decision.reply[1] not in ("fenced", "suspend"):
            held.verdict = (decision.reply[1], decision.reply[2])
        if not decision.events:
            return None, decision.reply
        return stamp(held.state, decision.events, at, held.context), decision.reply

    def request(
        self, items: Sequence[tuple[HeldContext, tuple[Any, ...]]]
    ) -> list[tuple[Any, ...]]:
        """Decide and commit the step requests of many contexts in one transaction.

        Each reply is sent only after its decision is committed (DW-DO-3).
        """
        now = self._now()
        at = micros_instant(now)
        replies: dict[HeldContext, tuple[Any, ...]] = {}
        todo = [held for held, _ in items]
        requests = dict(items)
        for _ in range(_REBASES):
            group: list[tuple[list[Append], tuple[HeldContext, Append, tuple[Any, ...]]]] = []
            for held in todo:
                append, reply = self._decide_request(held, requests[held], now, at)
                if append is None:
                    replies[held] = reply
                else:
                    group.append(([append], (held, append, reply)))
            committed = commit_group(self.store, group)
            for held, append, reply in committed:
                fold_in(held.state, append)
                replies[held] = reply
            done = {held for held, _, _ in committed}
            todo = [held for _, (held, _, _) in group if held not in done]
            if not todo:
                break
            for held in todo:  # the stream moved: fold it in and decide again
                refresh(self.store, held.state)
        for held in todo:
            replies[held] = ("stop", "fenced", "")
        return [replies[held] for held, _ in items]

    # -- ends ------------------------------------------------------------------------------

    def _decide_end(
        self, held: HeldContext, end: ContextEnd | None, now: int, at: str
    ) -> Append | None:
        if end is not None and held.verdict is not None:
            end = ContextEnd("errored", *held.verdict)
        events = decide_end(
            held.state,
            held.owner,
            now,
            kind=end.kind if end is not None else "lost",
            reason=end.reason if end is not None else None,
            message=end.message if end is not None else "",
            output=end.output if end is not None else None,
            suspension=held.suspension if end is not None else None,
        )
        return stamp(held.state, events, at, held.context) if events else None

    def finish(self, items: Sequence[tuple[HeldContext, ContextEnd | None]]) -> None:
        """Record how contexts ended, after their code stopped: sleeping, waiting, a
        retry, a terminal state, or termination (``None``: the process running it
        died or was killed by us)."""
        now = self._now()
        at = micros_instant(now)
        ends = dict(items)
        todo = [held for held, _ in items]
        for held in todo:
            if ends[held] is None or held.abandoned:
                refresh(self.store, held.state)  # stopped from outside: learn why
        for _ in range(_REBASES):
            group: list[tuple[list[Append], tuple[HeldContext, Append]]] = []
            for held in todo:
                append = self._decide_end(held, ends[held], now, at)
                if append is not None:
                    group.append(([append], (held, append)))
            committed = commit_group(self.store, group)
            for held, append in committed:
                fold_in(held.state, append)
            self._keep_snapshots([held for held, _ in committed])
            done = {held for held, _ in committed}
            todo = [held for _, (held, _) in group if held not in done]
            if not todo:
                return
            for held in todo:
                refresh(self.store, held.state)

    def _keep_snapshots(self, helds: Sequence[HeldContext]) -> None:
        """Snapshot the instances whose context just ended suspended (sleeping, waiting,
        a retry due) with a long history since their last snapshot: the next claim folds
        the snapshot and the events after it. A cache only: failing to write one costs
        the next claim a full fold, nothing else."""
        for held in helds:
            state = held.state
            if state.is_terminal or state.purged or state.context_open:
                continue
            if state.version - held.snapshot_version < instance_snapshots.SNAPSHOT_EVERY:
                continue
            try:
                instance_snapshots.write(self.store, state)
            except (BlackOpsError, ValueError, TypeError) as error:
                log.warning("snapshot of %s not written: %s", state.stream, error)
                continue
            held.snapshot_version = state.version

    # -- leases ----------------------------------------------------------------------------

    def renew(self, helds: Sequence[HeldContext]) -> list[HeldContext]:
        """Heartbeat; returns (and marks abandoned) the contexts whose lease was lost."""
        live = [h for h in helds if not h.abandoned]
        if not live:
            return []
        now = self.clock.now()
        until = now + timedelta(seconds=self.lease_seconds)
        kept = set(
            self.store.renew_leases(
                [h.lease for h in live], self.worker_id, to_micros(now), to_micros(until)
            )
        )
        lost = [h for h in live if h.state.stream not in kept]
        for held in lost:
            held.abandoned = True
        return lost

    def fenced(self, helds: Sequence[HeldContext]) -> list[HeldContext]:
        """A cheap read: the contexts whose rows no longer name this worker and token
        (terminated, or claimed by another worker). They must be stopped at once."""
        live = [h for h in helds if not h.abandoned]
        if not live:
            return []
        kept = set(self.store.held_leases([h.lease for h in live], self.worker_id))
        return [h for h in live if h.state.stream not in kept]

    # -- retention -------------------------------------------------------------------------

    def purge(
        self,
        state: InstanceState,
        positions: list[int],
        *,
        actor: dict[str, str] | None = None,
        reason: str = "retention",
    ) -> bool:
        """Purge a terminal instance whose retention ended (DW-RET-1); see purge_instance."""
        return purge_instance(
            self.store,
            self.clock,
            state,
            positions,
            actor=actor,
            reason=reason,
            by=self.worker_id,
        )
