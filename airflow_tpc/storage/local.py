"""Local (POSIX) file system backend.

The commit point is a fully written temporary file linked into place with
``link(2)``, which fails if the name exists: a put-if-absent that never exposes a
partial record.  Promotion swaps whole directories with ``renameat2(2)``'s
``RENAME_EXCHANGE`` (Linux), so readers see the old epoch or the new one, never
a mix, at the cost of a constant number of renames per epoch.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import stat
import time
import uuid
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import StorageError
from .base import CHUNK, ObjectInfo, StatusDigest, Storage
from .local_status import status_of_listing, walk_status

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = None
try:  # pragma: no branch - platform dependent
    _libc = ctypes.CDLL(None, use_errno=True)
    _renameat2 = _libc.renameat2
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
except (OSError, AttributeError):  # non-Linux or old glibc
    _renameat2 = None


def _exchange(a: str, b: str) -> bool:
    """Atomically exchange two directories; False when the platform can't."""
    if _renameat2 is None:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(Storage):
    scheme = "file"
    atomic_dir_rename = True

    @classmethod
    def lineage_name(cls, uri: str) -> tuple[str, str]:
        return "file", uri.removeprefix("file://")

    def uri(self, path: str) -> str:
        return f"file://{path}"

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from None

    def iter_chunks(self, path: str) -> Iterator[bytes]:
        try:
            with open(path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    yield chunk
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from None

    def open_input(self, path: str) -> Any:
        try:
            return open(path, "rb")  # noqa: SIM115 - the caller closes it
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        # scandir, not os.walk + lstat + islink: one lstat a file (DirEntry caches it and
        # knows symlinks from the directory entry), which is most of a listing's cost.
        out: list[ObjectInfo] = []
        pending = [prefix]
        while pending:
            try:
                it = os.scandir(pending.pop())
            except (FileNotFoundError, NotADirectoryError):
                continue
            with it:
                for entry in it:
                    link = entry.is_symlink()
                    if not link and entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    out.append(ObjectInfo(
                        entry.path, st.st_size, None, link, st.st_nlink,
                        f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:"
                        f"{st.st_ctime_ns}"))
        return out

    def status_digest(self, prefix: str, skip: Container[str] = ()) -> StatusDigest | None:
        return walk_status(prefix, skip)

    def status_digest_of(self, prefix: str, listing: Iterable[ObjectInfo],
                         skip: Container[str] = ()) -> str | None:
        return status_of_listing(prefix, listing, skip)

    def list_dirs(self, prefix: str) -> list[str]:
        try:
            with os.scandir(prefix) as it:
                return [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def put(self, path: str, data: bytes) -> None:
        if not data and self._create_empty(path):
            return
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            _unlink(tmp)
            raise StorageError(f"cannot write {path}: {exc.strerror}") from None
        _fsync_dir(os.path.dirname(path))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
            created = True
        except FileExistsError:
            created = False
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc.strerror}") from None
        finally:
            _unlink(tmp)
        if created:
            _fsync_dir(os.path.dirname(path))
        return created

    def _create_empty(self, path: str) -> bool:
        """An absent empty file (a pending-index entry) made in place, with no temporary
        file and no fsync of its own: nothing in it can be seen half written, and the
        folder's fsync makes it durable.  False if something is there already."""
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror}") from None
        _fsync_dir(directory)
        return True

    def _write_temp(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            _unlink(tmp)
            raise StorageError(f"cannot write {path}: {exc.strerror}") from None
        return tmp

    def check_real_dirs(self, base: str, path: str, *, links_only: bool = False) -> None:
        base = base.rstrip("/")
        if path != base and not path.startswith(base + "/"):
            raise StorageError(f"{path} is not inside {base}")
        current = base
        for part in path[len(base):].strip("/").split("/"):
            if not part:
                continue
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return  # nothing below exists yet: nothing can lead elsewhere
            except OSError as exc:
                raise StorageError(f"cannot inspect {current}: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                raise StorageError(
                    f"{current} is a symbolic link (to {os.readlink(current)!r}); airflow-tpc "
                    "never publishes, lists or deletes through a link, since its real location "
                    "is outside the target. Replace it with a real directory.")
            if not stat.S_ISDIR(st.st_mode):
                if links_only:
                    return  # nothing below can exist; whoever uses the path finds out
                raise StorageError(f"{current} is not a directory")

    def staging_home_problem(self, root: str, home: str) -> str | None:
        """A local promotion is one ``rename``/``renameat2`` of staging into the target,
        which works only inside one mounted file system: probe exactly that (a folder
        made under ``home`` and renamed into ``<root>/_tpc``), so a target that is a
        mount point (or a bind mount), or whose parent is not writable, is told apart.
        What the probe created is removed again."""
        probe = f".tpc-probe-{uuid.uuid4().hex[:12]}"
        made = [p for p in (os.path.dirname(home), home) if not os.path.lexists(p)]
        src, dst = os.path.join(home, probe), os.path.join(root, "_tpc", probe)
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.makedirs(src)
            try:
                os.rename(src, dst)
            except OSError as exc:
                os.rmdir(src)
                return f"a folder cannot be renamed from {home} into {root} ({exc.strerror})"
            os.rmdir(dst)
            return None
        except OSError as exc:
            return f"{home} cannot be created ({exc.strerror})"
        finally:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)

    def check_target(self, root: str) -> None:
        try:
            st = os.stat(root)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot use target {root}: {exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise StorageError(f"target {root} exists and is not a directory")

    def delete_prefix(self, prefix: str) -> None:
        if os.path.islink(prefix) or os.path.isfile(prefix):
            _unlink(prefix)
            return
        for tries_left in range(4, -1, -1):
            try:
                shutil.rmtree(prefix)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                # ENOTEMPTY: a writer (a fenced job's straggling task) added a file
                # while the tree was being removed; go again, a few times.
                if exc.errno != errno.ENOTEMPTY or not tries_left:
                    raise StorageError(f"cannot remove {prefix}: {exc.strerror}") from None
                time.sleep(0.01)

    def prune_empty_parent(self, path: str) -> None:
        """Remove ``path``'s parent if it is now empty (an epoch folder in staging)."""
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path.rstrip("/")))

    def delete_files(self, paths: Iterable[str]) -> None:
        for path in paths:
            _unlink(path)

    def put_if_version(self, path: str, data: bytes, version: str | None) -> bool:
        """A plain atomic replace: every caller holds :meth:`promotion_lock`, so the
        check of the current version and this write cannot interleave with another."""
        self.put(path, data)
        return True

    @contextmanager
    def promotion_lock(self, root: str) -> Iterator[None]:
        """An flock on ``<root>/_tpc/promote.lock``: released by the kernel if we die.

        Local promotions of one target are serialised so two committers can never
        interleave a swap (e.g. one swapping back the other's displaced epoch).
        """
        directory = os.path.join(root, "_tpc")
        os.makedirs(directory, exist_ok=True)
        fd = os.open(os.path.join(directory, "promote.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def replace_dir(self, src: str, dst: str) -> bool:
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.lexists(dst):
                try:
                    os.rename(src, dst)
                    _fsync_dir(os.path.dirname(dst))
                    return False
                except OSError as exc:
                    # ENOTEMPTY/EEXIST: someone created dst meanwhile -> exchange below.
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
            if not _exchange(src, dst):
                # Portable fallback: two renames; between them the epoch is absent
                # (never mixed).  Documented in PROTOCOL.md.
                aside = f"{src}.old-{uuid.uuid4().hex[:8]}"
                os.rename(dst, aside)
                os.rename(src, dst)
                os.rename(aside, src)
            _fsync_dir(os.path.dirname(dst))
            _fsync_dir(os.path.dirname(src))
            return True
        except OSError as exc:
            raise StorageError(f"cannot move {src} to {dst}: {exc.strerror}") from None


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
