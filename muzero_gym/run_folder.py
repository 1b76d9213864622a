"""The run folder: one writer at a time, files written whole or not at all, errors in one line.

- :class:`RunLock` makes a run folder single-writer. It holds an exclusive ``flock`` on
  ``run.lock`` for as long as the run writes; the file names the owner (pid, host, start time)
  for the message a second writer gets. The kernel releases the lock when its process ends,
  however it ends, so a killed run leaves no stale lock behind: a lock file whose lock is not
  held is stale and simply taken over. On a file system without ``flock`` the recorded owner
  is the lock: it is stale when no process of that pid and start time runs on this host.
- :func:`atomic_write` writes a file through a temporary file in the same folder, fsyncs it,
  renames it over the target and fsyncs the folder, so a crash at any moment leaves either the
  old file or the new one. The new file gets the permissions of any file the user creates
  (``0o666`` less the umask), not the temporary file's ``0o600``.
- A stop signal during :func:`atomic_write` takes effect once the file is whole
  (:func:`muzero_gym.stops.deferred_stops`).
- :func:`remove_stale_temp_files` deletes what a process killed in the middle of
  :func:`atomic_write` left behind; call it while holding the lock.
- Every failure to write becomes a :class:`RunFolderError` naming what could not be written,
  where, and the operating system's reason ("No space left on device", "Permission denied").
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from muzero_gym.stops import deferred_stops

LOCK_NAME = "run.lock"
TEMP_SUFFIX = ".tmp"


class RunFolderError(RuntimeError):
    """A run folder cannot be used or written; the message says what, where and why."""


def os_reason(error: OSError) -> str:
    """The operating system's words for ``error`` ("No space left on device")."""
    return error.strerror or type(error).__name__


def check_run_name(name: str) -> str:
    """``name`` if it is a plain folder name: no path separators, not ``.`` or ``..``."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or (
            os.altsep and os.altsep in name) or "\0" in name:
        raise RunFolderError(f"run name {name!r}: must be a plain folder name (no '/', not "
                             "'.' or '..')")
    return name


def make_run_folder(path: str | Path) -> Path:
    """Creates ``path`` (and its parents) if needed; a file in the way or a folder that cannot
    be created is a RunFolderError."""
    path = Path(path)
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            raise RunFolderError(f"cannot create run folder {path}: {parent} is a file, not a "
                                 "folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create run folder {path}: {os_reason(e)}") from None
    return path


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - folders cannot be opened on some platforms
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None], what: str,
                 keeps: str = "") -> Path:
    """Writes ``path`` through ``write(file)`` atomically (see module doc); a stop signal during
    the write takes effect after it (:func:`~muzero_gym.stops.deferred_stops`). ``what`` names
    the file in errors ("checkpoint"); ``keeps`` says what is still there if it fails."""
    with deferred_stops():
        return _atomic_write(path, write, what, keeps)


def _atomic_write(path: str | Path, write: Callable[[IO[bytes]], None], what: str,
                  keeps: str) -> Path:
    path = Path(path)
    folder = path.parent
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
        _fsync_folder(folder)
    except OSError as e:
        detail = f"; {keeps}" if keeps else ""
        raise RunFolderError(f"could not write the {what} {path}: {os_reason(e)}{detail}"
                             ) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def remove_stale_temp_files(folder: str | Path) -> list[Path]:
    """Removes the temporary files :func:`atomic_write` leaves when its process is killed
    mid-write (``.<name>.<random>.tmp``); returns what was removed."""
    removed = []
    for candidate in Path(folder).glob(f".*{TEMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            candidate.unlink()
            removed.append(candidate)
    return removed


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: clock ticks since boot), to tell it from a later
    process that got the same pid; None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class RunLock:
    """An exclusive lock on a run folder for one writer (see module doc)::

        with RunLock(run_dir):
            ...  # write checkpoints and logs
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._file: IO[str] | None = None
        self._flocked = True

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> RunLock:
        """Takes the lock or raises RunFolderError naming its holder."""
        if self._file is not None:
            return self
        import fcntl

        make_run_folder(self.folder)
        try:
            file = open(self.path, "a+")  # noqa: SIM115 - held open while locked
        except OSError as e:
            raise RunFolderError(f"cannot lock run folder {self.folder}: {os_reason(e)}"
                                 ) from None
        file.seek(0)
        recorded = file.read()
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._flocked = True
        except BlockingIOError:
            file.close()
            raise RunFolderError(f"run folder {self.folder} is in use by "
                                 f"{_describe_owner(recorded)}; wait for it to end or use "
                                 "another --run-name") from None
        except OSError:  # a file system without flock: trust the recorded owner instead
            self._flocked = False
            if _owner_alive(recorded):
                file.close()
                raise RunFolderError(f"run folder {self.folder} is in use by "
                                     f"{_describe_owner(recorded)}; wait for it to end or "
                                     "use another --run-name") from None
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "process_start": _process_start(os.getpid()),
                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            file.seek(0)
            file.truncate()
            file.write(json.dumps(owner) + "\n")
            file.flush()
        except OSError as e:
            file.close()
            raise RunFolderError(f"cannot lock run folder {self.folder}: {os_reason(e)}"
                                 ) from None
        self._file = file
        return self

    def release(self) -> None:
        if self._file is None:
            return
        import fcntl

        with contextlib.suppress(OSError):
            if self._flocked:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            else:  # the recorded owner is the lock: clear it
                self._file.truncate(0)
        self._file.close()
        self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _owner_alive(text: str) -> bool:
    """Whether the owner recorded in a lock file still runs: a process of this host with its
    pid and start time. An owner on another host cannot be checked and counts as alive."""
    try:
        owner = json.loads(text)
        pid, host = int(owner["pid"]), str(owner["host"])
    except (ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    recorded = owner.get("process_start")
    return recorded is None or recorded == _process_start(pid)


def _describe_owner(text: str) -> str:
    try:
        owner = json.loads(text)
        return (f"process {owner['pid']} on {owner['host']} (since {owner['since']})")
    except (ValueError, KeyError, TypeError):
        return "another process"
