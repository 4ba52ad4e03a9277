"""Report tasks: fetch OCR'd quarterly reports, extract the figures,
compare them and outline; a company or quarter the archive lacks has no answer.
"""

from __future__ import annotations

from typing import Any

from ._taskgen import Ctx, Lang, impossible_answer, join, make_task
from ._tasks import ReferenceTask, TrajectoryCall
from ._truth import METRICS

__all__ = ["REPORT_QUOTAS"]

_UNKNOWN_COMPANIES = ("腾讯控股", "阿里巴巴", "字节跳动", "Acme Corp", "Globex", "星辰重工")


def _company_phrase(ctx: Ctx, company_id: str, lang: Lang) -> str:
    c = ctx.truth.companies[company_id]
    if lang == "en":
        return ctx.rng.choice((c.name_en, c.name_en, c.ticker))
    return ctx.rng.choice((c.name, c.name, c.ticker))


def _quarter_phrase(quarter: str, lang: Lang, rng: Any) -> str:
    year, q = quarter[:4], int(quarter[-1])
    if rng.random() < 0.3:
        return quarter
    if lang == "zh":
        return f"{year}年第{'一二三四'[q - 1]}季度"
    return f"Q{q} {year}"


def _search(company_id: str | None, quarter: str | None, ctx: Ctx) -> TrajectoryCall:
    args: dict[str, Any] = {}
    if company_id is not None:
        args["company"] = ctx.truth.companies[company_id].name
    if quarter is not None:
        args["quarter"] = quarter
    return TrajectoryCall(tool="search_documents", arguments=args)


def _get(company_id: str, quarter: str, ctx: Ctx) -> TrajectoryCall:
    doc = ctx.truth.document(company_id, quarter)
    assert doc is not None
    return TrajectoryCall(tool="get_document", arguments={"doc_id": doc.doc_id})


def _listed(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def _figure(ctx: Ctx, company_id: str, quarter: str, metric: str) -> float:
    doc = ctx.truth.document(company_id, quarter)
    assert doc is not None
    return float(getattr(doc.truth, metric))


def report_figure(ctx: Ctx) -> ReferenceTask:
    rng = ctx.rng
    cid = rng.choice(sorted(ctx.truth.companies))
    quarter = rng.choice(ctx.truth.quarters)
    metric = rng.choice(sorted(METRICS))
    lang = ctx.lang()
    value = _figure(ctx, cid, quarter, metric)
    name_zh, name_en = METRICS[metric]
    who, when = _company_phrase(ctx, cid, lang), _quarter_phrase(quarter, lang, rng)
    unit = "%" if metric.endswith("_pct") else ("百万元" if lang == "zh" else " RMB million")
    prompt = (
        f"{who}{when}的{name_zh}是多少？"
        if lang == "zh"
        else f"What was {who}'s {name_en} in {when}?"
    )
    return make_task(
        ctx,
        domain="report",
        template="report_figure",
        lang=lang,
        prompt=prompt,
        fields={
            "value": {
                "type": "number",
                "description": "the figure as a number, in the report's unit",
            }
        },
        truth={"value": value, "metric": metric, "company_id": cid, "quarter": quarter},
        checker="report_figure",
        trajectory=[_search(cid, quarter, ctx), _get(cid, quarter, ctx)],
        answer_text=f"{name_zh if lang == 'zh' else name_en}: {value}{unit}",
        answer_fields={"value": value},
    )


def report_compare(ctx: Ctx) -> ReferenceTask | None:
    rng = ctx.rng
    a, b = rng.sample(sorted(ctx.truth.companies), 2)
    quarter = rng.choice(ctx.truth.quarters)
    metric = rng.choice(("revenue_mcny", "revenue_yoy_pct", "net_profit_mcny", "gross_margin_pct"))
    va, vb = _figure(ctx, a, quarter, metric), _figure(ctx, b, quarter, metric)
    if abs(va - vb) < 0.1:
        return None
    lang = ctx.lang()
    name_zh, name_en = METRICS[metric]
    pa, pb = _company_phrase(ctx, a, lang), _company_phrase(ctx, b, lang)
    when = _quarter_phrase(quarter, lang, rng)
    winner = ctx.truth.companies[a if va > vb else b]
    prompt = (
        f"{when}，{pa}和{pb}谁的{name_zh}更高？给出两家的数字。"
        if lang == "zh"
        else f"In {when}, whose {name_en} was higher, {pa}'s or {pb}'s? Give both figures."
    )
    values = {ctx.truth.companies[a].name: va, ctx.truth.companies[b].name: vb}
    return make_task(
        ctx,
        domain="report",
        template="report_compare",
        lang=lang,
        prompt=prompt,
        fields={
            "company": {"type": "string", "description": "the company with the higher figure"},
            "values": {
                "type": "object",
                "additionalProperties": {"type": "number"},
                "description": "each company's figure, by company name",
            },
        },
        truth={"company_id": winner.company_id, "values": {a: va, b: vb}, "metric": metric},
        checker="report_compare",
        trajectory=[_search(None, quarter, ctx), _get(a, quarter, ctx), _get(b, quarter, ctx)],
        answer_text=f"{winner.name}更高（{_listed(values)}）"
        if lang == "zh"
        else f"{winner.name_en} is higher ({_listed(values)})",
        answer_fields={"company": winner.name, "values": values},
    )


def report_trend(ctx: Ctx) -> ReferenceTask | None:
    rng, quarters = ctx.rng, ctx.truth.quarters
    cid = rng.choice(sorted(ctx.truth.companies))
    n = rng.randint(2, len(quarters))
    start = rng.randrange(len(quarters) - n + 1)
    span = quarters[start : start + n]
    values = {q: _figure(ctx, cid, q, "revenue_mcny") for q in span}
    ranked = sorted(values.values(), reverse=True)
    if ranked[0] - ranked[1] < 0.1:
        return None
    best = max(values, key=lambda q: values[q])
    lang = ctx.lang()
    who = _company_phrase(ctx, cid, lang)
    if lang == "zh":
        prompt = (
            f"整理{who}从{span[0]}到{span[-1]}每个季度的营业收入，指出最高的季度，"
            "并给出一份至少三条的报告大纲。"
        )
        outline = ["营收概览", f"最高季度：{best}", "趋势与展望"]
    else:
        prompt = (
            f"Collect {who}'s revenue for every quarter from {span[0]} to {span[-1]}, name the "
            "best quarter, and outline a report in at least three points."
        )
        outline = ["Revenue overview", f"Best quarter: {best}", "Trend and outlook"]
    return make_task(
        ctx,
        domain="report",
        template="report_trend",
        lang=lang,
        prompt=prompt,
        fields={
            "revenues": {
                "type": "object",
                "additionalProperties": {"type": "number"},
                "description": 'revenue (RMB million) by quarter, e.g. {"2024Q1": 1234.5}',
            },
            "best_quarter": {
                "type": "string",
                "description": "the quarter with the highest revenue",
            },
            "outline": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 3,
                "description": "the report outline, one point per item",
            },
        },
        truth={"revenues": values, "best_quarter": best, "company_id": cid},
        checker="report_trend",
        trajectory=[_search(cid, None, ctx), *(_get(cid, q, ctx) for q in span)],
        answer_text=f"{best}: {values[best]}",
        answer_fields={"revenues": values, "best_quarter": best, "outline": outline},
    )


def report_multi(ctx: Ctx) -> ReferenceTask | None:
    rng, quarters = ctx.rng, ctx.truth.quarters
    m, n = rng.choice(((2, 2), (2, 3), (2, 4), (3, 2)))
    cids = rng.sample(sorted(ctx.truth.companies), m)
    start = rng.randrange(len(quarters) - n + 1)
    span = quarters[start : start + n]
    totals = {c: round(sum(_figure(ctx, c, q, "revenue_mcny") for q in span), 1) for c in cids}
    ranked = sorted(totals.values(), reverse=True)
    if ranked[0] - ranked[1] < 1.0:
        return None
    leader = ctx.truth.companies[max(totals, key=lambda c: totals[c])]
    lang = ctx.lang()
    whos = [_company_phrase(ctx, c, lang) for c in cids]
    prompt = (
        f"比较{join(whos, lang)}在{span[0]}到{span[-1]}期间的累计营业收入，哪家最高？给出各家的合计。"
        if lang == "zh"
        else f"Compare the total revenue of {join(whos, lang)} from {span[0]} to {span[-1]}: "
        "which is highest? Give each total."
    )
    calls = [_search(c, None, ctx) for c in cids]
    calls += [_get(c, q, ctx) for c in cids for q in span]
    named = {ctx.truth.companies[c].name: t for c, t in totals.items()}
    return make_task(
        ctx,
        domain="report",
        template="report_multi",
        lang=lang,
        prompt=prompt,
        fields={
            "leader": {"type": "string", "description": "the company with the highest total"},
            "totals": {
                "type": "object",
                "additionalProperties": {"type": "number"},
                "description": "each company's total revenue (RMB million), by company name",
            },
        },
        truth={"company_id": leader.company_id, "totals": totals, "quarters": list(span)},
        checker="report_multi",
        trajectory=calls,
        answer_text=f"{leader.name}: {_listed(named)}",
        answer_fields={"leader": leader.name, "totals": named},
    )


def report_impossible(ctx: Ctx) -> ReferenceTask:
    rng = ctx.rng
    lang = ctx.lang()
    metric = rng.choice(sorted(METRICS))
    name_zh, name_en = METRICS[metric]
    if rng.random() < 0.5:
        company = rng.choice(_UNKNOWN_COMPANIES)
        quarter = rng.choice(ctx.truth.quarters)
        why, zh, en = (
            "unknown_company",
            f"没有{company}的报告",
            f"there are no reports of {company}",
        )
        who = company
        call = TrajectoryCall(
            tool="search_documents", arguments={"company": company, "quarter": quarter}
        )
    else:
        cid = rng.choice(sorted(ctx.truth.companies))
        quarter = rng.choice(("2022Q3", "2022Q4", "2025Q1", "2025Q2", "2021Q4"))
        why, zh, en = "unknown_quarter", f"没有{quarter}的报告", f"there is no report for {quarter}"
        who = _company_phrase(ctx, cid, lang)
        call = _search(cid, quarter, ctx)
    when = _quarter_phrase(quarter, lang, rng)
    prompt = (
        f"{who}{when}的{name_zh}是多少？"
        if lang == "zh"
        else f"What was {who}'s {name_en} in {when}?"
    )
    text, fields = impossible_answer(lang, zh, en)
    return make_task(
        ctx,
        domain="report",
        template="report_impossible",
        lang=lang,
        prompt=prompt,
        fields={
            "value": {
                "type": "number",
                "description": "the figure as a number, in the report's unit",
            }
        },
        truth={"why": why},
        checker="impossible",
        trajectory=[call],
        answer_text=text,
        answer_fields=fields,
        impossible=True,
        tags=[why],
    )


REPORT_QUOTAS = (
    (report_figure, 22),
    (report_compare, 14),
    (report_trend, 20),
    (report_multi, 12),
    (report_impossible, 12),
)
"""(template, tasks per split)."""
