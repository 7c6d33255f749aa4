"""A witness's cost per checkpoint, beside its floor (printed, never asserted).

For a log of N leaves growing by 16 leaves per checkpoint, each the median of REPEATS:

  cosign        one tlog-cosignature v1 (Ed25519 over cosignature/v1 + body)
  fsync floor   writing a note-sized file atomically and durably (what the state costs)
  add           Witness.add_checkpoint in process: parse, verify the log's signature,
                verify the consistency proof, cosign, save atomically with fsync
  http          the same through ``POST /add-checkpoint`` on the standard library's server

Wall time (fsync is I/O, not CPU). Usage: .venv/bin/python bench/witness.py [--leaves N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
import httpx

from blackops.witness.server import Witness, make_server
from blackops.witness.state import WitnessState
from replay import cosignature, tlog_witness
from replay.merkle import Frontier, consistency_proof
from replay.notes import COSIGNATURE_KEY, Checkpoint, SigningKey, sign_note

REPEATS = 200
STEP = 16


def median_us(run: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    log_key = SigningKey.generate("bench.example/log")
    witness_key = SigningKey.generate("w.example", COSIGNATURE_KEY)
    leaves = [
        hashlib.sha256(b"\x00%d" % i).digest() for i in range(args.leaves + STEP * 2 * REPEATS)
    ]
    roots: dict[int, bytes] = {}
    frontier = Frontier()
    for i, leaf in enumerate(leaves, 1):
        frontier.append(leaf)
        if i >= args.leaves and (i - args.leaves) % STEP == 0:
            roots[i] = frontier.root()

    def request(old: int, new: int) -> bytes:
        note = sign_note(Checkpoint(log_key.name, new, roots[new]).body(), log_key)
        return tlog_witness.encode(old, consistency_proof(old, leaves[:new]), note)

    # The log's side (building each request, proof included) is prepared before timing.
    sizes = [args.leaves + STEP * k for k in range(2 * REPEATS + 1)]
    bodies = [request(sizes[k], sizes[k + 1]) for k in range(2 * REPEATS)]
    first = tlog_witness.encode(
        0, [], sign_note(Checkpoint(log_key.name, sizes[0], roots[sizes[0]]).body(), log_key)
    )
    body = Checkpoint(log_key.name, sizes[0], roots[sizes[0]]).body()
    with tempfile.TemporaryDirectory() as tmp:
        state = WitnessState(Path(tmp) / "state")
        witness = Witness(witness_key, [log_key.verifier()], state)
        witness.add_checkpoint(first)
        cosign_us = median_us(lambda: cosignature.cosign(body, witness_key, 1_700_000_000))
        floor_path = Path(tmp) / "floor"

        def floor() -> None:
            partial = floor_path.with_name("floor.partial")
            with open(partial, "wb") as handle:
                handle.write(bodies[0][-400:])
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, floor_path)
            fd = os.open(tmp, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

        floor_us = median_us(floor)
        queue = iter(bodies)
        add_us = median_us(lambda: witness.add_checkpoint(next(queue)))
        server = make_server(witness, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/add-checkpoint"
        with httpx.Client() as client:
            http_us = median_us(lambda: client.post(url, content=next(queue)).raise_for_status())
        server.shutdown()
    proof_lines = len(consistency_proof(sizes[0], leaves[: sizes[1]]))
    figures = {
        "leaves": args.leaves, "proofLines": proof_lines, "cosignUs": round(cosign_us, 1),
        "fsyncFloorUs": round(floor_us, 1), "addCheckpointUs": round(add_us, 1),
        "httpUs": round(http_us, 1),
    }  # fmt: skip
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"witness, log of {args.leaves} leaves, +{STEP} per checkpoint ({proof_lines} proof lines)"
    )
    print(f"  cosign          {cosign_us:9.1f} µs")
    print(f"  fsync floor     {floor_us:9.1f} µs   (atomic durable write of one note)")
    print(f"  add-checkpoint  {add_us:9.1f} µs   ({add_us / floor_us:.1f}x the floor)")
    print(f"  over HTTP       {http_us:9.1f} µs")


if __name__ == "__main__":
    main()
