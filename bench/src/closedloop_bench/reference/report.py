"""The multi-step report agent: fetch, extract, compare, outline, under ADRC (Han 2009).

Control design:

* **Rules** read the request (companies from the archive's own directory, quarters and
  ranges of quarters, the figure asked for), fetch the documents it needs and compute the
  answer: comparisons, totals, the best quarter and a plain outline.
* **The model extracts.** Each document's figures are read by the language model under a
  JSON schema (OCR noise: O for 0, l for 1, S for 5, B for 8, Z for 2, stray spaces);
  a deterministic normaliser turns what it copied into numbers, and ``record_figures``
  keeps only figures that occur in the document (normalised the same way) and fall in
  the figure's range. The step's error is the share of wanted figures not recorded; the
  loop's PID on it raises the extraction prompt's rigour and resamples at a higher
  temperature; the same wrong reading twice is handed to a person.
* **ADRC.** The loop's ``RegressionESO`` fits step quality against control effort and
  task complexity; its total-disturbance estimate f_est selects the protocol:
  ``DUAL_VERIFICATION`` proposes twice (the second sample at a higher temperature) and
  keeps only the figures both readings agree on; ``DIMENSION_REDUCTION`` skips the
  non-core formatting (the markdown report of ``format_answer``) and returns the plain
  text report; ``MANUAL_HANDOVER`` freezes the task with an audit in the handover queue.

Steps that use the model: the figure extraction from each document (two samples under
dual verification). Everything else is rules.

    async with build_report_agent("local:qwen2.5-coder-0.5b", base_url=world.base_url) as agent:
        result = await agent.run("整理华辰科技从2024Q1到2024Q4每个季度的营业收入，指出最高的季度，"
                                 "并给出一份至少三条的报告大纲。")
        print(result.answer)        # markdown; plain text under dimension reduction
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from closedloop.agent import ControlConfig, ErrorMetric, tool
from closedloop.feedback import StateStore
from closedloop.models import Model
from closedloop.perception import Observation

from ._agents_common import (
    Move,
    ReferenceAgent,
    Rules,
    RunContext,
    Turn,
    ask_human,
    call,
    final,
    impossible,
    pick,
    task_runner,
)
from ._tasks import ReferenceTask

__all__ = ["ReportRules", "build_report_agent", "grounded_numbers", "read_number", "run_report"]

# metric -> (request phrases, longest first), the document's labels (zh, en), range
_METRICS: dict[str, tuple[tuple[str, ...], tuple[str, str], tuple[float, float]]] = {
    "revenue_yoy_pct": (
        ("营业收入同比增长率", "year-on-year revenue growth", "同比增长"),
        ("同比", "YoY"),
        (-100.0, 500.0),
    ),
    "operating_cash_flow_mcny": (
        ("经营活动现金流量净额", "operating cash flow"),
        ("经营活动现金流量净额", "Operating cash flow"),
        (-1e6, 1e6),
    ),
    "net_profit_mcny": (("净利润", "net profit"), ("净利润", "Net profit"), (-1e6, 1e6)),
    "gross_margin_pct": (("毛利率", "gross margin"), ("毛利率", "Gross margin"), (-100.0, 100.0)),
    "revenue_mcny": (("营业收入", "revenue"), ("营业收入", "Revenue"), (0.0, 1e7)),
}
_LOOKALIKE = str.maketrans({"O": "0", "o": "0", "l": "1", "I": "1", "S": "5", "B": "8", "Z": "2"})
_NUMBERISH = re.compile(r"(?<![A-Za-z])[-+−]?[\dOolISBZ](?:[\dOolISBZ,.]| (?=[\dOolISBZ.,]))*")
_QUARTER = re.compile(r"(\d{4})\s*Q([1-4])|Q([1-4])\s*(\d{4})|(\d{4})年第([一二三四1-4])季度")


def read_number(raw: Any) -> float | None:
    """The deterministic normaliser: an OCR'd figure as a number, or None.

    Look-alike letters become digits, stray spaces and thousands separators go, and a
    decline (``下降``, ``decrease``, a minus sign) makes it negative: ``"2l0.1"`` → 210.1,
    ``"同比下降3.2%"`` → -3.2.
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if not isinstance(raw, str):
        return None
    for m in _NUMBERISH.finditer(raw):
        token = m.group(0).translate(_LOOKALIKE).replace(",", "").replace(" ", "")
        token = token.replace("−", "-")
        compact = m.group(0).replace(" ", "")
        shaped = re.search(r"\d|[OolISBZ][.,][OolISBZ]", compact)  # not a word like "Op"
        if not shaped or not re.fullmatch(r"[-+]?\d+(\.\d+)?", token):
            continue
        value = float(token)
        if re.search(r"下降|decrease|decline|down", raw, re.IGNORECASE) and value > 0:
            value = -value
        return value
    return None


def grounded_numbers(text: str) -> list[float]:
    """Every figure a report's lines give after a label (``营业收入：…``, ``Revenue: …``)."""
    out = []
    for line in text.splitlines():
        _, colon, rest = line.partition("：") if "：" in line else line.partition(":")
        if not colon:
            continue
        for piece in re.split(r"[，,(（)）;；]\s*(?=[^\d\sOolISBZ.])", rest):
            value = read_number(piece)
            if value is not None:
                out.append(value)
    return out


def _quarters(text: str) -> list[tuple[int, str]]:
    out = []
    for m in _QUARTER.finditer(text):
        if m.group(1):
            year, q = m.group(1), m.group(2)
        elif m.group(3):
            year, q = m.group(4), m.group(3)
        else:
            year, q = m.group(5), str("一二三四".find(m.group(6)) + 1 or m.group(6))
        out.append((m.start(), f"{year}Q{q}"))
    return out


def _kind(task: ReferenceTask | None, prompt: str) -> str:
    props = set(task.required_fields.get("properties", {})) if task else set()
    if "revenues" in props or re.search(r"大纲|outline", prompt, re.IGNORECASE):
        return "trend"
    if "totals" in props or re.search(r"累计|total", prompt, re.IGNORECASE):
        return "multi"
    if "values" in props or re.search(r"谁的|whose", prompt, re.IGNORECASE):
        return "compare"
    return "figure"


class ReportRules(Rules):
    """The report agent's decisions for one task (see the module docstring)."""

    tools = ("search_documents", "get_document")

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.texts: dict[str, str] = {}
        self.wanted: list[str] = []

    # --- the extraction step ---------------------------------------------------------------

    def extra_tools(self) -> list[Any]:
        texts, metrics = self.texts, _METRICS

        @tool
        async def record_figures(doc_id: str, figures: dict[str, float | None]) -> dict[str, Any]:
            """Record the figures read from one document; each must occur in its text.

            Args:
                doc_id: the document the figures were read from.
                figures: metric name -> value (null when it could not be read).
            """
            found = grounded_numbers(texts.get(doc_id, ""))
            kept, rejected = {}, {}
            for name, value in figures.items():
                low, high = metrics[name][2] if name in metrics else (-1e9, 1e9)
                if value is None:
                    rejected[name] = "not read"
                elif not low <= value <= high:
                    rejected[name] = f"{value} is outside [{low:g}, {high:g}]"
                elif not any(abs(value - g) <= 0.051 for g in found):
                    rejected[name] = f"{value} does not occur in the document"
                else:
                    kept[name] = value
            return {"doc_id": doc_id, "figures": kept, "rejected": rejected}

        return [record_figures]

    def metrics(self) -> dict[str, ErrorMetric]:
        def extraction(action: Any, observation: Observation) -> float:
            value = observation.value if isinstance(observation.value, Mapping) else {}
            asked = len(action.arguments.get("figures") or {}) if action is not None else 0
            kept = len(value.get("figures") or {})
            return 1.0 if not observation.usable else 1.0 - kept / max(asked, len(self.wanted), 1)

        return {**super().metrics(), "record_figures": extraction}

    async def _extract(self, turn: Turn, doc_id: str, names: list[str], tries: int) -> Move:
        labels = ", ".join(f"{n} ({_METRICS[n][1][0]} / {_METRICS[n][1][1]})" for n in names)
        answer = await self.ctx.language.ask(
            turn,
            "You read figures from a quarterly report that came through OCR: letters may "
            "stand for digits (O=0, l=1, S=5, B=8, Z=2) and spaces may split numbers. For "
            "each figure asked, copy the number written after its label; for growth, a "
            "decline (下降) is negative. Reply with JSON, null for a figure not in the text. "
            + await self.rigour("record_figures"),
            f"Report:\n{self.texts[doc_id]}\nFigures: {labels}",
            {
                "type": "object",
                "properties": {n: {"type": ["string", "number", "null"]} for n in names},
                "required": names,
            },
            resample=tries,
        )
        figures = {n: read_number((answer or {}).get(n)) for n in names}
        return call("record_figures", doc_id=doc_id, figures=figures)

    def _figures(self, turn: Turn, doc_id: str, names: list[str]) -> dict[str, float] | None:
        kept: dict[str, float] = {}
        for seen in turn.facts.all("record_figures"):
            if seen.arguments.get("doc_id") == doc_id and seen.ok:
                kept.update(pick(seen.value, "figures") or {})
        return kept if all(n in kept for n in names) else None

    # --- deciding ------------------------------------------------------------------------------

    async def decide(self, turn: Turn) -> Move:
        docs = self.directory(turn, "documents", "search_documents", "documents")
        if not isinstance(docs, list):
            return docs
        prompt, lang = self.ctx.prompt, self.ctx.lang
        kind = _kind(self.ctx.task, prompt)
        companies = self._companies(docs, prompt)
        if not companies:
            return impossible(
                lang, "档案中没有所问公司的报告", "there are no reports of that company"
            )
        quarters = self._quarter_span(docs, prompt)
        asked = [
            m for m, spec in _METRICS.items() for p in spec[0] if p.casefold() in prompt.casefold()
        ]
        metric = asked[0] if asked else "revenue_mcny"
        if kind in ("trend", "multi"):
            metric = "revenue_mcny"
        self.wanted = [metric]
        values: dict[tuple[str, str], float] = {}
        for company in companies if kind != "figure" else companies[:1]:
            for quarter in quarters or ["?"]:
                doc = next(
                    (d for d in docs if (d["company"], pick(d, "quarter")) == (company, quarter)),
                    None,
                )
                if doc is None:
                    zh, en = (
                        f"没有{company} {quarter}的报告",
                        f"there is no report of {company} for {quarter}",
                    )
                    return impossible(lang, zh, en)
                move = await self._read(turn, str(doc["doc_id"]), metric)
                if isinstance(move, Move):
                    return move
                values[(company, quarter)] = move
        return self._answer(kind, values, companies, quarters)

    async def _read(self, turn: Turn, doc_id: str, metric: str) -> Move | float:
        seen = turn.facts.seen("get_document", doc_id=doc_id)
        if seen is None:
            return call("get_document", doc_id=doc_id)
        if not seen.ok or not isinstance(seen.get("text"), str):
            return ask_human(f"get_document {doc_id} failed: {seen.meaning}")
        self.texts[doc_id] = str(seen.get("text"))
        figures = self._figures(turn, doc_id, [metric])
        if figures is not None:
            return figures[metric]
        tries = [s for s in turn.facts.all("record_figures") if s.arguments.get("doc_id") == doc_id]
        readings = [dict(s.arguments.get("figures") or {}) for s in tries]
        move = await self._extract(turn, doc_id, [metric], len(tries)) if len(tries) < 3 else None
        if move is None or move["arguments"]["figures"] in readings:
            return ask_human(f"the {metric} of {doc_id} could not be read reliably: {readings}")
        return move

    def _companies(self, docs: list[dict[str, Any]], prompt: str) -> list[str]:
        hits = []
        for company in dict.fromkeys(d["company"] for d in docs):
            row = next(d for d in docs if d["company"] == company)
            for alias in (company, row.get("company_en"), row.get("ticker")):
                at = prompt.find(str(alias)) if alias else -1
                if at >= 0:
                    hits.append((at, company))
                    break
        return [c for _, c in sorted(hits)]

    def _quarter_span(self, docs: list[dict[str, Any]], prompt: str) -> list[str]:
        named = [q for _, q in sorted(_quarters(prompt))]
        if len(named) >= 2 and re.search(r"从|到|from|to", prompt):
            every = sorted({str(pick(d, "quarter")) for d in docs})
            return [q for q in every if named[0] <= q <= named[-1]]
        return named[:1]

    def _answer(
        self,
        kind: str,
        values: dict[tuple[str, str], float],
        companies: list[str],
        quarters: list[str],
    ) -> Move:
        zh = self.ctx.lang == "zh"
        if kind == "figure":
            value = next(iter(values.values()))
            return final(f"{value}", value=value)
        if kind == "compare":
            by = {c: values[(c, quarters[0])] for c in companies[:2]}
            top = max(by, key=lambda c: by[c])
            return final(
                f"{top}更高：{by}" if zh else f"{top} is higher: {by}", company=top, values=by
            )
        if kind == "multi":
            totals = {c: round(sum(values[(c, q)] for q in quarters), 1) for c in companies}
            top = max(totals, key=lambda c: totals[c])
            return final(
                self.say(f"{top}最高：{totals}", f"{top} leads: {totals}"),
                leader=top,
                totals=totals,
            )
        revenues = {q: values[(companies[0], q)] for q in quarters}
        best = max(revenues, key=lambda q: revenues[q])
        first, last = revenues[quarters[0]], revenues[quarters[-1]]
        change = (last / first - 1) * 100 if first else 0.0
        outline = [
            self.say(
                f"营收概览：{quarters[0]}至{quarters[-1]}",
                f"Revenue overview: {quarters[0]} to {quarters[-1]}",
            ),
            self.say(
                f"最高季度：{best}（{revenues[best]}百万元）",
                f"Best quarter: {best} ({revenues[best]} RMB million)",
            ),
            self.say(f"趋势：区间变化{change:+.1f}%", f"Trend: {change:+.1f}% over the period"),
        ]
        text = "\n".join([f"{q}: {v}" for q, v in revenues.items()] + outline)
        return final(text, revenues=revenues, best_quarter=best, outline=outline)

    def format_answer(self, text: str, fields: Mapping[str, Any]) -> str:
        """The non-core formatting: the plain report as markdown (skipped under reduction)."""
        answer = fields.get("answer")
        if not isinstance(answer, Mapping) or answer.get("status") != "answered":
            return text
        lines = [f"# {self.ctx.prompt}", ""]
        for name, value in answer.items():
            if name == "status":
                continue
            if isinstance(value, list):
                lines += [f"## {name}", *(f"{i}. {v}" for i, v in enumerate(value, 1)), ""]
            elif isinstance(value, Mapping):
                rows = [f"| {k} | {v} |" for k, v in value.items()]
                lines += [f"## {name}", "| | |", "|---|---|", *rows, ""]
            else:
                lines += [f"**{name}**: {value}", ""]
        return "\n".join(lines).rstrip() + "\n"


def build_report_agent(
    model: Model | str | None,
    *,
    base_url: str,
    control: ControlConfig | None = None,
    store: StateStore | None = None,
    **options: Any,
) -> ReferenceAgent:
    """The report agent on the world at ``base_url``; ``model`` reads the figures."""
    return ReferenceAgent(
        ReportRules, model, base_url=base_url, domain="report", control=control, store=store,
        **options,
    )  # fmt: skip


run_report = task_runner(build_report_agent, "report")
