"""build_audit: what a reviewer sees of a run, compact and redacted, through the real queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent._records import ActionCall, StepRecord
from closedloop.agent._trace import build_audit
from closedloop.feedback import HandoverQueue, SQLiteStore


def step(n: int, **overrides: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "run_id": "r",
        "task_id": "t",
        "step": n,
        "t_s": float(n),
        "phase": "search" if n < 5 else "book",
        "mode": "react",
        "step_type": "search",
        "action": ActionCall(tool="search" if n % 2 else "lookup", arguments={"day": n}),
        "observation": {
            "status": "empty",
            "confidence": 0.0,
            "meaning": "no match found; this is not the absence of a constraint",
            "source": "flights",
            "raw": "x" * 5000,  # raw answers are not for the reviewer
            "value": [],
        },
        "error": 0.1 * (n % 10),
        "control": 0.3,
        "quality": 0.5,
        "f_est": min(1.0, 0.1 * n),
        "protocol": "manual_handover" if n >= 9 else "normal",
        "notes": [f"note {n}"],
    }
    fields.update(overrides)
    return StepRecord(**fields)


def test_audit_keeps_the_last_steps_and_counts_the_rest() -> None:
    records = [step(n) for n in range(10)]
    audit = build_audit(records, ["price is required"], "add one day", max_steps=3)
    assert [o["step"] for o in audit["observed"]] == [7, 8, 9]
    assert audit["omitted_steps"] == 7
    assert audit["failed_checks"] == ["price is required"]
    assert audit["suggested_fix"] == "add one day"
    last = audit["observed"][-1]
    assert last["action"] == {"tool": "search", "arguments": {"day": 9}}
    assert last["observation"] == {
        "status": "empty",
        "source": "flights",
        "confidence": 0.0,
        "meaning": "no match found; this is not the absence of a constraint",
        "value": [],
    }
    assert (last["e"], last["f_est"], last["protocol"], last["notes"]) == (
        pytest.approx(0.9),
        pytest.approx(0.9),
        "manual_handover",
        ["note 9"],
    )
    summary = audit["summary"]
    assert summary["steps"] == 10 and summary["last_step"] == 9 and summary["phase"] == "book"
    assert summary["max_e"] == pytest.approx(0.9)
    assert summary["mean_e"] == pytest.approx(0.45)
    assert summary["tools"] == ["lookup", "search"]


def test_audit_cuts_long_values_and_redacts_secrets() -> None:
    secret = "sk-live0123456789abcdefghijKLMNOP"
    record = step(
        0,
        action=ActionCall(tool="pay", arguments={"token": secret, "memo": "m" * 2000}),
        final_answer=None,
        observation={"status": "error", "error": f"401: Bearer {secret}", "value": "v" * 900},
    )
    audit = build_audit([record], [], None, max_chars=100)
    text = json.dumps(audit)
    assert secret not in text and "[redacted]" in text
    observed = audit["observed"][0]
    arguments = observed["action"]["arguments"]
    assert arguments["token"] == "[redacted]"  # every key stays visible, values are cut
    assert arguments["memo"] == "m" * 100 + "…[+1900 chars]"
    assert observed["observation"]["value"].startswith("v" * 100)
    assert observed["observation"]["value"].endswith("…[+800 chars]")
    assert len(text) < 2000

    wide = step(1, action=ActionCall(tool="bulk", arguments={f"k{i}": i for i in range(100)}))
    (observed,) = build_audit([wide], [], None, max_chars=50)["observed"]
    assert len(observed["action"]["arguments"]) == 33
    assert observed["action"]["arguments"]["…"] == "+68 more keys"
    long_list = step(2, observation={"status": "ok", "value": list(range(1000))})
    (observed,) = build_audit([long_list], [], None, max_chars=50)["observed"]
    assert observed["observation"]["value"]["original_chars"] > 1000
    assert len(observed["observation"]["value"]["preview"]) == 51


def test_a_secret_cut_in_half_is_still_redacted() -> None:
    secret = "sk-proj-" + "A1b2C3d4" * 8
    record = step(0, notes=["x" * 85 + " " + secret])  # the cut at 100 falls inside it
    (observed,) = build_audit([record], [], None, max_chars=100)["observed"]
    assert observed["notes"] == ["x" * 85 + " [redacted]"]
    assert secret[:10] not in json.dumps(observed)


def test_audit_of_no_steps_and_bad_arguments() -> None:
    audit = build_audit([], ["no step ran"], None)
    assert audit["observed"] == [] and audit["summary"] == {"steps": 0}
    with pytest.raises(ConfigurationError, match="failed_checks"):
        build_audit([], "one check", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_steps"):
        build_audit([], [], None, max_steps=0)
    with pytest.raises(ConfigurationError, match="max_chars"):
        build_audit([], [], None, max_chars=3)


async def test_audit_goes_through_the_queue_on_a_real_file(tmp_path: Path) -> None:
    records = [step(n) for n in range(4)]
    audit = build_audit(records, ["price missing"], "retry with a wider date range")
    async with SQLiteStore(tmp_path / "state.db") as store:
        queue = HandoverQueue(store)
        item_id = await queue.submit("t", "r", audit, frozen_state={"cursor": 4})
        item = await queue.get(item_id)
    assert item.audit == audit
    assert item.audit["observed"][0]["observation"]["status"] == "empty"
