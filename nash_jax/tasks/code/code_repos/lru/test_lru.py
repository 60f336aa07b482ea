import pytest

from lru import LRUCache, memoize


def test_get_and_put():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("b") is None
    assert cache.get("b", 0) == 0


def test_evicts_least_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]


def test_put_existing_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert cache.get("b") is None


def test_capacity_respected():
    cache = LRUCache(3)
    for i in range(10):
        cache.put(i, i)
    assert len(cache) == 3
    assert cache.keys() == [7, 8, 9]


def test_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_hits_and_misses():
    cache = LRUCache(1)
    cache.put(1, "x")
    cache.get(1)
    cache.get(2)
    cache.get(1)
    assert (cache.hits, cache.misses) == (2, 1)


def test_memoize_calls_once():
    calls = []

    @memoize(4)
    def square(x):
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]


def test_memoize_caches_none_results():
    calls = []

    @memoize(2)
    def nothing(x):
        calls.append(x)

    nothing(1)
    nothing(1)
    assert calls == [1]
