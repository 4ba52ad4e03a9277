"""The live check of the gated agent: two agent rows of a live tools report, paired per
task, beside the replay of the same change on the same tasks.

    python bench/tools_agent_check.py --report bench/results/tools/eval60-gated-qwen.json

The report comes from ``bench/tools.py ... --strategies closedloop,gated``; the bank
defaults to bench/results/tools/bank/<model>-eval.jsonl.gz for the report's model. Writes
bench/results/tools/live-check-gated-<model>.json (--out to change).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from closedloop import ConfigurationError
from closedloop_bench.tools import read_report
from closedloop_bench.tools._agent_check import agent_check, report_lines
from closedloop_bench.tools._agents import GATE
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._replay import Abstaining, AdaptiveVotes, Votes
from closedloop_bench.tools._replay_command import RESULTS, load_records


def _gate_replayed() -> Abstaining:
    # The replay of the gated agent's one-call decision, built from the agent's own gate.
    stop, floor = GATE.stop, GATE.abstain_below
    if stop is None or floor is None:
        raise ConfigurationError("GATE", GATE, "needs a stop rule and an abstain floor")
    label = f"p_low≥{getattr(stop, 'threshold', '?')}"
    return Abstaining(AdaptiveVotes(stop, label, max_k=stop.max_samples), floor)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, required=True, help="a live tools report")
    parser.add_argument("--reference", default="closedloop")
    parser.add_argument("--treated", default="gated")
    parser.add_argument("--bank", type=Path, default=None)
    parser.add_argument("--tasks", type=Path, default=DATA_DIR / "eval.jsonl")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    try:
        if not args.report.is_file():
            raise ConfigurationError("--report", str(args.report), "no such file")
        report = read_report(args.report)
        model = report.models[0].removeprefix("local:")
        bank = args.bank or RESULTS / "bank" / f"{model}-eval.jsonl.gz"
        _, records = load_records(bank, args.tasks)
        order = [r.task_id for r in report.results if r.strategy == args.reference]
        by_id = {r.task_id: r for r in records}
        missing = [t for t in order if t not in by_id]
        if missing:
            raise ConfigurationError("--bank", str(bank), f"lacks task {missing[0]}")
        check = agent_check(
            report,
            [by_id[t] for t in order],
            reference=args.reference,
            treated=args.treated,
            replay_reference=Votes(1),
            replay_treated=_gate_replayed(),
            abstain_below=GATE.abstain_below,
        )
    except (ConfigurationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = "python bench/tools_agent_check.py " + " ".join(shlex.quote(a) for a in raw)
    out = args.out or RESULTS / f"live-check-gated-{model.replace(':', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {"command": command, "report": str(args.report), "bank": str(bank), **check}
    out.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
    for line in report_lines(check):
        print(line)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
