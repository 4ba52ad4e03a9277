"""Reference solutions for the refinement tasks, and buggy variants with known failures."""

from __future__ import annotations

MERGE = """
def merge_two_lists(l1, l2):
    dummy = tail = ListNode()
    while l1 is not None and l2 is not None:
        if l1.val <= l2.val:
            tail.next, l1 = l1, l1.next
        else:
            tail.next, l2 = l2, l2.next
        tail = tail.next
    tail.next = l1 if l1 is not None else l2
    return dummy.next
"""

SPIRAL = """
def spiral_order(matrix):
    out = []
    if not matrix or not matrix[0]:
        return out
    top, bottom, left, right = 0, len(matrix) - 1, 0, len(matrix[0]) - 1
    while top <= bottom and left <= right:
        out.extend(matrix[top][c] for c in range(left, right + 1))
        out.extend(matrix[r][right] for r in range(top + 1, bottom + 1))
        if top < bottom:
            out.extend(matrix[bottom][c] for c in range(right - 1, left - 1, -1))
        if left < right:
            out.extend(matrix[r][left] for r in range(bottom - 1, top, -1))
        top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
    return out
"""

LRU = """
from collections import OrderedDict

class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.data = OrderedDict()

    def get(self, key):
        if key not in self.data:
            return -1
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key, value):
        if key in self.data:
            self.data.move_to_end(key)
        self.data[key] = value
        if len(self.data) > self.capacity:
            self.data.popitem(last=False)
"""

# A typical round-1 bug: get() does not refresh recency (T3, T7, T10 fail).
LRU_GET_NO_REFRESH = LRU.replace(
    "        self.data.move_to_end(key)\n        return", "        return"
)

# Eviction from the wrong end (a typical regression under blind retry).
LRU_WRONG_END = LRU.replace("popitem(last=False)", "popitem(last=True)")

TTL = """
import time

class TTLCache:
    def __init__(self, ttl, maxsize=128, clock=time.monotonic):
        self.ttl = ttl
        self.maxsize = maxsize
        self.clock = clock
        self.data = {}

    def _live(self, key):
        item = self.data.get(key)
        if item is None:
            return False
        if self.clock() >= item[1]:
            del self.data[key]
            return False
        return True

    def _purge(self):
        for key in list(self.data):
            self._live(key)

    def set(self, key, value, ttl=None):
        self._purge()
        self.data.pop(key, None)
        if len(self.data) >= self.maxsize:
            del self.data[next(iter(self.data))]
        self.data[key] = (value, self.clock() + (self.ttl if ttl is None else ttl))

    def get(self, key, default=None):
        return self.data[key][0] if self._live(key) else default

    def delete(self, key):
        if self._live(key):
            del self.data[key]
            return True
        return False

    def __len__(self):
        self._purge()
        return len(self.data)

    def __contains__(self, key):
        return self._live(key)
"""

SOLUTIONS = {
    "merge_sorted_lists": MERGE,
    "spiral_matrix": SPIRAL,
    "lru_cache": LRU,
    "ttl_cache": TTL,
}
