"""The generator: code out of model answers, the model call's parameters, the cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError, ModelTimeoutError
from closedloop.harness import ModelGenerator, extract_code
from closedloop.harness._generator import tidy_code
from closedloop.models import CallInfo, FunctionModel, Message, ScriptedModel

MSGS = (Message(role="user", content="write f"),)


def test_extract_prefers_the_block_defining_the_entry_point() -> None:
    text = (
        "Usage:\n```python\nprint(f(1))\n```\nImplementation:\n```python\n"
        "def f(x):\n    return x\n```\n"
    )
    assert extract_code(text, "f") == "def f(x):\n    return x\n"
    assert extract_code(text, "g") == "def f(x):\n    return x\n"  # the longest block


def test_extract_handles_tags_unterminated_fences_and_no_fences() -> None:
    assert extract_code("```py\nx = 1\n```") == "x = 1\n"
    assert extract_code("```\nx = 2\n```") == "x = 2\n"
    assert extract_code("```bash\nls\n```\n```python\nx = 3\n```") == "x = 3\n"
    assert extract_code("Sure:\n```python\ndef f():\n    return 1") == "def f():\n    return 1\n"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1\n"
    assert extract_code("   ") == ""
    assert extract_code("class LRUCache:\n    pass", "LRUCache") == "class LRUCache:\n    pass\n"


code_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="`\r"), min_size=1
).filter(lambda s: s.strip() != "")


@given(code=code_text, prose=st.text(alphabet="abc .,:!\n"))
def test_extract_recovers_any_fenced_code(code: str, prose: str) -> None:
    assert extract_code(f"{prose}\n```python\n{code}\n```\n{prose}") == code.strip() + "\n"


async def test_the_generator_passes_messages_and_parameters() -> None:
    seen: list[CallInfo] = []

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        seen.append(call)
        return "```python\ndef f():\n    return 1\n```"

    gen = ModelGenerator(FunctionModel(fn), temperature=0.7, max_tokens=300, timeout=5.0)
    out = await gen(MSGS, seed=11, entry_point="f")
    assert out.code == "def f():\n    return 1\n"
    assert out.completion_tokens > 0 and out.prompt_tokens > 0
    assert not out.cached
    call = seen[0]
    assert (call.temperature, call.max_tokens, call.seed, call.timeout) == (0.7, 300, 11, 5.0)
    assert call.messages == MSGS


async def test_the_cache_serves_exact_repeats_only() -> None:
    model = ScriptedModel(
        ["```python\nA = 1\n```", "```python\nA = 2\n```", "```python\nA = 3\n```"]
    )
    gen = ModelGenerator(model, temperature=0.7, cache={})
    first = await gen(MSGS, seed=1, entry_point=None)
    again = await gen(MSGS, seed=1, entry_point=None)
    other_seed = await gen(MSGS, seed=2, entry_point=None)
    assert (first.code, again.code, other_seed.code) == ("A = 1\n", "A = 1\n", "A = 2\n")
    assert again.cached and again.latency_s == first.latency_s  # the cost of the real call
    assert (gen.calls, gen.cache_hits, len(model.calls)) == (2, 1, 2)


async def test_no_cache_for_unseeded_sampling() -> None:
    model = ScriptedModel(["```python\nA = 1\n```", "```python\nA = 2\n```"])
    gen = ModelGenerator(model, temperature=0.7, cache={})
    a = await gen(MSGS, seed=None, entry_point=None)
    b = await gen(MSGS, seed=None, entry_point=None)
    assert (a.code, b.code, gen.cache_hits) == ("A = 1\n", "A = 2\n", 0)


async def test_model_errors_propagate() -> None:
    gen = ModelGenerator(ScriptedModel([ModelTimeoutError("slow")]))
    with pytest.raises(ModelTimeoutError):
        await gen(MSGS, seed=0, entry_point=None)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="model"):
        ModelGenerator("not a model")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="temperature"):
        ModelGenerator(ScriptedModel([]), temperature=3.0)
    with pytest.raises(ConfigurationError, match="max_tokens"):
        ModelGenerator(ScriptedModel([]), max_tokens=1)


def test_demo_statements_and_a_cut_off_tail_are_dropped() -> None:
    answer = (
        "```python\nimport math\n\ndef f(x):\n    return math.floor(x)\n\n# Try it\n"
        "print(f(1.5))  # 1\nassert f(2.0) == 2\nf(3)\nLIMIT = 3\n"
        'if __name__ == "__main__":\n    print(f(4.2))\nprint(f("never closed\n'
    )
    assert extract_code(answer, "f") == (
        "import math\n\ndef f(x):\n    return math.floor(x)\n\n# Try it\nLIMIT = 3\n"
    )


def test_tidy_keeps_code_that_defines_nothing_or_not_the_entry_point() -> None:
    # Prose or a lone statement fails honestly instead of being trimmed to nothing.
    assert tidy_code("print(1)\n") == "print(1)\n"
    assert tidy_code("x = (\n") == "x = (\n"
    assert (
        tidy_code("def g():\n    return 1\nprint(g(\n", "f") == "def g():\n    return 1\nprint(g(\n"
    )
    # Calls of other things (a setup call) stay; only demos of the answer's own code go.
    code = "import sys\nsys.setrecursionlimit(5000)\ndef f():\n    return 1\n"
    assert tidy_code(code, "f") == code


@given(
    body=st.integers(min_value=-1000, max_value=1000), cut=st.integers(min_value=0, max_value=30)
)
def test_a_tail_cut_anywhere_in_a_demo_still_leaves_the_function(body: int, cut: int) -> None:
    demo = f"print(f({body}), 'check')\n"
    code = f"def f(x):\n    return x + {body}\n{demo[: len(demo) - cut]}"
    assert tidy_code(code, "f") == f"def f(x):\n    return x + {body}\n"


async def test_a_call_can_set_its_own_temperature_and_is_cached_under_it() -> None:
    model = ScriptedModel(["```python\nA = 1\n```", "```python\nA = 2\n```"])
    gen = ModelGenerator(model, temperature=0.2, cache={})
    own = await gen(MSGS, seed=1, entry_point=None)
    hot = await gen(MSGS, seed=1, entry_point=None, temperature=0.9)
    again = await gen(MSGS, seed=1, entry_point=None, temperature=0.9)
    assert (own.code, hot.code, again.code) == ("A = 1\n", "A = 2\n", "A = 2\n")
    assert [c.temperature for c in model.calls] == [0.2, 0.9]
    with pytest.raises(ConfigurationError, match="temperature"):
        await gen(MSGS, seed=1, entry_point=None, temperature=2.5)
