"""A least-recently-used cache with a fixed capacity, and a memoising decorator built on it."""

from collections import OrderedDict

MISSING = object()


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key, default=None):
        if key not in self._items:
            self.misses += 1
            return default
        self.hits += 1
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key, value):
        if key in self._items:
            self._items.move_to_end(key)
        self._items[key] = value
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def keys(self):
        """Keys from least to most recently used."""
        return list(self._items)

    def __len__(self):
        return len(self._items)


def memoize(capacity):
    def decorate(function):
        cache = LRUCache(capacity)

        def wrapper(*args):
            value = cache.get(args, MISSING)
            if value is MISSING:
                value = function(*args)
                cache.put(args, value)
            return value

        wrapper.cache = cache
        return wrapper
    return decorate
