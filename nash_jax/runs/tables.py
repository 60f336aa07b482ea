"""A stage's columnar artifacts: dicts of equal-length columns as parquet files, written whole or not at
all."""

from nash_jax.runs.files import write_atomically


def write_table(path, columns):
    """A dict of equal-length columns as a parquet file, written whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    write_atomically(path, lambda tmp: pq.write_table(table, tmp))


def read_table(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pydict()
