"""The v2 record batch format: header fields, validation, and (for the broker's own use) records.

Client batches are stored as sent; the broker only reads their headers, checks their CRC32C and
rewrites the base offset. Records are decoded only where the broker must look inside: compaction,
loading `__consumer_offsets`, and batches the broker writes itself.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cramjam
from crc32c import crc32c

from strom.broker.wire import varint

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
CRC_START = 21  # the CRC covers attributes .. end of batch
_INT64 = struct.Struct(">q")

COMPRESSION_MASK = 0x07
TIMESTAMP_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
# A produced batch may decompress to at most this many times its topic's max.message.bytes (64 MiB at
# Kafka's default): more is refused before it is held in memory (a "decompression bomb").
DECOMPRESSED_LIMIT_FACTOR = 64
# The most one compressed byte can expand to in each format, so smaller inputs need no bounded
# decompression; zstd has no useful bound (one RLE block byte stands for up to 128 KiB).
_MAX_EXPANSION = {GZIP: 1032, SNAPPY: 22, LZ4: 256}


MAX_RELATIVE_OFFSET = 2**31 - 1  # a segment's index holds offsets relative to its base in 31 bits
MIN_RECORD_SIZE = 7  # attributes and six one-byte varints: the smallest record that can be encoded


class CorruptBatchError(Exception):
    """A batch whose framing, magic, CRC or compressed data is wrong (answered with CORRUPT_MESSAGE)."""


class InvalidBatchError(CorruptBatchError):
    """A well-formed batch whose record count, offsets or codec are inconsistent (INVALID_RECORD)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    length: int  # whole batch, LOG_OVERHEAD included
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buffer: bytes | memoryview, position: int = 0) -> BatchHeader:
        (base, length, _epoch, magic, crc, attributes, delta, base_ts, max_ts, pid, pepoch, seq,
         count) = HEADER.unpack_from(buffer, position)
        return cls(base, length + LOG_OVERHEAD, magic, crc, attributes, delta, base_ts, max_ts,
                   pid, pepoch, seq, count)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def split_batches(data: bytes | memoryview,
                  max_decompressed: int | None = None) -> list[tuple[BatchHeader, memoryview]]:
    """Every batch of a produce record set, checked for framing, magic 2 and CRC32C, and its records
    as Kafka checks them on append (`check_records`; compressed records may take at most
    `max_decompressed` bytes)."""
    view = memoryview(data)
    batches = []
    position = 0
    while position < len(view):
        if len(view) - position < HEADER_SIZE:
            raise CorruptBatchError(f"{len(view) - position} trailing bytes are not a batch")
        header = BatchHeader.parse(view, position)
        if header.magic != 2:
            raise CorruptBatchError(f"record batch magic {header.magic} is not supported (only v2)")
        if header.length < HEADER_SIZE or position + header.length > len(view):
            raise CorruptBatchError(f"record batch length {header.length} does not fit the request")
        batch = view[position:position + header.length]
        if crc32c(batch[CRC_START:]) != header.crc:
            raise CorruptBatchError("record batch CRC32C mismatch")
        check_records(header, batch, max_decompressed)
        batches.append((header, batch))
        position += header.length
    return batches


def check_records(header: BatchHeader, batch: bytes | memoryview,
                  max_decompressed: int | None = None) -> None:
    """What Kafka checks inside a batch before storing it: the record count matches the offset delta,
    the codec is known and the data decompresses, and the records are exactly `records_count`
    records with offset deltas 0, 1, 2, ... Stored batches are thus readable by every consumer,
    the cleaner and ListOffsets, and never claim offsets they do not hold."""
    count = header.records_count
    if count <= 0 or header.last_offset_delta != count - 1:
        raise InvalidBatchError(
            f"record batch claims {count} record(s) but a last offset delta of {header.last_offset_delta} "
            "(Kafka requires records_count = last_offset_delta + 1 >= 1)")
    codec = header.compression
    if codec > ZSTD:
        raise InvalidBatchError(f"record batch uses the unknown compression codec {codec}")
    body = bytes(memoryview(batch)[HEADER_SIZE:])
    if codec != NONE:
        body = decompress(codec, body, max_decompressed)
    if count * MIN_RECORD_SIZE > len(body):
        raise InvalidBatchError(f"record batch claims {count} records in {len(body)} bytes of records")
    if not _uniform_records(body, count):
        _check_record_offsets(body, count)


# The records of a batch in runs by the width of their offset delta's zigzag varint: deltas 0-63 take
# one byte, 64-8191 two, 8192-65535 three (the fast check covers batches of up to 65536 records).
_DELTA_RUNS = ((0, 64), (64, 8192), (8192, 65536))


def _zigzag_varint(value: int) -> bytes:
    zigzag, out = value << 1, bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _varint_bytes(first: int, last: int) -> tuple[bytes, ...]:
    """Byte i of the zigzag varints of first..last-1, one bytes object per byte position."""
    zigzags = [2 * value for value in range(first, last)]
    width = len(_zigzag_varint(zigzags[-1] // 2))
    return tuple(bytes(((z >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0) for z in zigzags)
                 for i in range(width))


_DELTA_BYTES = tuple(_varint_bytes(first, last) for first, last in _DELTA_RUNS)


def _uniform_records(body: bytes, count: int) -> bool:
    """Checks, with strided slices instead of a walk in Python, records laid out as a producer writes
    records of one size: one-byte timestamp deltas, every record one byte longer where its offset
    delta's varint grows. True means every record has exactly the length prefix, offset delta and
    end `_check_record_offsets` would find; False: walk them one by one (which says what is wrong)."""
    if count > _DELTA_RUNS[-1][1] or len(body) < 2:
        return False
    first = body[0]
    length = first >> 1 if first < 0x80 else (first & 0x7F | body[1] << 7) >> 1
    if length < MIN_RECORD_SIZE - 1:
        return False
    view = memoryview(body)
    start = 0
    for growth, ((first_delta, last_delta), deltas) in enumerate(zip(_DELTA_RUNS, _DELTA_BYTES, strict=True)):
        records = min(count, last_delta) - first_delta
        if records <= 0:
            break
        prefix = _zigzag_varint(length + growth)
        stride = len(prefix) + length + growth
        end = start + records * stride
        if end > len(body):
            return False
        run = view[start:end]
        for i, byte in enumerate(prefix):
            if bytes(run[i::stride]) != bytes((byte,)) * records:
                return False
        timestamp = len(prefix) + 1  # after the attributes byte
        if max(run[timestamp::stride]) >= 0x80:
            return False
        for i, expected in enumerate(deltas):
            if bytes(run[timestamp + 1 + i::stride]) != expected[:records]:
                return False
        start = end
    return start == len(body)


def _check_record_offsets(body: bytes, count: int) -> None:
    """Walks the records' length prefixes and offset deltas (the fields the broker and consumers rely
    on); the usual one- to three-byte varints are read inline (this runs for every produced record)."""
    end = len(body)
    position = expected = 0
    try:
        while position < end:
            byte = body[position]
            if byte < 0x80:
                start = position + 1
                position = start + (byte >> 1)
            elif body[position + 1] < 0x80:  # a length of 64 to 8191 bytes
                start = position + 2
                position = start + ((byte & 0x7F | body[position + 1] << 7) >> 1)
            else:
                length, start = read_varint(body, position)
                position = start + length
            # body[start] holds the record's attributes, then come the timestamp and offset deltas
            if body[start + 1] < 0x80:
                at = start + 2
            else:
                at = start + 3 if body[start + 2] < 0x80 else _after_varint(body, start + 1)
            zigzag = expected << 1
            if zigzag < 0x80:
                matches = body[at] == zigzag
            elif zigzag < 0x4000:
                matches = body[at] == (zigzag & 0x7F) | 0x80 and body[at + 1] == zigzag >> 7
            elif zigzag < 0x200000:
                matches = (body[at] == (zigzag & 0x7F) | 0x80 and body[at + 1] == (zigzag >> 7 & 0x7F) | 0x80
                           and body[at + 2] == zigzag >> 14)
            else:
                matches = read_varint(body, at)[0] == expected
            if not matches or at >= position or position - start < MIN_RECORD_SIZE - 1:
                raise InvalidBatchError(f"record {expected} of the batch is malformed or does not have "
                                        f"the offset delta {expected}")
            expected += 1
    except IndexError:
        raise InvalidBatchError("the batch's records end inside a record") from None
    if position != end or expected != count:
        raise InvalidBatchError(f"the batch claims {count} records but holds {expected} "
                                f"({position - end} bytes past its end)" if position > end else
                                f"the batch claims {count} records but holds {expected}")


def _after_varint(body: bytes, position: int) -> int:
    while body[position] & 0x80:
        position += 1
    return position + 1


CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
"""A topic's ``compression.type`` (other than ``producer``) -> the codec its batches are stored with."""
_XERIAL_BLOCK = 32 * 1024  # the block size of Java's snappy stream, as Kafka writes snappy batches


def recompress(header: BatchHeader, batch: bytes | memoryview, codec: int) -> tuple[BatchHeader, memoryview]:
    """The batch with its records compressed with `codec` instead (as Kafka's log validator rebuilds a
    batch whose codec is not its topic's ``compression.type``): the same records, producer fields and
    timestamps; new attributes, length and CRC."""
    records = decompress(header.compression, bytes(memoryview(batch)[HEADER_SIZE:]))
    body = compress(codec, records)
    rebuilt = bytearray(memoryview(batch)[:HEADER_SIZE])
    struct.pack_into(">i", rebuilt, 8, HEADER_SIZE + len(body) - LOG_OVERHEAD)
    struct.pack_into(">h", rebuilt, 21, header.attributes & ~COMPRESSION_MASK | codec)
    rebuilt += body
    struct.pack_into(">I", rebuilt, 17, crc32c(memoryview(rebuilt)[CRC_START:]))
    return BatchHeader.parse(rebuilt), memoryview(rebuilt)


def compress(codec: int, data: bytes) -> bytes:
    """Records compressed as Kafka's Java code writes them (snappy in Xerial's framing, LZ4 frames)."""
    if codec == NONE:
        return data
    if codec == SNAPPY:
        chunks = [bytes(cramjam.snappy.compress_raw(data[i:i + _XERIAL_BLOCK]))
                  for i in range(0, len(data), _XERIAL_BLOCK)]
        return _XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(
            struct.pack(">i", len(chunk)) + chunk for chunk in chunks)
    module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
    return bytes(module.compress(data))


def set_base_offset(base_offset: int) -> bytes:
    """The 8 bytes that replace a batch's base offset (the CRC does not cover them)."""
    return _INT64.pack(base_offset)


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def iter_records(batch: bytes | memoryview) -> Iterator[Record]:
    """The records of one stored batch, decompressed if needed."""
    header = BatchHeader.parse(batch)
    body = bytes(memoryview(batch)[HEADER_SIZE:])
    body = decompress(header.compression, body)
    position = 0
    for _ in range(header.records_count):
        record, position = _read_record(body, position, header)
        yield record


def decompress(codec: int, data: bytes, limit: int | None = None) -> bytes:
    """The records of a batch compressed with `codec`; CorruptBatchError if they cannot be, or if
    they would take more than `limit` bytes (never more is held in memory)."""
    try:
        if limit is None or (codec in _MAX_EXPANSION and len(data) * _MAX_EXPANSION[codec] <= limit):
            return _decompress(codec, data)
        return _decompress_bounded(codec, data, limit)
    except CorruptBatchError:
        raise
    except Exception as exc:  # cramjam raises its own error types on garbage
        bound = "" if limit is None else f" into at most {limit} bytes"
        raise CorruptBatchError(
            f"record batch data does not decompress with codec {codec}{bound}: {exc}") from exc


def _decompress_bounded(codec: int, data: bytes, limit: int) -> bytes:
    """Decompresses into an anonymous mapping of `limit` bytes (its pages become resident only as
    they are written); cramjam fails when the output would not fit."""
    if codec == SNAPPY:
        return _snappy(data, limit)
    module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
    with mmap.mmap(-1, limit) as out:
        size = module.decompress_into(data, out)
        return out[:size]


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        return _snappy(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptBatchError(f"unknown compression codec {codec}")


def _snappy(data: bytes, limit: int | None = None) -> bytes:
    """Raw snappy, or Xerial's framing of raw chunks (Java clients); each raw chunk states its
    decompressed length first, checked against `limit` before anything is decompressed."""
    if not data.startswith(_XERIAL_MAGIC):
        chunks = [data]
    else:
        chunks, position = [], 16
        while position < len(data):
            (size,) = struct.unpack_from(">i", data, position)
            chunks.append(data[position + 4:position + 4 + size])
            position += 4 + size
    if limit is not None and sum(cramjam.snappy.decompress_raw_len(c) for c in chunks) > limit:
        raise CorruptBatchError(f"record batch data decompresses to more than {limit} bytes")
    return b"".join(bytes(cramjam.snappy.decompress_raw(c)) for c in chunks)


def _read_record(body: bytes, position: int, header: BatchHeader) -> tuple[Record, int]:
    _length, position = read_varint(body, position)
    position += 1  # attributes
    ts_delta, position = read_varint(body, position)
    offset_delta, position = read_varint(body, position)
    key, position = _read_bytes(body, position)
    value, position = _read_bytes(body, position)
    count, position = read_varint(body, position)
    headers = []
    for _ in range(count):
        name, position = _read_bytes(body, position)
        header_value, position = _read_bytes(body, position)
        headers.append(((name or b"").decode("utf-8", "replace"), header_value))
    return Record(header.base_offset + offset_delta, header.base_timestamp + ts_delta, key, value,
                  tuple(headers)), position


def _read_bytes(body: bytes, position: int) -> tuple[bytes | None, int]:
    size, position = read_varint(body, position)
    if size < 0:
        return None, position
    return body[position:position + size], position + size


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    """A zigzag varint and the position after it."""
    shift = result = 0
    while True:
        if position >= len(data):
            raise CorruptBatchError("record ends inside a varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint is too long")


def _bytes_field(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def encode_batch(records: Sequence[Record], base_offset: int, attributes: int = 0, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """An uncompressed v2 batch holding `records` at their own offsets and timestamps."""
    base_timestamp = min(r.timestamp for r in records)
    body = bytearray()
    for r in records:
        record = bytearray(b"\0")
        record += varint(r.timestamp - base_timestamp) + varint(r.offset - base_offset)
        record += _bytes_field(r.key) + _bytes_field(r.value) + varint(len(r.headers))
        for name, value in r.headers:
            record += _bytes_field(name.encode()) + _bytes_field(value)
        body += varint(len(record)) + record
    attributes &= ~COMPRESSION_MASK
    header = bytearray(HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), 0, 2, 0, attributes,
        records[-1].offset - base_offset, base_timestamp, max(r.timestamp for r in records),
        producer_id, producer_epoch, base_sequence, len(records)))
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def empty_batch(header: BatchHeader) -> bytes:
    """A batch with the offsets, timestamps and producer of `header` but no records (what compaction
    leaves of a segment's last batch, so the segment keeps its end offset)."""
    batch = bytearray(HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, 0, 2, 0, header.attributes & ~COMPRESSION_MASK,
        header.last_offset_delta, header.base_timestamp, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, 0))
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp: int,
    base_offset: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """An uncompressed v2 batch of (key, value) records, all stamped `timestamp`."""
    stamped = [Record(base_offset + i, timestamp, key, value) for i, (key, value) in enumerate(records)]
    return encode_batch(stamped, base_offset, attributes, producer_id, producer_epoch, base_sequence)
