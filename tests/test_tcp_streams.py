"""TCP reassembly (producers/tcp_streams.py): out-of-order, retransmitted, overlapping and lost segments."""
import random

from producers.tcp_streams import MAX_PENDING, SEQ_MOD, Direction


def _stream(rng: random.Random, size: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(size))


def _segments(rng: random.Random, data: bytes) -> list[tuple[int, int]]:
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(0, min(12, len(data) - 1))))
    pieces = list(zip([0, *cuts], [*cuts, len(data)]))
    for _ in range(rng.randint(0, 3)):                      # retransmissions and overlaps
        a = rng.randrange(len(data))
        pieces.append((a, min(len(data), a + rng.randint(1, 300))))
    window = rng.randint(1, 6)                              # a reorder window, as networks reorder
    for i in range(len(pieces)):
        j = min(len(pieces) - 1, i + rng.randrange(window))
        pieces[i], pieces[j] = pieces[j], pieces[i]
    return pieces


def _feed(d: Direction, isn: int, data: bytes, pieces, ts=lambda i: i) -> list:
    out = []
    for i, (lo, hi) in enumerate(pieces):
        out += d.segment((isn + 1 + lo) % SEQ_MOD, data[lo:hi], ts(i))
    return out + d.finish()


def test_random_segmentations_give_the_stream_back_once_in_order():
    for seed in range(300):
        rng = random.Random(seed)
        data = _stream(rng, rng.randint(1, 3000))
        isn = rng.choice([rng.getrandbits(32), SEQ_MOD - 1 - rng.randrange(len(data) + 1)])   # some wrap around
        d = Direction()
        d.segment(isn, b"", 0, syn=True)
        out = _feed(d, isn, data, _segments(rng, data))
        assert b"".join(x.data for x in out) == data, seed
        assert [x.offset for x in out] == [sum(len(y.data) for y in out[:i]) for i in range(len(out))]
        assert all(x.gap_before == 0 for x in out) and d.pending == {} and d.synced


def test_bytes_carry_the_time_of_the_segment_that_completed_them():
    d = Direction()
    d.segment(99, b"", 0, syn=True)
    assert d.segment(105, b"world", 20) == []              # waits behind the missing first five bytes
    out = d.segment(100, b"hello", 30)
    assert [(x.offset, x.data, x.ts_ms) for x in out] == [(0, b"hello", 30), (5, b"world", 20)]


def test_a_capture_that_starts_mid_connection_starts_at_its_first_segment():
    d = Direction()
    out = d.segment(5000, b"tail-of-a-packet", 1) + d.segment(5016, b"next", 2)
    assert b"".join(x.data for x in out) == b"tail-of-a-packetnext" and not d.synced


def test_a_lost_segment_is_a_gap_once_the_connection_ends():
    d = Direction()
    d.segment(0, b"", 0, syn=True)
    first = d.segment(1, b"aaaa", 1)
    assert d.segment(9, b"cccc", 2) == []                   # bytes 4..7 never come
    out = first + d.finish()
    assert [(x.offset, x.data, x.gap_before) for x in out] == [(0, b"aaaa", 0), (8, b"cccc", 4)]


def test_a_hole_with_too_much_behind_it_is_given_up_without_waiting_for_the_end():
    d = Direction()
    d.segment(0, b"", 0, syn=True)
    chunk = b"x" * 65536
    out = []
    for i in range(MAX_PENDING // len(chunk) + 2):
        out += d.segment(1 + 10 + i * len(chunk), chunk, i)   # 10 bytes missing at the start
    assert out and out[0].gap_before == 10 and out[0].offset == 10
    assert d.pending_bytes <= MAX_PENDING


def test_random_losses_are_reported_as_gaps_that_account_for_every_byte():
    for seed in range(200):
        rng = random.Random(seed)
        data = _stream(rng, rng.randint(50, 2000))
        pieces = [p for p in _segments(rng, data) if rng.random() > 0.2]
        d = Direction()
        d.segment(7, b"", 0, syn=True)
        out = _feed(d, 7, data, pieces)
        received = set()
        for lo, hi in pieces:
            received.update(range(lo, hi))
        for x in out:
            assert data[x.offset:x.offset + len(x.data)] == x.data, seed
        got = {i for x in out for i in range(x.offset, x.offset + len(x.data))}
        assert got == {i for i in received if i >= 0}, seed
        for prev, x in zip(out, out[1:]):
            assert x.offset == prev.offset + len(prev.data) + x.gap_before
