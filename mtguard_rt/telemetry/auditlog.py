"""The JSON Lines audit log: one `AuditRecord` per line, appended and flushed per record.

`AuditLog.write` is safe for concurrent callers (an anyio lock serialises whole lines) and
the file is opened in append mode, so a crash loses at most the record being written.
`read_audit_log` yields records lazily and turns a malformed line into `AuditLogError`
naming the file and line number, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import anyio
import msgspec

from ..errors import AuditLogError, TelemetryError
from ..model import AuditRecord, record_decoder

_encoder = msgspec.json.Encoder()


class AuditLog:
    """Appends records to `path` (parents created). Use as a (sync or async) context manager."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = anyio.Lock()
        self._file: IO[bytes] | None = None
        self.written = 0

    def _open(self) -> IO[bytes]:
        if self._file is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "ab")
            except OSError as exc:
                raise TelemetryError(f"cannot open the audit log {self.path}: {exc}") from exc
        return self._file

    def write_sync(self, record: AuditRecord) -> None:
        """Append one record and flush. For callers outside an event loop."""
        line = _encoder.encode(record) + b"\n"
        f = self._open()
        try:
            f.write(line)
            f.flush()
        except OSError as exc:
            raise TelemetryError(f"cannot append to the audit log {self.path}: {exc}") from exc
        self.written += 1

    async def write(self, record: AuditRecord) -> None:
        """Append one record and flush; concurrent writers never interleave lines."""
        async with self._lock:
            self.write_sync(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> AuditLog:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_audit_log(path: str | os.PathLike[str]) -> Iterator[AuditRecord]:
    """Yield each record in file order; blank lines are skipped."""
    name = os.fspath(path)
    try:
        f = open(name, "rb")
    except OSError as exc:
        raise TelemetryError(f"cannot read the audit log {name}: {exc.strerror}") from exc
    with f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield record_decoder.decode(line)
            except msgspec.DecodeError as exc:
                raise AuditLogError(name, number, str(exc)) from exc
