"""The writer's vectorised sync points agree with the reference code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strait.offsets import OffsetTranslationError, sync_points
from strait_replicator.writer import install_lazy_zip_invalidation, sync_points_of

steps = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=0, max_size=60)


@given(st.integers(0, 1000), st.integers(0, 1000), steps)
@settings(max_examples=300, deadline=None)
def test_vectorised_sync_points_equal_the_reference(first_up: int, first_down: int,
                                                    gaps: list[tuple[int, int]]) -> None:
    ups, downs = [first_up], [first_down]
    for up_step, down_step in gaps:
        ups.append(ups[-1] + up_step)
        downs.append(downs[-1] + down_step)
    expected = sync_points(ups, downs)
    assert sync_points_of(np.array(ups, dtype=np.int64), np.array(downs, dtype=np.int64)) == expected


@pytest.mark.parametrize(("ups", "downs"), [([1, 2, 2], [5, 6, 7]), ([1, 2, 3], [5, 5, 6]), ([3, 1], [1, 2])])
def test_out_of_order_offsets_fail_like_the_reference(ups: list[int], downs: list[int]) -> None:
    with pytest.raises(OffsetTranslationError) as reference:
        sync_points(ups, downs)
    with pytest.raises(OffsetTranslationError) as vectorised:
        sync_points_of(np.array(ups), np.array(downs))
    assert str(vectorised.value) == str(reference.value)


def test_length_mismatch_fails() -> None:
    with pytest.raises(OffsetTranslationError, match="2 source offsets but 1 target offsets"):
        sync_points_of(np.array([1, 2]), np.array([1]))


def test_zip_archives_are_reread_only_when_changed(tmp_path: Path) -> None:
    import importlib
    import sys
    import zipfile
    import zipimport

    install_lazy_zip_invalidation()  # what a Python worker's first copy does
    archive = tmp_path / "mods.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("first_mod.py", "X = 1\n")
    importer = zipimport.zipimporter(str(archive))
    assert importer.find_spec("first_mod") is not None
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("second_mod_with_longer_name.py", "Y = 2\n")
    importer.invalidate_caches()  # the file changed (size): its directory is read again
    assert importer.find_spec("second_mod_with_longer_name") is not None
    if sys.version_info < (3, 12):
        reads = []
        original = zipimport._read_directory
        zipimport._read_directory = lambda path: reads.append(path) or original(path)
        try:
            importer.invalidate_caches()
            importlib.invalidate_caches()
        finally:
            zipimport._read_directory = original
        assert str(archive) not in reads  # unchanged: no re-read
