"""Padding a batch to the mesh's data shards: the one helper every caller uses."""

import pytest

from nash_jax import parallel


def test_rows_are_padded_to_the_data_shards_or_their_bucket():
    mesh = parallel.make_mesh(data=2, fsdp=2, tensor=2)  # 4 data shards
    rows = [[1], [2], [3], [4], [5]]
    assert parallel.pad_to_shards(rows, mesh) == rows + [[1]] * 3
    assert parallel.pad_to_shards(rows, mesh, fill=[0]) == rows + [[0]] * 3
    assert len(parallel.pad_to_shards(rows[:3], mesh, bucket=True)) == 4
    assert len(parallel.pad_to_shards(rows, mesh, bucket=True)) == 8  # power-of-two bucket
    assert len(parallel.pad_to_shards(rows, mesh, buckets=[6, 12])) == 8  # 6 rounded up to 4 shards
    assert parallel.pad_to_shards(rows[:4], mesh) == rows[:4]
    with pytest.raises(ValueError, match="batch size 5 exceeds the largest bucket 4"):
        parallel.pad_to_shards(rows, mesh, buckets=[4])
    assert parallel.batch_multiple(mesh, micro_batches=3) == 12
