"""The filesystem seam the log writes through (LevelDB's `Env`, reduced to what the log needs).

`RealFileSystem` maps each call to one `os` call on a file descriptor. `FaultInjectingFileSystem` keeps files in
memory and remembers, per file, the contents as of its last fsync and, per directory, its file entries as of its
last directory fsync; `crash()` throws away everything that was not fsynced (optionally keeping a torn prefix of
it), which is what a power cut does to the page cache. It can also fail chosen calls, after writing part of the
buffer when the call writes (a disk filling up). Tests use it to check recovery of torn tails, lost index files,
unflushed appends and lost renames without killing processes.

Every method may raise `OSError`; the log treats one as the failure of the whole log dir (see log_manager.py).

Handles are plain ints. Paths are `pathlib.Path`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class FileSystem(Protocol):
    def open(self, path: Path, *, create: bool = True) -> int:
        """Open for reading and writing; create the file when `create` and it is missing."""
        ...

    def close(self, handle: int) -> None: ...
    def append(self, handle: int, data: bytes | bytearray | memoryview, end: int | None = None) -> None:
        """Write at the end of the file; `end`, when the caller knows it, saves finding it."""
        ...

    def pwrite(self, handle: int, data: bytes | bytearray | memoryview, position: int) -> None: ...
    def pread(self, handle: int, size: int, position: int) -> bytes: ...
    def size(self, handle: int) -> int: ...
    def fsync(self, handle: int) -> None: ...
    def truncate(self, handle: int, size: int) -> None: ...
    def rename(self, src: Path, dst: Path) -> None: ...
    def unlink(self, path: Path) -> None: ...
    def listdir(self, path: Path) -> list[str]: ...
    def exists(self, path: Path) -> bool: ...
    def is_dir(self, path: Path) -> bool: ...
    def mkdir(self, path: Path) -> None: ...
    def rmtree(self, path: Path) -> None: ...
    def fsync_dir(self, path: Path) -> None: ...
    def mtime_ms(self, path: Path) -> int: ...
    def lock(self, path: Path) -> int:
        """Take an exclusive lock on `path` (created if missing); raises BlockingIOError if another holds it."""
        ...

    def unlock(self, handle: int) -> None: ...


def read_whole(fs: FileSystem, path: Path) -> bytes:
    handle = fs.open(path, create=False)
    try:
        return fs.pread(handle, fs.size(handle), 0)
    finally:
        fs.close(handle)


def write_atomically(fs: FileSystem, path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write to `<path>.tmp`, fsync, rename over `path`, fsync the directory: readers see old or new, never half,
    and a power cut keeps the new one. `sync=False` skips both fsyncs (a file that can be rebuilt if lost)."""
    tmp = path.with_name(path.name + ".tmp")
    handle = fs.open(tmp)
    try:
        fs.truncate(handle, 0)
        fs.pwrite(handle, data, 0)
        if sync:
            fs.fsync(handle)
    finally:
        fs.close(handle)
    fs.rename(tmp, path)
    if sync:
        fs.fsync_dir(path.parent)


class RealFileSystem:
    def open(self, path: Path, *, create: bool = True) -> int:
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)

    def close(self, handle: int) -> None:
        os.close(handle)

    def append(self, handle: int, data: bytes | bytearray | memoryview, end: int | None = None) -> None:
        # No O_APPEND: on Linux it would also make pwrite append. A segment knows its end (one pwrite per
        # append); others seek to it first.
        position = os.lseek(handle, 0, os.SEEK_END) if end is None else end
        view = memoryview(data)
        while view:  # a write may write less than asked (signals, full disks)
            written = os.pwrite(handle, view, position)
            view = view[written:]
            position += written

    def pwrite(self, handle: int, data: bytes | bytearray | memoryview, position: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(handle, view, position)
            view = view[written:]
            position += written

    def pread(self, handle: int, size: int, position: int) -> bytes:
        return os.pread(handle, size, position)

    def size(self, handle: int) -> int:
        return os.fstat(handle).st_size

    def fsync(self, handle: int) -> None:
        os.fsync(handle)

    def truncate(self, handle: int, size: int) -> None:
        os.ftruncate(handle, size)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def listdir(self, path: Path) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: Path) -> bool:
        return os.path.isdir(path)

    def mkdir(self, path: Path) -> None:
        os.makedirs(path, exist_ok=True)

    def rmtree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mtime_ms(self, path: Path) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def lock(self, path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd

    def unlock(self, handle: int) -> None:
        os.close(handle)  # closing the descriptor releases the flock


@dataclass(eq=False)
class _MemFile:
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray | None = None  # contents as of the last fsync; None = never fsynced
    mtime_ms: int = 0


class FaultInjectingFileSystem:
    """In-memory filesystem that can lose what was not fsynced, and fail chosen operations.

    Simplifications, stated so tests do not rely on more: directories themselves (mkdir, rename, rmtree of a
    directory) are durable at once. File entries (create, rename, unlink of a file) are durable at once too,
    like a journaling filesystem that orders metadata, unless `crash(drop_unsynced_dir_entries=True)` asks for
    the strict POSIX rule: then each directory's file entries go back to what they were at its last
    `fsync_dir` (none if it never had one). A file that was never fsynced comes back empty after `crash()` (or
    disappears with `drop_unsynced_files=True`).
    """

    def __init__(self) -> None:
        self.files: dict[Path, _MemFile] = {}
        self.dirs: set[Path] = {Path("/")}
        self._synced_entries: dict[Path, dict[str, _MemFile]] = {}  # per directory, as of its last fsync_dir
        self._handles: dict[int, Path] = {}
        self._next_handle = 1
        self._fail: dict[str, tuple[OSError, int | None]] = {}
        self.fsync_count = 0
        self.now_ms = 0
        self._locks: dict[int, Path] = {}

    # --- fault injection ---------------------------------------------------------------------------------

    def fail_next(
        self, operation: str, error: OSError | None = None, *, after_bytes: int | None = None
    ) -> None:
        """Make the next call of `operation` (e.g. "append", "fsync") raise `error` (default ENOSPC). For
        "append" and "pwrite", `after_bytes` first writes that many bytes of the buffer, as a write that fills
        the disk does."""
        error = error or OSError(errno.ENOSPC, "No space left on device (injected)")
        self._fail[operation] = (error, after_bytes)

    def crash(self, *, keep_unsynced_bytes: int = 0, drop_unsynced_files: bool = False,
              drop_unsynced_dir_entries: bool = False) -> None:  # fmt: skip
        """Lose every unfsynced write. `keep_unsynced_bytes` keeps that many bytes of each file's unsynced
        appended tail, to model a torn write; `drop_unsynced_dir_entries` undoes file creations, renames and
        unlinks that no directory fsync made durable. Open handles are invalidated."""
        self._handles.clear()
        self._locks.clear()
        if drop_unsynced_dir_entries:
            self.files = {
                directory / name: mem
                for directory, entries in self._synced_entries.items()
                for name, mem in entries.items()
            }
        for path in list(self.files):
            mem = self.files[path]
            if mem.durable is None:
                if drop_unsynced_files:
                    del self.files[path]
                    continue
                durable = bytearray()
            else:
                durable = mem.durable
            extra = b""
            if keep_unsynced_bytes and len(mem.data) > len(durable) and mem.data[: len(durable)] == durable:
                extra = mem.data[len(durable) : len(durable) + keep_unsynced_bytes]
            mem.data = bytearray(durable) + extra
            mem.durable = bytearray(mem.data) if mem.durable is not None or extra else None

    def _maybe_fail(self, operation: str) -> None:
        failure = self._fail.pop(operation, None)
        if failure is not None:
            raise failure[0]

    def _injected_write(self, operation: str, data: bytes | bytearray | memoryview):
        """(what to write, error to raise after writing it or None)."""
        failure = self._fail.pop(operation, None)
        if failure is None:
            return data, None
        error, after_bytes = failure
        if after_bytes is None:
            raise error
        return memoryview(data)[:after_bytes], error

    def _file(self, handle: int) -> _MemFile:
        try:
            return self.files[self._handles[handle]]
        except KeyError:
            raise OSError(errno.EBADF, "bad file handle") from None

    # --- FileSystem ----------------------------------------------------------------------------------------

    def open(self, path: Path, *, create: bool = True) -> int:
        self._maybe_fail("open")
        path = Path(path)
        if path not in self.files:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
            if path.parent not in self.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", str(path.parent))
            self.files[path] = _MemFile(mtime_ms=self.now_ms)
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = path
        return handle

    def close(self, handle: int) -> None:
        self._handles.pop(handle, None)

    def append(self, handle: int, data: bytes | bytearray | memoryview, end: int | None = None) -> None:
        data, error = self._injected_write("append", data)
        mem = self._file(handle)
        if end is not None and end != len(mem.data):
            raise AssertionError(f"append at {end}, but the file ends at {len(mem.data)}")
        mem.data += data
        mem.mtime_ms = self.now_ms
        if error is not None:
            raise error

    def pwrite(self, handle: int, data: bytes | bytearray | memoryview, position: int) -> None:
        data, error = self._injected_write("pwrite", data)
        mem = self._file(handle)
        end = position + len(data)
        if end > len(mem.data):
            mem.data.extend(bytes(end - len(mem.data)))
        mem.data[position:end] = data
        mem.mtime_ms = self.now_ms
        if error is not None:
            raise error

    def pread(self, handle: int, size: int, position: int) -> bytes:
        self._maybe_fail("pread")
        return bytes(self._file(handle).data[position : position + size])

    def size(self, handle: int) -> int:
        return len(self._file(handle).data)

    def fsync(self, handle: int) -> None:
        self._maybe_fail("fsync")
        mem = self._file(handle)
        mem.durable = bytearray(mem.data)
        self.fsync_count += 1

    def truncate(self, handle: int, size: int) -> None:
        self._maybe_fail("truncate")
        mem = self._file(handle)
        if size <= len(mem.data):
            del mem.data[size:]
        else:
            mem.data.extend(bytes(size - len(mem.data)))

    def rename(self, src: Path, dst: Path) -> None:
        self._maybe_fail("rename")
        src, dst = Path(src), Path(dst)
        if src in self.dirs:
            for path in sorted(p for p in self.dirs if p == src or src in p.parents):
                self.dirs.discard(path)
                self.dirs.add(dst / path.relative_to(src))
                if path in self._synced_entries:
                    self._synced_entries[dst / path.relative_to(src)] = self._synced_entries.pop(path)
            for path in [p for p in self.files if src in p.parents]:
                self.files[dst / path.relative_to(src)] = self.files.pop(path)
            for handle, path in self._handles.items():
                if src in path.parents:
                    self._handles[handle] = dst / path.relative_to(src)
            return
        if src not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file", str(src))
        self.files[dst] = self.files.pop(src)
        for handle, path in self._handles.items():
            if path == src:
                self._handles[handle] = dst

    def unlink(self, path: Path) -> None:
        self._maybe_fail("unlink")
        if Path(path) not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
        del self.files[Path(path)]

    def listdir(self, path: Path) -> list[str]:
        path = Path(path)
        if path not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "No such directory", str(path))
        names = {p.name for p in self.files if p.parent == path} | {
            p.name for p in self.dirs if p.parent == path
        }
        names.discard("")
        return sorted(names)

    def exists(self, path: Path) -> bool:
        return Path(path) in self.files or Path(path) in self.dirs

    def is_dir(self, path: Path) -> bool:
        return Path(path) in self.dirs

    def mkdir(self, path: Path) -> None:
        path = Path(path)
        self.dirs.add(path)
        self.dirs.update(path.parents)

    def rmtree(self, path: Path) -> None:
        path = Path(path)
        self.dirs = {p for p in self.dirs if p != path and path not in p.parents}
        self.files = {p: f for p, f in self.files.items() if path not in p.parents}
        self._synced_entries = {p: e for p, e in self._synced_entries.items() if p in self.dirs}

    def fsync_dir(self, path: Path) -> None:
        self._maybe_fail("fsync_dir")
        path = Path(path)
        self._synced_entries[path] = {p.name: f for p, f in self.files.items() if p.parent == path}

    def mtime_ms(self, path: Path) -> int:
        return self.files[Path(path)].mtime_ms

    def lock(self, path: Path) -> int:
        if Path(path) in self._locks.values():
            raise BlockingIOError(errno.EWOULDBLOCK, "lock held", str(path))
        handle = self.open(path)
        self._locks[handle] = Path(path)
        return handle

    def unlock(self, handle: int) -> None:
        self._locks.pop(handle, None)
        self.close(handle)
