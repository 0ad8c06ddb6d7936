"""Batch forms: one entry per key, failures as exception instances, batches over 1024 keys."""

import crescent


def test_put_and_get_a_batch_of_1500(store, prefix):
    keys = [f"{prefix}{i}" for i in range(1500)]
    values = [i.to_bytes(4, "little") * 64 for i in range(1500)]
    assert store.put_batch(keys, values) == [None] * 1500
    got = store.get_batch(keys)
    assert got == values
    assert store.batch_exists(keys) == [True] * 1500
    assert store.remove_batch(keys) == [None] * 1500
    assert store.batch_exists(keys) == [False] * 1500


def test_failed_items_are_exception_instances(store, prefix):
    store.put(prefix + "taken", b"first")
    results = store.put_batch([prefix + "new", prefix + "taken", ""], [b"n", b"other", b"x"])
    assert results[0] is None
    assert isinstance(results[1], crescent.ConflictError) and results[1].code == "CONFLICT"
    assert isinstance(results[2], crescent.CrescentError)
    got = store.get_batch([prefix + "new", prefix + "missing"])
    assert got[0] == b"n"
    assert isinstance(got[1], crescent.NotFoundError) and got[1].code == "NOT_FOUND"
    removed = store.remove_batch([prefix + "new", prefix + "missing"])
    assert removed[0] is None and removed[1].code == "NOT_FOUND"


def test_mismatched_lengths_raise(store, prefix):
    try:
        store.put_batch([prefix + "a", prefix + "b"], [b"1"])
    except crescent.InvalidArgumentError as e:
        assert e.code == "INVALID_ARGUMENT"
    else:
        raise AssertionError("mismatched batch accepted")


def test_get_batch_values_of_mixed_sizes_stay_apart_across_calls_and_threads(server, prefix):
    # get_batch lands every value in one reused per-thread buffer before making the bytes:
    # each item must still get exactly its own bytes, call after call, thread beside thread.
    import threading

    with crescent.Store(server, segment_size=32 << 20, resident=True) as s:
        keys = [f"{prefix}{i}" for i in range(300)]
        values = [bytes([i % 251]) * (1 + (i * 997) % 20000) for i in range(300)]
        assert s.put_batch(keys, values) == [None] * 300
        failures = []

        def read(offset):
            for r in range(5):
                order = keys[offset:] + keys[:offset]
                want = values[offset:] + values[:offset]
                got = s.get_batch(order + [prefix + "missing"])
                if got[:-1] != want or not isinstance(got[-1], crescent.NotFoundError):
                    failures.append((offset, r))

        threads = [threading.Thread(target=read, args=(k * 37,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        # A batch of large values (past the kept buffer's bound) and a small one after it.
        big = [prefix + "big0", prefix + "big1"]
        assert s.put_batch(big, [b"a" * (6 << 20), b"b" * (5 << 20)]) == [None, None]
        assert s.get_batch(big) == [b"a" * (6 << 20), b"b" * (5 << 20)]
        assert s.get_batch(keys[:3]) == values[:3]
