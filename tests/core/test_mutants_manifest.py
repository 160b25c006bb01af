"""A manifest parsed with a trusted digest keeps its file entries encoded
(``manifest_codec.SealedEntries``) until they are read; compared, they must still be the
entries they hold; and a file path that is no string at all is refused with the
manifest's own error, never a TypeError from deeper in the check.  Mutation testing
(docs/mutation.md) found both unproved: ``and`` read as ``or`` in ``__eq__`` (every
sequence would equal every manifest's files, so two manifests naming different files
would compare equal) and in ``check_relative_path``.  Real local files.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.manifest import MANIFEST_NAME, Manifest
from airflow_tpc.core.manifest_codec import check_relative_path
from airflow_tpc.errors import ManifestError

from .helpers import stage


def _sealed_bytes(sink: Sink, epoch: str, attempt: int) -> bytes:
    data = sink.storage.read_bytes(sink.storage.join(sink.layout.sealed(epoch, attempt),
                                                     MANIFEST_NAME))
    assert data is not None
    return data


def test_trusted_manifests_compare_by_the_files_they_name(tmp_path):
    sink = Sink(str(tmp_path / "t"), "eq")
    _, one = stage(sink, "0", {"a.parquet": b"a"})
    _, two = stage(sink, "1", {"b.parquet": b"bb"})
    lazy_one = Manifest.parse(_sealed_bytes(sink, "0", 1), where="0", trusted=one.digest).files
    lazy_two = Manifest.parse(_sealed_bytes(sink, "1", 1), where="1", trusted=two.digest).files
    assert type(lazy_one).__name__ == "SealedEntries"  # the lazy form is what is compared

    assert lazy_one == list(one.files) and lazy_one == tuple(one.files)
    assert lazy_one != lazy_two
    assert lazy_one != list(two.files)
    assert lazy_one != []
    assert lazy_one != "a.parquet"  # a string is a Sequence too, never a manifest's files


@pytest.mark.parametrize("path", [5, None, ["a.parquet"], ""])
def test_a_file_path_that_is_no_non_empty_string_is_refused_by_name(path):
    with pytest.raises(ManifestError, match=r"is not a non-empty string"):
        check_relative_path(path)


@pytest.mark.parametrize("path", [".hidden/p.parquet", "day=1/.p.parquet", "_tmp/p.parquet"])
def test_a_file_path_with_a_hidden_component_is_refused(path):
    """Readers skip ``.``/``_`` files and folders: such a file would be committed and never
    read."""
    with pytest.raises(ManifestError, match=r"has a hidden component"):
        check_relative_path(path)
