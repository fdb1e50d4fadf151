"""The driver's records of its shares and snapshots: one JSON file per
object id, replaced atomically. They say what the backend should hold (a
share's protocol, size, export id and applied rules); what it does hold is
read from the host (image, mount, server configuration)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sharemgr.drivers.local.fencing import write_atomic

CREATING, AVAILABLE, DELETING = "creating", "available", "deleting"
# Unmounted for an offline resize; a share found so after a crash is
# finished (its filesystem fitted to its image) and mounted again.
RESIZING = "resizing"

# A record as its JSON file holds it: the keys are the driver's own (id,
# kind, proto, size, export_id, rules, state, ...), read where they are used.
Record = dict[str, Any]


class Records:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def setup(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, object_id: str) -> Path:
        return self.folder / f"{object_id}.json"

    def get(self, object_id: str) -> Record | None:
        try:
            record: Record | None = json.loads(self._path(object_id).read_text())
            return record
        except FileNotFoundError:
            return None

    def put(self, record: Record) -> None:
        write_atomic(self._path(record["id"]), json.dumps(record, sort_keys=True))

    def remove(self, object_id: str) -> None:
        self._path(object_id).unlink(missing_ok=True)

    def all(self, kind: str | None = None) -> list[Record]:
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                continue  # removed meanwhile
            if kind is None or record.get("kind") == kind:
                found.append(record)
        return found
