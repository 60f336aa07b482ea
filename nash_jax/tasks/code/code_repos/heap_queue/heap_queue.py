"""A binary min-heap priority queue, written out rather than borrowed from heapq."""


class PriorityQueue:
    def __init__(self, items=()):
        self._heap = []
        for item in items:
            self.push(item)

    def __len__(self):
        return len(self._heap)

    def push(self, item):
        heap = self._heap
        heap.append(item)
        child = len(heap) - 1
        while child > 0:
            parent = (child - 1) // 2
            if heap[parent] <= heap[child]:
                break
            heap[parent], heap[child] = heap[child], heap[parent]
            child = parent

    def peek(self):
        if not self._heap:
            raise IndexError("peek at an empty queue")
        return self._heap[0]

    def pop(self):
        heap = self._heap
        if not heap:
            raise IndexError("pop from an empty queue")
        top = heap[0]
        last = heap.pop()
        if heap:
            heap[0] = last
            self._sift_down(0)
        return top

    def _sift_down(self, parent):
        heap = self._heap
        while True:
            smallest = parent
            for child in (2 * parent + 1, 2 * parent + 2):
                if child < len(heap) and heap[child] < heap[smallest]:
                    smallest = child
            if smallest == parent:
                return
            heap[parent], heap[smallest] = heap[smallest], heap[parent]
            parent = smallest


def k_smallest(items, k):
    """The k smallest items, smallest first."""
    queue = PriorityQueue(items)
    return [queue.pop() for _ in range(min(k, len(queue)))]
