"""A request-record spool: records written to a Parquet file in batches as the run goes.

With a spool as the collector's sink, a long run keeps only the requests in flight in memory;
finished requests' records wait in one batch of at most ``batch_rows`` and are then appended to
the file as a Parquet row group. Afterwards the spool is a read-only sequence of
:class:`~simkit.core.records.RequestRecord` in the order they were written (ended requests in
completion order, then the incomplete ones), read back a batch at a time, and
:meth:`RequestSpool.columns` gives whole columns as numpy arrays for summaries.
Part of :mod:`simkit.output`: pyarrow and numpy, no SimPy.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional, Sequence

import attrs
import numpy as np

from simkit.core.records import RequestRecord

__all__ = ["RequestSpool", "RECORD_FIELDS", "arrow_schema"]

#: column names of a spool file: the fields of RequestRecord, in order
RECORD_FIELDS = tuple(f.name for f in attrs.fields(RequestRecord))
_INT_FIELDS = {"rid", "input_length", "requested_output_length", "output_length", "cached_tokens",
               "prefill_worker", "decode_worker", "verify_rounds", "accepted_drafts", "host_cached_tokens"}


def arrow_schema(names, int_names):
    """Declared (not inferred) column types of request records or rows: ``status`` a string,
    ``int_names`` nullable int64, the rest float64, so that a column that is null in one batch
    (say, no transfers yet) keeps its type."""
    import pyarrow as pa

    def kind(name: str):
        if name == "status":
            return pa.string()
        return pa.int64() if name in int_names else pa.float64()

    return pa.schema([(name, kind(name)) for name in names])


class RequestSpool:
    """Appends records to the Parquet file ``path`` (created; must not exist), ``batch_rows``
    at a time; :meth:`close` flushes the last batch. Then ``len``, iteration and
    :meth:`columns` read the file back.

    Raises:
        FileExistsError: ``path`` exists.
        OSError: the file cannot be written.
    """

    def __init__(self, path: str, batch_rows: int = 8192) -> None:
        import pyarrow.parquet as pq

        if os.path.exists(path):
            raise FileExistsError(path)
        self.path = path
        self.batch_rows = batch_rows
        self._schema = arrow_schema(RECORD_FIELDS, _INT_FIELDS)
        self._writer: Optional[pq.ParquetWriter] = pq.ParquetWriter(path, self._schema)
        self._buffer: list[RequestRecord] = []
        self._count = 0

    def append(self, record: RequestRecord) -> None:
        self._buffer.append(record)
        if len(self._buffer) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buffer:
            return
        rows = self._buffer
        table = pa.table({name: [getattr(r, name) for r in rows] for name in RECORD_FIELDS}, schema=self._schema)
        self._writer.write_table(table)
        self._count += len(rows)
        self._buffer = []

    def close(self) -> None:
        """Write what is buffered and close the file (idempotent)."""
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None

    def __len__(self) -> int:
        return self._count + len(self._buffer)

    def batches(self, names: Sequence[str] = RECORD_FIELDS) -> Iterator[dict[str, list]]:
        """The file's rows, a row group at a time, as {column: list of values}."""
        import pyarrow.parquet as pq

        self.close()
        for batch in pq.ParquetFile(self.path).iter_batches(columns=list(names)):
            yield batch.to_pydict()

    def __iter__(self) -> Iterator[RequestRecord]:
        for batch in self.batches():
            columns = [batch[name] for name in RECORD_FIELDS]
            for values in zip(*columns):
                yield RequestRecord(*values)

    def columns(self, names: Sequence[str] = RECORD_FIELDS) -> dict[str, np.ndarray]:
        """Whole columns, in the file's order: floats with NaN for a missing value, ints
        (workers: -1 for none), ``status`` as fixed-width strings. Read a row group at a time
        into preallocated arrays: a few bytes per request and column, no objects."""
        import pyarrow.parquet as pq

        self.close()
        source = pq.ParquetFile(self.path)
        n = source.metadata.num_rows
        out = {name: np.empty(n, dtype="U10" if name == "status" else
                              np.int64 if name in _INT_FIELDS else np.float64) for name in names}
        start = 0
        for batch in source.iter_batches(columns=list(names), use_threads=False):
            stop = start + batch.num_rows
            for name in names:
                col = batch.column(name)
                if name == "status":
                    out[name][start:stop] = col.to_pylist()
                elif name in _INT_FIELDS:
                    out[name][start:stop] = col.fill_null(-1).to_numpy()
                else:
                    out[name][start:stop] = col.to_numpy(zero_copy_only=False)
            start = stop
        return out
