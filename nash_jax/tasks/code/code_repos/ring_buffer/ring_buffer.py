"""A fixed-size ring buffer that overwrites its oldest item when full."""


class RingBuffer:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._slots = [None] * capacity
        self._start = 0
        self._size = 0

    @property
    def capacity(self):
        return len(self._slots)

    def __len__(self):
        return self._size

    def is_full(self):
        return self._size == self.capacity

    def append(self, item):
        end = (self._start + self._size) % self.capacity
        self._slots[end] = item
        if self.is_full():
            self._start = (self._start + 1) % self.capacity
        else:
            self._size += 1

    def popleft(self):
        if self._size == 0:
            raise IndexError("pop from an empty ring buffer")
        item = self._slots[self._start]
        self._start = (self._start + 1) % self.capacity
        self._size -= 1
        return item

    def items(self):
        """Oldest first."""
        return [self._slots[(self._start + i) % self.capacity] for i in range(self._size)]


def moving_average(values, window):
    """The mean of the last `window` values after each one arrives."""
    buffer, out = RingBuffer(window), []
    for value in values:
        buffer.append(value)
        out.append(sum(buffer.items()) / len(buffer))
    return out
