"""The four refinement tasks (the ``seed`` task set), with prompts and tests for closedloop.

T1 merge two sorted linked lists (5 checks), T2 spiral matrix (10), T3 LRU cache (10),
and T4 TTL cache (10). The TTL cache takes its clock as an
argument, so its checks move time with a fake clock instead of sleeping.
"""

from __future__ import annotations

from ._tasks import Check, CodeTask

__all__ = ["LRU_CACHE", "MERGE_SORTED_LISTS", "SEED_TASKS", "SPIRAL_MATRIX", "TTL_CACHE"]

_LIST_NODE = """\
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next
"""

_LIST_SUPPORT = """\
def from_list(values):
    head = None
    for value in reversed(values):
        head = ListNode(value, head)
    return head


def to_list(node):
    out = []
    while node is not None and len(out) < 10_000:
        out.append(node.val)
        node = node.next
    return out
"""

MERGE_SORTED_LISTS = CodeTask(
    name="merge_sorted_lists",
    entry_point="merge_two_lists",
    prompt=f"""\
Write a Python function `merge_two_lists(l1, l2)` that merges two sorted singly linked
lists into one sorted linked list and returns its head. Each list is either `None`
(empty) or a `ListNode`; reuse the given nodes. The class is already defined exactly as
below; do not redefine it.

```python
{_LIST_NODE}```

Example: merging 1->2->4 and 1->3->4 gives 1->1->2->3->4->4.
Answer with one Python code block.""",
    preamble=_LIST_NODE,
    support=_LIST_SUPPORT,
    checks=(
        Check(
            "T1",
            "to_list(merge_two_lists(from_list([1, 2, 4]), from_list([1, 3, 4])))"
            " == [1, 1, 2, 3, 4, 4]",
        ),
        Check("T2", "to_list(merge_two_lists(None, None)) == []"),
        Check("T3", "to_list(merge_two_lists(None, from_list([0]))) == [0]"),
        Check(
            "T4",
            "to_list(merge_two_lists(from_list([-3, 5, 9]), from_list([-7, -3, 10, 11])))"
            " == [-7, -3, -3, 5, 9, 10, 11]",
        ),
        Check("T5", "to_list(merge_two_lists(from_list([2, 2, 2]), None)) == [2, 2, 2]"),
    ),
)
"""Refinement task: merge two sorted linked lists (5 checks)."""

SPIRAL_MATRIX = CodeTask(
    name="spiral_matrix",
    entry_point="spiral_order",
    prompt="""\
Write a Python function `spiral_order(matrix: list[list[int]]) -> list[int]` that returns
the elements of an m x n matrix in spiral order: along the top row left to right, down the
right column, along the bottom row right to left, up the left column, then the same for
the inner matrix, until every element has been visited once. The matrix may have any
number of rows and columns, including a single row, a single column, or none at all
(`[]` or `[[]]` give `[]`). Do not modify the input.

Example: [[1, 2, 3], [4, 5, 6], [7, 8, 9]] gives [1, 2, 3, 6, 9, 8, 7, 4, 5].
Answer with one Python code block.""",
    checks=(
        Check(
            "T1", "spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]"
        ),
        Check(
            "T2",
            "spiral_order([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])"
            " == [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]",
        ),
        Check(
            "T3",
            "spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]])"
            " == [1, 2, 3, 6, 9, 12, 11, 10, 7, 4, 5, 8]",
        ),
        Check("T4", "spiral_order([[1, 2, 3, 4]]) == [1, 2, 3, 4]"),
        Check("T5", "spiral_order([[1], [2], [3]]) == [1, 2, 3]"),
        Check("T6", "spiral_order([[7]]) == [7]"),
        Check("T7", "(spiral_order([]), spiral_order([[]])) == ([], [])"),
        Check("T8", "spiral_order([[1, 2], [3, 4]]) == [1, 2, 4, 3]"),
        Check(
            "T9",
            "spiral_order([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])"
            " == [1, 2, 3, 4, 8, 12, 16, 15, 14, 13, 9, 5, 6, 7, 11, 10]",
        ),
        Check(
            "T10",
            "(spiral_order(m), m) == ([1, 2, 4, 6, 5, 3], snapshot)",
            setup="m = [[1, 2], [3, 4], [5, 6]]\nsnapshot = [row[:] for row in m]",
        ),
    ),
)
"""Refinement task: a matrix's elements in spiral order (10 checks)."""

LRU_CACHE = CodeTask(
    name="lru_cache",
    entry_point="LRUCache",
    prompt="""\
Write a Python class `LRUCache` with a fixed capacity and least-recently-used eviction:

- `LRUCache(capacity: int)`: capacity is a positive integer.
- `get(key) -> int`: the value stored under `key`, or -1 if the key is not present.
  Reading a key makes it the most recently used.
- `put(key, value) -> None`: insert or update the value. Writing a key (new or existing)
  makes it the most recently used. If inserting a new key would exceed the capacity,
  first evict the least recently used key.

Example: c = LRUCache(2); c.put(1, 1); c.put(2, 2); c.get(1) returns 1; c.put(3, 3)
evicts key 2; c.get(2) returns -1.
Answer with one Python code block.""",
    related=(
        ("get", "put() must refresh recency too when it updates an existing key"),
        (
            "put",
            "get() must refresh recency too, and eviction must remove the least "
            "recently used key (the oldest), not the newest",
        ),
        ("LRUCache", "check that updating an existing key does not count against capacity"),
    ),
    checks=(
        Check("T1", "c.get(1) == 1", setup="c = LRUCache(2)\nc.put(1, 1)"),
        Check("T2", "c.get(3) == -1", setup="c = LRUCache(2)\nc.put(1, 1)"),
        Check(
            "T3",
            "c.get(2) == -1",
            setup="c = LRUCache(2)\nc.put(1, 1)\nc.put(2, 2)\nc.get(1)\nc.put(3, 3)",
        ),
        Check(
            "T4", "c.get(1) == -1", setup="c = LRUCache(2)\nc.put(1, 1)\nc.put(2, 2)\nc.put(3, 3)"
        ),
        Check("T5", "c.get(1) == 10", setup="c = LRUCache(2)\nc.put(1, 1)\nc.put(1, 10)"),
        Check(
            "T6",
            "c.get(2) == -1",
            setup="c = LRUCache(2)\nc.put(1, 1)\nc.put(2, 2)\nc.put(1, 10)\nc.put(3, 3)",
        ),
        Check(
            "T7",
            "c.get(3) == -1",
            setup="c = LRUCache(3)\nc.put(1, 1)\nc.put(2, 2)\nc.put(3, 3)\nc.get(1)\nc.get(2)"
            "\nc.put(4, 4)",
        ),
        Check(
            "T8",
            "(c.get(1), c.get(2)) == (-1, 2)",
            setup="c = LRUCache(1)\nc.put(1, 1)\nc.put(2, 2)",
        ),
        Check(
            "T9",
            "(c.get(1), c.get(2)) == (2, 2)",
            setup="c = LRUCache(2)\nc.put(1, 1)\nc.put(1, 2)\nc.put(2, 2)",
        ),
        Check(
            "T10",
            "c.get(1) == -1",
            setup="c = LRUCache(2)\nc.put(2, 2)\nc.put(1, 1)\nc.get(2)\nc.put(3, 3)",
        ),
    ),
)
"""Refinement task: an LRU cache class (10 checks)."""

_FAKE_CLOCK = '''\
class FakeClock:
    """A clock the checks move by hand."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds
'''

TTL_CACHE = CodeTask(
    name="ttl_cache",
    entry_point="TTLCache",
    prompt="""\
Write a Python class `TTLCache`, a cache whose entries expire:

- `TTLCache(ttl: float, maxsize: int = 128, clock=time.monotonic)`: `ttl` is the default
  time to live in seconds; `clock` is a function returning the current time in seconds
  (tests pass a fake clock, so always read the time through `clock()`, never directly).
- `set(key, value, ttl=None) -> None`: store the value; it expires `ttl` seconds from now
  (the default ttl when None). Setting an existing key replaces its value and expiry.
  An entry set at time t with ttl d is live while clock() < t + d and expired from then on.
- `get(key, default=None)`: the value if the key is present and live, else `default`.
- `delete(key) -> bool`: remove the key; True if a live entry was removed.
- `len(cache)` counts only live entries; `key in cache` is True only for a live entry.
- When a new key is set and `maxsize` live entries are already stored, expired entries
  are dropped first; if the cache is still full, the entry that was set the longest ago
  is evicted.

Answer with one Python code block.""",
    support=_FAKE_CLOCK,
    related=(
        ("get", "the same expiry test must apply in __contains__, __len__ and delete()"),
        ("set", "eviction must drop expired entries before evicting live ones"),
    ),
    checks=(
        Check(
            "T1",
            "c.get('a') == 1",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1)"
            "\nclock.advance(9.9)",
        ),
        Check(
            "T2",
            "c.get('a', 'gone') == 'gone'",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1)"
            "\nclock.advance(11)",
        ),
        Check(
            "T3",
            "c.get('a') is None",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1)"
            "\nclock.advance(10)",
        ),
        Check(
            "T4",
            "(c.get('short'), c.get('long')) == (None, 2)",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('short', 1, ttl=1)"
            "\nc.set('long', 2, ttl=100)\nclock.advance(50)",
        ),
        Check(
            "T5",
            "c.get('a') == 2",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1)"
            "\nclock.advance(8)\nc.set('a', 2)\nclock.advance(8)",
        ),
        Check(
            "T6",
            "len(c) == 1",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1, ttl=1)"
            "\nc.set('b', 2)\nclock.advance(5)",
        ),
        Check(
            "T7",
            "('a' in c, 'b' in c) == (False, True)",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('a', 1, ttl=1)"
            "\nc.set('b', 2)\nclock.advance(5)",
        ),
        Check(
            "T8",
            "(c.get('a'), c.get('b'), c.get('c')) == (None, 2, 3)",
            setup="clock = FakeClock()\nc = TTLCache(10, maxsize=2, clock=clock)\nc.set('a', 1)"
            "\nclock.advance(1)\nc.set('b', 2)\nclock.advance(1)\nc.set('c', 3)",
        ),
        Check(
            "T9",
            "(c.get('a'), c.get('b'), c.get('c')) == (None, 2, 3)",
            setup="clock = FakeClock()\nc = TTLCache(100, maxsize=2, clock=clock)"
            "\nc.set('b', 2)\nclock.advance(1)\nc.set('a', 1, ttl=1)\nclock.advance(2)"
            "\nc.set('c', 3)",
        ),
        Check(
            "T10",
            "(c.delete('a'), c.delete('a'), c.delete('old')) == (True, False, False)",
            setup="clock = FakeClock()\nc = TTLCache(10, clock=clock)\nc.set('old', 0, ttl=1)"
            "\nc.set('a', 1)\nclock.advance(2)",
        ),
    ),
)
"""Refinement task: a TTL cache class on an injected clock (10 checks)."""

SEED_TASKS: tuple[CodeTask, ...] = (MERGE_SORTED_LISTS, SPIRAL_MATRIX, LRU_CACHE, TTL_CACHE)
"""The four tasks, in order of difficulty."""
