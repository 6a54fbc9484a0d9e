"""``vecserve/fileio.py``: a file or a directory appears whole or not at all, a failed
writer leaves nothing behind, and a directory written first by another writer is kept."""

from __future__ import annotations

import pytest

from vecserve.fileio import atomic_dir, atomic_path, atomic_write


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target, "w") as f:
        f.write("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]


def test_a_directory_appears_whole_once(tmp_path):
    target = tmp_path / "snap"
    with atomic_dir(target) as tmp:
        (tmp / "vectors.npy").write_bytes(b"ours")
        assert not target.exists()  # nothing visible until the block ends
    assert (target / "vectors.npy").read_bytes() == b"ours"
    with atomic_dir(target) as tmp:  # another writer got there first: theirs stays
        (tmp / "vectors.npy").write_bytes(b"late")
    assert (target / "vectors.npy").read_bytes() == b"ours"
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "other") as tmp:
        (tmp / "vectors.npy").write_bytes(b"half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]
