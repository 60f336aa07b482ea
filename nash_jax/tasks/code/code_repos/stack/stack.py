"""A stack and the bracket checks built on it."""

PAIRS = {")": "(", "]": "[", "}": "{"}


class EmptyStackError(Exception):
    pass


class Stack:
    def __init__(self):
        self._items = []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise EmptyStackError("pop from an empty stack")
        return self._items.pop()

    def peek(self):
        if self.is_empty():
            raise EmptyStackError("peek at an empty stack")
        return self._items[-1]

    def is_empty(self):
        return len(self._items) == 0

    def __len__(self):
        return len(self._items)


def balanced(text):
    """Whether every bracket in `text` is closed by its partner, in order."""
    stack = Stack()
    for char in text:
        if char in "([{":
            stack.push(char)
        elif char in PAIRS:
            if stack.is_empty() or stack.pop() != PAIRS[char]:
                return False
    return stack.is_empty()


def max_depth(text):
    """The deepest nesting of brackets in `text` (assumed balanced)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in PAIRS:
            depth -= 1
    return deepest
