"""kvnode.storage.frames: frames survive any split of their bytes, and a stream cut short, padded, or
carrying something that is not a record is refused with a reason."""

from __future__ import annotations

import struct

import pytest

from kvnode.storage.frames import END, MAX_KEY_BYTES, BadFrames, FrameParser, encode_frame
from kvnode.storage.records import Record, encode

FRAMES = [
    (b"a", encode(Record.put(1, b"first"))),
    (b"b" * 300, encode(Record.delete(2, copies=2))),
    (b"c", encode(Record.put(3, b"x" * 5000, ttl_us=10))),
]
STREAM = b"".join(encode_frame(key, record) for key, record in FRAMES) + END


def parse(pieces: list[bytes], max_record_bytes: int | None = None) -> list[tuple[bytes, bytes]]:
    parser = FrameParser(max_record_bytes)
    frames = [frame for piece in pieces for frame in parser.feed(piece)]
    parser.finish()
    return frames


@pytest.mark.parametrize("at", range(0, len(STREAM) + 1, 37))
def test_frames_come_back_whole_however_their_bytes_are_split(at: int) -> None:
    assert parse([STREAM[:at], STREAM[at:]]) == FRAMES


def test_frames_come_back_fed_one_byte_at_a_time() -> None:
    assert parse([bytes([byte]) for byte in STREAM]) == FRAMES


def test_an_empty_stream_is_the_end_frame_alone() -> None:
    assert parse([END]) == []
    with pytest.raises(BadFrames, match="cut short after 0 frames"):
        parse([b""])


@pytest.mark.parametrize("cut", [len(END), len(END) + 3, len(STREAM) // 2])
def test_a_stream_cut_short_is_refused_whether_or_not_at_a_frame_boundary(cut: int) -> None:
    with pytest.raises(BadFrames, match="without their end frame"):
        parse([STREAM[:-cut]])


def test_bytes_after_the_end_frame_are_refused() -> None:
    with pytest.raises(BadFrames, match="3 bytes follow the end frame"):
        parse([STREAM + b"abc"])
    parser = FrameParser()
    parser.feed(STREAM)
    with pytest.raises(BadFrames, match="1 bytes follow"):
        parser.feed(b"x")


def test_a_frame_whose_record_is_not_a_record_is_refused_naming_it() -> None:
    bad = encode_frame(b"k", b"\x00" * 8 + b"\x80")  # unknown flags
    with pytest.raises(BadFrames, match=r"frame 2 \(key b'k'\): record has unknown flags 0x80"):
        parse([encode_frame(*FRAMES[0]) + bad + END])


def test_lengths_beyond_the_bounds_are_refused_before_their_bytes_arrive() -> None:
    parser = FrameParser(max_record_bytes=100)
    with pytest.raises(BadFrames, match="a 101-byte record, more than 100"):
        parser.feed(struct.pack(">II", 1, 101))
    with pytest.raises(BadFrames, match=f"more than {MAX_KEY_BYTES}"):
        FrameParser().feed(struct.pack(">II", MAX_KEY_BYTES + 1, 9))
    with pytest.raises(BadFrames, match="an empty key and a 9-byte record"):
        FrameParser().feed(struct.pack(">II", 0, 9))
