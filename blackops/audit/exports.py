"""Signed exports: the manifest names a signed checkpoint that covers the export and proves
the export's range is in it (``replay.receipts.verify_signed_export`` checks it offline).

``attestation`` in the manifest:

- ``firstIndex`` and ``prefix``: the leaf index the range starts at, and the roots of the
  perfect subtrees of the leaves before it (base64, largest first);
- ``hidden``: ``[position, leaf hex]`` of every leaf in the range the file does not hold
  (purged events, another Space's events);
- ``checkpoint``: a signed checkpoint note whose tree includes the whole range;
- ``consistency``: the RFC 6962 proof from the tree at the range's end
  (``journalTreeSize``) to the checkpoint's tree.

From these and the file's own lines an offline verifier rebuilds the root at
``journalTreeSize`` and checks it against the signed root: a line forged together with the
manifest's leaves and root no longer leads to a root the log signed.
"""

from __future__ import annotations

import base64
from typing import Any

from blackops.audit.checkpoints import CheckpointService, JournalRewritten


def attest(service: CheckpointService, manifest: dict[str, Any]) -> dict[str, Any]:
    """Add the attestation to an export's manifest (signing a checkpoint if none covers it)."""
    size = int(manifest["journalTreeSize"])
    if size == 0:
        manifest["attestation"] = None
        return manifest
    tree = service.synced_tree()
    if tree.root(size).hex() != manifest["journalRoot"]:
        raise JournalRewritten("the journal changed while it was exported")
    # The leaves after ``after`` within the exported tree: none when ``after`` is past its end
    # (the tree synced now may hold events appended since, beyond ``size``).
    first = min(tree.count_through(int(manifest["after"])), size)
    exported = {int(p) for p, _ in manifest["leaves"]}
    hidden = [
        [tree.position_of(i), tree.leaf(i).hex()]
        for i in range(first, size)
        if tree.position_of(i) not in exported
    ]
    note, checkpoint = service.covering(size - 1)
    proof = tree.consistency(size, checkpoint.size) if size < checkpoint.size else []
    manifest["attestation"] = {
        "firstIndex": first,
        "prefix": [_b64(h) for h in tree.prefix_nodes(first)],
        "hidden": hidden,
        "checkpoint": service.with_cosignatures(note),
        "consistency": [_b64(h) for h in proof],
    }
    return manifest


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
