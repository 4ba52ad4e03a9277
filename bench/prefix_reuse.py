"""Prompt-prefix reuse in the embedded model: seconds of k samples from one prompt vs one.

With ``prompt_cache=True`` LocalLlama does not reset the KV cache, so llama-cpp-python
keeps the longest common prefix of the last prompt and the next: k samples of one prompt
cost one prompt read plus k generations. Also times the logprob sensor (a logits
processor) against a plain call. Writes bench/results/tools/prefix-reuse-<model>.json.

    nice python bench/prefix_reuse.py --model qwen2.5-coder-0.5b --k 3 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from closedloop.models import LocalLlama, ModelRequest
from closedloop.models._guard import allow_real_model_calls

_TOOLS = "\n".join(
    f"- {name}(city: string, unit: celsius|fahrenheit): {what} for a city"
    for name, what in [
        ("weather", "the current weather"),
        ("forecast", "tomorrow's forecast"),
        ("air_quality", "the air quality index"),
        ("sunrise", "the sunrise time"),
        ("timezone", "the local time zone"),
        ("population", "the population"),
    ]
)
_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "enum": ["weather", "forecast", "air_quality", "sunrise"]},
        "arguments": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    "required": ["tool", "arguments"],
}


def _messages(city: str) -> list[dict[str, str]]:
    system = "You are a tool-calling agent. Answer with one JSON tool call.\nTools:\n" + _TOOLS
    return [{"role": "system", "content": system * 3}, {"role": "user", "content": city}]


async def _timed(model: LocalLlama, city: str, seed: int, logprobs: bool) -> float:
    request = ModelRequest(
        response_schema=_SCHEMA, max_tokens=48, temperature=0.7, seed=seed, logprobs=logprobs
    )
    started = time.perf_counter()
    await model.complete(_messages(f"What is the weather in {city}?"), request)
    return time.perf_counter() - started


async def measure(model_name: str, k: int, rounds: int) -> dict[str, Any]:
    model = LocalLlama.builtin(model_name, n_threads=2, prompt_cache=True)
    await _timed(model, "Warmup", 0, False)  # loads the model
    one, many, plain, sensed = [], [], [], []
    llama = model._loaded().llama
    for r in range(-1, rounds):  # round -1 warms the caches and the scheduler; not counted
        llama.reset()  # each side starts cold: the whole prompt is read once
        single = await _timed(model, f"Oslo{r}", 1, False)
        llama.reset()
        start = time.perf_counter()
        for i in range(k):
            await _timed(model, f"Lima{r}", 10 + i, False)
        k_s = time.perf_counter() - start
        warm = await _timed(model, f"Lima{r}", 2, False)  # both on a warm prefix
        with_lp = await _timed(model, f"Lima{r}", 2, True)
        if r >= 0:
            one.append(single)
            many.append(k_s)
            plain.append(warm)
            sensed.append(with_lp)
    # Each round pairs one cold sample with k samples of a prompt of the same length, so the
    # per-round ratio is the paired figure; its median is robust to a round slowed by load.
    ratios = [m / o for m, o in zip(many, one, strict=True)]
    return {
        "model": model_name,
        "k": k,
        "rounds": rounds,
        "one_sample_s": one,
        "k_samples_s": many,
        "ratio_k_over_one": statistics.median(ratios),
        "ratio_per_round": ratios,
        "ratio_of_sums": sum(many) / sum(one),
        "plain_call_s": plain,
        "logprob_call_s": sensed,
        "logprob_overhead_s_per_call": (sum(sensed) - sum(plain)) / rounds,
        "note": (
            "2 threads on a shared machine; temperature 0.7, distinct seeds per sample; "
            "one warm-up round not counted; ratio_k_over_one is the median per-round ratio"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with allow_real_model_calls():
        result = asyncio.run(measure(args.model, args.k, args.rounds))
    result["command"] = (
        f"nice python bench/prefix_reuse.py --model {args.model} --k {args.k} "
        f"--rounds {args.rounds}"
    )
    out = Path(__file__).parent / "results" / "tools" / f"prefix-reuse-{args.model}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
