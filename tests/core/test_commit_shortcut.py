"""A commit whose staging is as sealed checks one status digest, not every file.

Pre-commit seals the store's status digest of staging (``listing`` in the manifest:
names, inodes, sizes, times and links of every file); a commit holding the digest of
a manifest it validated before (the sensor's pointer) decodes only the manifest's
header and walks staging once.  Any change since the seal must send the commit back
to the file-by-file checks, which refuse it or let it through exactly as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

import pytest

from airflow_tpc import ManifestError, Sink, SinkConfig
from airflow_tpc.core.manifest import (
    MANIFEST_NAME,
    Manifest,
    SealedEntries,
    canonical_json,
    digest_of,
)
from airflow_tpc.core.staging import SEAL_NAMES
from airflow_tpc.storage import LocalStorage
from airflow_tpc.storage.local_status import _status_digest

from .helpers import committed_contents, full_tree, stage

FILES = {"a.parquet": b"A" * 10, "d=1/b.parquet": b"B" * 20, "d=1/e=2/c.parquet": b"C",
         "_SUCCESS": b"", "d=1/.b.parquet.crc": b"crc", "_temporary/0/task/x.parquet": b"X",
         "d=1/_tmp/y.parquet": b"Y"}
DATA = {"a.parquet", "d=1/b.parquet", "d=1/e=2/c.parquet"}


def _undecoded(manifest) -> bool:
    return isinstance(manifest.files, SealedEntries) and manifest.files._files is None


def test_the_status_digest_of_a_walk_equals_that_of_a_listing(tmp_path):
    storage, top = LocalStorage(), str(tmp_path / "s")
    for rel, data in {**FILES, MANIFEST_NAME: b"{}"}.items():
        os.makedirs(os.path.dirname(os.path.join(top, rel)), exist_ok=True)
        with open(os.path.join(top, rel), "wb") as fh:
            fh.write(data)
    os.symlink(os.path.join(top, "a.parquet"), os.path.join(top, "d=1", "link.parquet"))
    os.link(os.path.join(top, "a.parquet"), os.path.join(top, "d=1", "hard.parquet"))
    os.makedirs(os.path.join(top, "empty", ".hidden"))
    scan = storage.status_digest(top, SEAL_NAMES)
    assert scan.digest == storage.status_digest_of(top, storage.list(top), SEAL_NAMES)
    assert sorted(scan.folders) == sorted(["d=1", "d=1/e=2", "d=1/_tmp", "_temporary",
                                           "_temporary/0", "_temporary/0/task", "empty",
                                           "empty/.hidden"])
    # visible: no part of the path starts with "_" or "." (the manifest is skipped)
    link_size = len(os.path.join(top, "a.parquet"))  # a symlink's own size: its target
    assert (scan.visible_files, scan.visible_bytes) == (5, 10 + 20 + 1 + 10 + link_size)
    assert scan.digest != storage.status_digest(top).digest  # the manifest counted now
    os.utime(os.path.join(top, "d=1", "e=2", "c.parquet"), ns=(1, 1))
    assert storage.status_digest(top, SEAL_NAMES).digest != scan.digest


def test_the_status_digest_is_the_encoding_protocol_3_3_gives(tmp_path):
    """sha256 over the names NUL-joined, b"\\1", then per file device, inode, size, mtime
    ns, ctime ns and links as little-endian ``QQqqqQ``: a file from before 1970 (negative
    times) and numbers of 2**63 or more (unsigned fields) encode as the spec says, so the
    fast packing a walk uses agrees with any other writer of the same digest."""
    top = tmp_path / "s"
    (top / "d=1").mkdir(parents=True)
    for rel in ("a.parquet", "d=1/b.parquet"):
        (top / rel).write_bytes(b"x" * len(rel))
    os.utime(top / "a.parquet", ns=(-10**9 - 7, -10**9 - 7))  # before 1970
    numbers = []
    for rel in ("a.parquet", "d=1/b.parquet"):
        st = os.lstat(top / rel)
        numbers += [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                    st.st_nlink]

    def spec(names: list[str], nums: list[int]) -> str:
        sha = hashlib.sha256("\0".join(names).encode() + b"\1")
        sha.update(struct.pack("<" + "QQqqqQ" * (len(nums) // 6), *nums))
        return "sha256:" + sha.hexdigest()

    # a folder's files before its subfolders' (the walk's order and list()'s)
    assert LocalStorage().status_digest(str(top)).digest == \
        spec(["a.parquet", "d=1/b.parquet"], numbers)
    huge = [2**64 - 1, 2**63, 5, -3, 7, 2**63 + 1]
    assert _status_digest("x", huge) == spec(["x"], huge)


def test_a_commit_as_sealed_decodes_no_entry_and_drops_hidden_folders(tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn, manifest = stage(sink, "1", FILES)
    assert manifest.listing and manifest.listing.startswith("sha256:")
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed" and _undecoded(result.manifest)
    assert (result.manifest.total_files, result.manifest.total_bytes) == (3, 31)
    published = sink.storage.list(sink.layout.published_dir("1"))
    names = {p.path.rsplit("/epoch=1/", 1)[1] for p in published}
    assert names >= DATA and not any("_temporary" in n or "_tmp" in n for n in names)
    assert committed_contents(sink) == {"1": [b"A" * 10, b"B" * 20, b"C"]}
    marker = json.loads(sink.storage.read_bytes(sink.layout.marker("1")))
    assert marker["manifest_digest"] == manifest.digest
    assert list(result.manifest.files) == list(manifest.files)  # decoded when asked


def _rewrite(path: str, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.write(data)


CHANGES = {  # what changed after the seal -> committed (True) or refused (message)
    "same bytes, new mtime": (lambda p: os.utime(p("a.parquet"), ns=(5, 5)), True),
    "hidden file added": (lambda p: open(p("_SUCCESS2"), "wb").close(), True),
    "hidden folder added": (lambda p: (os.makedirs(p("_temporary/1")),
                                       open(p("_temporary/1/z.parquet"), "wb").close()), True),
    "rewritten, same size": (lambda p: _rewrite(p("a.parquet"), b"Z" * 10), "checksum"),
    "grown": (lambda p: _rewrite(p("d=1/e=2/c.parquet"), b"CC"), "bytes in storage"),
    "visible file added": (lambda p: open(p("new.parquet"), "wb").close(), "does not list"),
    "file removed": (lambda p: os.unlink(p("d=1/b.parquet")), "missing"),
    "file renamed": (lambda p: os.rename(p("a.parquet"), p("d=1/a.parquet")), "missing"),
    "hard link added": (lambda p: os.link(p("a.parquet"), str(p("..")) + "/outside"),
                        "hard links"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_after_the_seal_goes_file_by_file(tmp_path, change):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn, manifest = stage(sink, "1", FILES)
    staging = sink.layout.staging("1", txn.attempt)
    act, expected = CHANGES[change]
    act(lambda rel: os.path.join(staging, rel))
    if expected is True:
        result = sink.commit(txn, expected_digest=manifest.digest)
        assert result.outcome == "committed" and not _undecoded(result.manifest)
        assert committed_contents(sink) == {"1": [b"A" * 10, b"B" * 20, b"C"]}
        return
    before = full_tree(sink, str(tmp_path))
    with pytest.raises(ManifestError, match=expected):
        sink.commit(txn, expected_digest=manifest.digest)
    assert full_tree(sink, str(tmp_path)) == before


def test_checksum_mode_never_takes_the_shortcut(tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns", config=SinkConfig(verify="checksum"))
    txn, manifest = stage(sink, "1", FILES)
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed" and not _undecoded(result.manifest)


def _forged(manifest: Manifest, **changes) -> bytes:
    """A canonical manifest with ``changes`` and a digest that matches (what a buggy
    writer could seal)."""
    doc = {**manifest.to_dict(), **changes}
    doc.pop("digest")
    return canonical_json({**doc, "digest": digest_of(doc)})


def test_a_sealed_listing_that_does_not_add_up_to_the_entries_is_checked_file_by_file(
        tmp_path):
    """A writer whose listing and entries disagree (one file left out of the entries):
    the totals do not match what the digest walk saw, so the entries are compared with
    staging and the unlisted file refused."""
    sink = Sink(str(tmp_path / "t"), "ns")
    txn, manifest = stage(sink, "1", FILES)
    kept = [f.to_dict() for f in manifest.files if f.path != "a.parquet"]
    data = _forged(manifest, files=kept, totals={"files": 2, "bytes": 21, "rows": None})
    seal = sink.storage.join(sink.layout.sealed("1", txn.attempt), MANIFEST_NAME)
    sink.storage.put(seal, data)
    forged = Manifest.parse(data)
    assert forged.listing == manifest.listing
    before = full_tree(sink, str(tmp_path))
    with pytest.raises(ManifestError, match="does not list"):
        sink.commit(txn, expected_digest=forged.digest)
    assert full_tree(sink, str(tmp_path)) == before


def test_trusted_parse_reads_the_header_and_checks_entries_when_asked(tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    _, manifest = stage(sink, "1", FILES)
    data = manifest.to_json_bytes()
    lazy = Manifest.parse(data, trusted=manifest.digest)
    assert _undecoded(lazy) and lazy.total_files == 3 and lazy.total_bytes == 31
    assert lazy.listing == manifest.listing and lazy.digest == manifest.digest
    assert list(lazy.files) == list(manifest.files)
    assert lazy == Manifest.parse(data)
    assert not _undecoded(Manifest.parse(data, trusted="sha256:" + "0" * 64))
    # entries that do not add up to the totals are refused when first read
    bad = _forged(manifest, files=[{**f.to_dict(), "size": f.size + 1}
                                   for f in manifest.files])
    with pytest.raises(ManifestError, match="totals"):
        Manifest.parse(bad)
    lazy_bad = Manifest.parse(bad, trusted=json.loads(bad)["digest"])
    with pytest.raises(ManifestError, match="totals"):
        list(lazy_bad.files)


def test_trusted_parse_of_paths_holding_brackets(tmp_path):
    """The end of ``files`` is found by its ``]``: paths holding ``]`` (and ``],``)
    before it change nothing of the header or the entries."""
    sink = Sink(str(tmp_path / "t"), "ns")
    files = {"a].parquet": b"A", "d=[1]/b],f.parquet": b"BB", "c[0].parquet": b"C"}
    _, manifest = stage(sink, "1", files)
    data = manifest.to_json_bytes()
    assert data.count(b"]") > 3
    lazy = Manifest.parse(data, trusted=manifest.digest)
    assert _undecoded(lazy) and (lazy.total_files, lazy.total_bytes) == (3, 4)
    assert lazy == Manifest.parse(data) and list(lazy.files) == list(manifest.files)


@pytest.mark.parametrize("where", ["top", "entry"])
def test_a_key_repeated_in_one_object_is_refused(tmp_path, where):
    """Python keeps a repeated key's last value, other parsers the first: no such
    manifest has one meaning, whichever way its digest was computed."""
    sink = Sink(str(tmp_path / "t"), "ns")
    _, manifest = stage(sink, "1", {"a.parquet": b"A"})
    data = manifest.to_json_bytes()
    if where == "top":
        data = data.replace(b'"files":[', b'"files":[],"files":[', 1)
    else:
        data = data.replace(b'"path":"a.parquet"', b'"path":"a.parquet","path":"b.parquet"', 1)
    with pytest.raises(ManifestError, match="repeats the key"):
        Manifest.parse(data)
    doc = json.loads(data)  # digest recomputed over what Python's parser kept
    doc.pop("digest")
    with pytest.raises(ManifestError, match="repeats the key"):
        Manifest.parse(data.replace(manifest.digest.encode(), digest_of(doc).encode()))


def test_a_second_target_beside_the_first_keeps_its_own_digest(tmp_path):
    """Two targets side by side, same epoch, same attempt number, staged alike: a file
    touched in one's staging sends only that commit file by file (and refuses it, the
    bytes rewritten); the other commits by its own digest, and the refusal changes
    nothing of either."""
    a, b = Sink(str(tmp_path / "a"), "ns"), Sink(str(tmp_path / "b"), "ns")
    (ta, ma), (tb, mb) = stage(a, "1", FILES), stage(b, "1", FILES)
    assert ta.attempt == tb.attempt and ma.listing != mb.listing
    _rewrite(os.path.join(a.layout.staging("1", ta.attempt), "a.parquet"), b"Z" * 10)
    before = full_tree(a, str(tmp_path)), full_tree(b, str(tmp_path))
    with pytest.raises(ManifestError, match="checksum"):
        a.commit(ta, expected_digest=ma.digest)
    assert (full_tree(a, str(tmp_path)), full_tree(b, str(tmp_path))) == before
    result = b.commit(tb, expected_digest=mb.digest)
    assert result.outcome == "committed" and _undecoded(result.manifest)
    assert committed_contents(b) == {"1": [b"A" * 10, b"B" * 20, b"C"]}
    assert committed_contents(a) == {}
