"""Versions as a byte stream of frames: what ``GET /v0/versions`` sends, ``POST /v0/versions`` takes
(kvnode.node.versions_api) and a backup's versions file holds (kvnode.ops.backup). Pure: no I/O.

A frame is a key and its encoded record (kvnode.storage.records), each prefixed by its length; a stream
ends with the end frame (no key: a client key is never empty), so a stream cut short, at a frame's
boundary or not, is told from a whole one::

    >>> from kvnode.storage.records import Record, decode, encode
    >>> stream = encode_frame(b"k", encode(Record.put(7, b"v"))) + END
    >>> parser = FrameParser()
    >>> [(key, decode(record).value) for key, record in parser.feed(stream[:5]) + parser.feed(stream[5:])]
    [(b'k', b'v')]
    >>> parser.finish()
    >>> cut = FrameParser()
    >>> len(cut.feed(stream[:-len(END)]))
    1
    >>> try:
    ...     cut.finish()
    ... except BadFrames as error:
    ...     print(error)
    the frames end without their end frame: cut short after 1 frames
"""

from __future__ import annotations

import struct

from kvnode.storage.records import CorruptRecord, check

__all__ = ["END", "MAX_KEY_BYTES", "BadFrames", "FrameParser", "encode_frame"]

_HEAD = struct.Struct(">II")  # the key's length, the record's length
END = _HEAD.pack(0, 0)
MAX_KEY_BYTES = 64 * 1024  # far above any client key (a request line holds at most 8190 bytes)


class BadFrames(ValueError):
    """Bytes that are not a stream of frames: the message says what is wrong, in one line."""


def encode_frame(key: bytes, record: bytes) -> bytes:
    """One frame: ``key`` (not empty) and ``record``, an encoded record (records.encode's bytes)."""
    return _HEAD.pack(len(key), len(record)) + key + record


class FrameParser:
    """Frames from bytes fed in pieces of any size: each :meth:`feed` returns the frames it completed,
    their records checked (records.check); :meth:`finish` says whether the stream was whole. A record
    longer than ``max_record_bytes`` (when given) is refused before its bytes arrive, so a sender cannot
    make a reader hold more than one frame of that size."""

    def __init__(self, max_record_bytes: int | None = None) -> None:
        self._max_record = max_record_bytes
        self._buffer = bytearray()
        self.frames = 0  # the frames parsed so far
        self.ended = False  # the end frame was read

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        if self.ended:
            if data:
                raise BadFrames(f"{len(data)} bytes follow the end frame")
            return []
        buffer = self._buffer
        buffer += data
        frames = []
        while len(buffer) >= _HEAD.size:
            key_length, record_length = _HEAD.unpack_from(buffer)
            if not key_length:
                if record_length:
                    raise BadFrames(
                        f"frame {self.frames + 1} has an empty key and a {record_length}-byte record"
                    )
                self.ended = True
                extra = len(buffer) - _HEAD.size
                if extra:
                    raise BadFrames(f"{extra} bytes follow the end frame")
                break
            self._check_lengths(key_length, record_length)
            end = _HEAD.size + key_length + record_length
            if len(buffer) < end:
                break
            key = bytes(buffer[_HEAD.size : _HEAD.size + key_length])
            record = bytes(buffer[_HEAD.size + key_length : end])
            try:
                check(record)
            except CorruptRecord as error:
                raise BadFrames(f"frame {self.frames + 1} (key {key[:60]!r}): {error}") from None
            del buffer[:end]  # a bytearray drops its head without copying the rest
            frames.append((key, record))
            self.frames += 1
        if self.ended:
            buffer.clear()
        return frames

    def finish(self) -> None:
        """The stream is over: BadFrames unless it ended with the end frame."""
        if not self.ended:
            raise BadFrames(f"the frames end without their end frame: cut short after {self.frames} frames")

    def _check_lengths(self, key_length: int, record_length: int) -> None:
        where = f"frame {self.frames + 1}"
        if key_length > MAX_KEY_BYTES:
            raise BadFrames(f"{where} has a {key_length}-byte key, more than {MAX_KEY_BYTES}")
        if self._max_record is not None and record_length > self._max_record:
            raise BadFrames(f"{where} has a {record_length}-byte record, more than {self._max_record}")
