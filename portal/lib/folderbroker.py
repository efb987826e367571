"""The embedded mode's Celery broker: kombu's filesystem transport, with writes a reader never sees half-done.

kombu's `filesystem` transport creates a message file under its final name and then writes it, and its consumers do
not lock: a consumer that lists the folder in between reads an empty or partial file, `json.loads` raises, and the
exception ends the Celery worker (kombu#1551, open). Here:

- a message is written to a hidden temporary file in the same folder and renamed into place (`os.replace`, atomic
  on one filesystem), so a `*.msg` file is always complete;
- a consumer claims a message by renaming it into `.claimed/` in the same folder (one consumer wins, nothing is
  copied across filesystems as kombu's move to the system's temporary folder may do), and a file that still cannot
  be read (written by an older version, a full disk, a hand edit) is moved to `.corrupt/` with a warning instead of
  stopping consumption;
- an exchange's binding table is created whole (written aside, then hard-linked into place), never seen empty.

Settings select it with `CELERY_BROKER_TRANSPORT` (the URL stays `filesystem://`); the transport options are
kombu's own.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from contextlib import suppress
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)

CLAIMED = ".claimed"  # a dot first: kombu's name test (`<stamp>_<uuid>.<queue>.msg`) never matches these
CORRUPT = ".corrupt"
INCOMING = ".incoming-"


def write_whole(folder: str | os.PathLike, name: str, data: bytes, *, replace: bool = True) -> None:
    """Write `folder/name` so that no reader ever sees it partly written: a hidden temporary file in the same
    folder, then renamed over `name` (`replace`), or linked to it only where there is none (FileExistsError)."""
    fd, temporary = tempfile.mkstemp(prefix=INCOMING, dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if replace:
            os.replace(temporary, os.path.join(folder, name))
        else:
            os.link(temporary, os.path.join(folder, name))
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temporary)


class Channel(filesystem.Channel):
    """kombu's filesystem channel with whole writes and a consumer that survives a file it cannot read."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_whole(self.data_folder_out, name, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory {self.data_folder_out!r}") from exc

    def _get(self, queue: str) -> dict[str, Any]:
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        claimed_folder = folder / CLAIMED
        claimed_folder.mkdir(exist_ok=True)
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = claimed_folder / f"{os.getpid()}-{name}"
            try:
                os.rename(folder / name, claimed)
            except FileNotFoundError:
                continue  # another consumer took it first
            try:
                message = loads(bytes_to_str(claimed.read_bytes()))
                if not isinstance(message, dict):
                    raise ValueError(f"a message is a JSON object, not {type(message).__name__}")
            except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                self._quarantine(claimed, name, exc)
                continue
            self._done(claimed, name)
            return message
        raise Empty()

    def _quarantine(self, claimed: Path, name: str, exc: Exception) -> None:
        corrupt = Path(self.data_folder_in) / CORRUPT
        corrupt.mkdir(exist_ok=True)
        try:
            os.replace(claimed, corrupt / name)
        except OSError:
            with suppress(OSError):
                claimed.unlink()
        logger.warning("Broker: message file %s cannot be read (%s); moved to %s", name, exc, corrupt)

    def _done(self, claimed: Path, name: str) -> None:
        if self.store_processed:
            os.replace(claimed, Path(self.processed_folder) / name)
        else:
            with suppress(FileNotFoundError):
                claimed.unlink()

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        # kombu opens a new binding table with "wb" before it takes the lock, so a reader can see it empty.
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        if not file.exists():
            entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
            try:
                write_whole(self.control_folder, file.name, str_to_bytes(dumps([entry])), replace=False)
                return
            except FileExistsError:
                pass  # another process made the table first: add to it under kombu's lock
            except OSError as exc:
                raise ChannelError(f"Cannot open {file}") from exc
        super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    """kombu's filesystem transport with the channel above (same options, same folders)."""

    Channel = Channel
