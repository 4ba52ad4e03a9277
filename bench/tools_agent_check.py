"""The live check of an agent change: two agent rows of live tools reports, paired per
task, beside the replay of the same change on the same tasks.

    python bench/tools_agent_check.py --report bench/results/tools/eval60-gated-qwen.json
    python bench/tools_agent_check.py --change confident \
        --report bench/results/tools/eval60-default-qwen.json --treated closedloop \
        --reference-report bench/results/tools/eval60-gated-qwen.json

``--change`` names what is checked and its rows: ``gated`` (the abstaining gate, row
``gated`` against ``closedloop``; the report from ``bench/tools.py ... --strategies
closedloop,gated``) or ``confident`` (the confident call, ``Sampling(stop="auto")``, row
``confident`` against ``closedloop``; from ``--strategies closedloop,confident``).
``--reference-report`` takes the reference row from an earlier run of the same tasks and
model; the pairing of success, calls and tokens is then as exact as the loop is
deterministic, and the seconds are two runs'. (In the second command above, the report's
``closedloop`` row ran while the confident call was briefly the default.) The bank
defaults to bench/results/tools/bank/<model>-eval.jsonl.gz for the report's model. Writes
bench/results/tools/live-check-<change>-<model>.json (--out to change).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from closedloop import ConfigurationError
from closedloop.control import StopRule
from closedloop_bench.tools import read_report
from closedloop_bench.tools._agent_check import agent_check, report_lines
from closedloop_bench.tools._agents import CONFIDENT, GATE
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._replay import Abstaining, AdaptiveVotes, Strategy, Votes
from closedloop_bench.tools._replay_command import RESULTS, load_records


@dataclass(frozen=True, slots=True)
class Change:
    """A change to the agent: its two live rows and its replay on the one-call decision."""

    reference: str
    treated: str
    replayed: Strategy
    abstain_below: float | None = None


def _confident(rule: StopRule | None) -> AdaptiveVotes:
    if rule is None:
        raise ConfigurationError("sampling", rule, "needs a stop rule to replay")
    return AdaptiveVotes.as_agent(rule, f"p_low≥{getattr(rule, 'threshold', '?')}, weighted")


def _changes() -> dict[str, Change]:
    gate = GATE.rule(True)
    if GATE.abstain_below is None:
        raise ConfigurationError("GATE", GATE, "needs an abstain floor")
    return {
        "gated": Change(
            "closedloop",
            "gated",
            Abstaining(_confident(gate), GATE.abstain_below),
            GATE.abstain_below,
        ),
        "confident": Change("closedloop", "confident", _confident(CONFIDENT.rule(True))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, required=True, help="a live tools report")
    parser.add_argument("--change", choices=("gated", "confident"), default="gated")
    parser.add_argument("--reference", default=None, help="the reference row (by --change)")
    parser.add_argument("--treated", default=None, help="the treated row (by --change)")
    parser.add_argument(
        "--reference-report",
        type=Path,
        default=None,
        help="read the reference row from this report (an earlier run of the same tasks)",
    )
    parser.add_argument("--bank", type=Path, default=None)
    parser.add_argument("--tasks", type=Path, default=DATA_DIR / "eval.jsonl")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    change = _changes()[args.change]
    reference = args.reference or change.reference
    treated = args.treated or change.treated
    try:
        if not args.report.is_file():
            raise ConfigurationError("--report", str(args.report), "no such file")
        report = read_report(args.report)
        earlier = args.reference_report
        if earlier is not None and not earlier.is_file():
            raise ConfigurationError("--reference-report", str(earlier), "no such file")
        reference_rows = report if earlier is None else read_report(earlier)
        model = report.models[0].removeprefix("local:")
        bank = args.bank or RESULTS / "bank" / f"{model}-eval.jsonl.gz"
        _, records = load_records(bank, args.tasks)
        order = [r.task_id for r in reference_rows.results if r.strategy == reference]
        if not order:
            rows = ", ".join(sorted({r.strategy for r in reference_rows.results}))
            raise ConfigurationError(
                "--reference", reference, f"no such row (the report has {rows})"
            )
        by_id = {r.task_id: r for r in records}
        missing = [t for t in order if t not in by_id]
        if missing:
            raise ConfigurationError("--bank", str(bank), f"lacks task {missing[0]}")
        check = agent_check(
            report,
            [by_id[t] for t in order],
            reference=reference,
            treated=treated,
            replay_reference=Votes(1),
            replay_treated=change.replayed,
            abstain_below=change.abstain_below,
            reference_report=reference_rows,
        )
    except (ConfigurationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = "python bench/tools_agent_check.py " + " ".join(shlex.quote(a) for a in raw)
    out = args.out or RESULTS / f"live-check-{args.change}-{model.replace(':', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {"command": command, "report": str(args.report), "bank": str(bank)}
    if earlier is not None:
        body["reference_report"] = str(earlier)
    body |= check
    out.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
    for line in report_lines(check):
        print(line)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
