"""Generate the world's data from a seed, deterministically.

Each domain draws from its own ``random.Random`` keyed by (seed, domain, item), so adding
a city does not reshuffle the flights. String seeds are hashed with SHA-512 by
``random``, which is stable across runs and platforms.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Literal

from ._data import (
    City,
    Company,
    Document,
    Figures,
    Flight,
    HistoricalOrder,
    OrderLine,
    Product,
    Room,
    RoomClosure,
    RoomReservation,
    Tracking,
    WeatherDay,
    WorldData,
)
from ._ocr import add_ocr_noise

__all__ = ["OPEN_HOURS", "TODAY", "generate_world"]

OrderStatus = Literal["created", "paid", "shipped", "delivered", "cancelled"]
Noise = Literal["clean", "light", "heavy"]

# The world's calendar is fixed: tasks say "tomorrow", so "today" must not be the host's.
TODAY = dt.date(2025, 6, 2)  # a Monday
_WEATHER_DAYS = (-3, 13)
_SCHEDULE_DAYS = (0, 13)

# (name, English, code, abbreviation, typos, June mean temperature °C)
_CITIES: tuple[tuple[str, str, str, str | None, tuple[str, ...], float], ...] = (
    ("北京", "Beijing", "BJS", "京", ("北就", "背景", "Bejing"), 26.0),
    ("上海", "Shanghai", "SHA", "沪", ("上嗨", "尚海", "Shangai"), 25.0),
    ("广州", "Guangzhou", "CAN", "穗", ("广洲", "Guangzou"), 29.0),
    ("深圳", "Shenzhen", "SZX", "深", ("深川", "Shenzen"), 29.0),
    ("杭州", "Hangzhou", "HGH", "杭", ("杭洲", "Hangzou"), 26.0),
    ("成都", "Chengdu", "CTU", "蓉", ("成督", "Chendu"), 24.0),
    ("南京", "Nanjing", "NKG", "宁", ("南径", "Nanjin"), 26.0),
    ("武汉", "Wuhan", "WUH", "汉", ("武汗", "Wuhun"), 28.0),
    ("西安", "Xi'an", "SIA", None, ("西按",), 27.0),
    ("重庆", "Chongqing", "CKG", "渝", ("重亲", "Chongqin"), 28.0),
    ("天津", "Tianjin", "TSN", "津", ("天律", "Tianjing"), 26.0),
    ("厦门", "Xiamen", "XMN", "鹭", ("厦们", "Xiamin"), 27.0),
)
# Real places the services do not cover: the right answer is "unknown city".
_UNKNOWN = ("拉萨", "哈尔滨", "昆明", "Lhasa", "Harbin", "Atlantis", "火星城")

# condition, Chinese, weight, precipitation range (mm)
_CONDITIONS: tuple[tuple[str, str, float, tuple[float, float]], ...] = (
    ("sunny", "晴", 0.30, (0.0, 0.0)),
    ("cloudy", "多云", 0.28, (0.0, 0.0)),
    ("overcast", "阴", 0.14, (0.0, 0.4)),
    ("light_rain", "小雨", 0.14, (0.5, 8.0)),
    ("rain", "中雨", 0.08, (8.0, 25.0)),
    ("thunderstorm", "雷阵雨", 0.06, (5.0, 40.0)),
)

# (city code A, city code B, base fare CNY, flight minutes)
_ROUTES: tuple[tuple[str, str, int, int], ...] = (
    ("BJS", "SHA", 1150, 135),
    ("BJS", "CAN", 1500, 195),
    ("BJS", "SZX", 1550, 200),
    ("BJS", "CTU", 1300, 170),
    ("BJS", "HGH", 1000, 130),
    ("BJS", "SIA", 850, 120),
    ("SHA", "CAN", 1000, 150),
    ("SHA", "SZX", 1050, 155),
    ("SHA", "CTU", 1350, 190),
    ("SHA", "CKG", 1250, 175),
    ("CAN", "CTU", 1050, 145),
)
_AIRLINES = (("CA", "中国国航"), ("MU", "东方航空"), ("CZ", "南方航空"), ("HU", "海南航空"))
_DEPARTURES = ("07:05", "08:30", "10:15", "12:40", "14:20", "16:55", "19:10", "21:35")

# (id, Chinese name, English name, floor, capacity, equipment)
_ROOMS: tuple[tuple[str, str, str, int, int, tuple[str, ...]], ...] = (
    ("room-1", "一号会议室", "Room 1", 3, 4, ("whiteboard",)),
    ("room-2", "二号会议室", "Room 2", 3, 6, ("tv", "whiteboard")),
    ("room-3", "三号会议室", "Room 3", 3, 8, ("projector", "whiteboard")),
    ("room-4", "四号会议室", "Room 4", 4, 10, ("projector", "video")),
    ("room-5", "五号会议室", "Room 5", 4, 12, ("projector", "video", "whiteboard")),
    ("room-6", "六号会议室", "Room 6", 5, 16, ("projector", "video")),
    ("room-7", "七号会议室", "Room 7", 5, 20, ("projector", "video", "microphone")),
    ("room-8", "报告厅", "Auditorium", 1, 60, ("projector", "microphone", "video")),
)
OPEN_HOURS = (9, 18)  # rooms are bookable in whole hours, weekdays only

_PRODUCTS: tuple[tuple[str, str, str, int], ...] = (
    ("SKU-1001", "A4 复印纸（箱）", "A4 paper (box)", 129),
    ("SKU-1002", "白板笔套装", "Whiteboard marker set", 35),
    ("SKU-1003", "投影仪灯泡", "Projector bulb", 680),
    ("SKU-1004", "会议麦克风", "Conference microphone", 899),
    ("SKU-1005", "无线翻页笔", "Wireless presenter", 159),
    ("SKU-1006", "HDMI 线缆 3 米", "HDMI cable 3 m", 49),
    ("SKU-1007", "桌面插线板", "Desktop power strip", 89),
    ("SKU-1008", "笔记本支架", "Laptop stand", 199),
    ("SKU-1009", "降噪耳机", "Noise-cancelling headset", 1299),
    ("SKU-1010", "会议摄像头", "Conference camera", 2399),
)
_CUSTOMERS = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨帆", "Alice Chen", "Bob Li")
_CARRIERS = (("顺丰速运", "SF"), ("中通快递", "ZTO"), ("京东物流", "JD"))

# (id, Chinese name, English name, ticker, 2022Q1 revenue, yearly growth, net margin,
#  gross margin, language of its reports)
_COMPANIES: tuple[tuple[str, str, str, str, float, float, float, float, str], ...] = (
    ("hct", "华辰科技", "Huachen Technology", "HCT", 1180.0, 0.14, 0.11, 38.0, "zh"),
    ("yhl", "远航物流", "Yuanhang Logistics", "YHL", 2450.0, 0.06, 0.05, 17.0, "zh"),
    ("xhr", "星河零售", "Xinghe Retail", "XHR", 3320.0, -0.03, 0.03, 24.0, "en"),
    ("bce", "北辰能源", "Beichen Energy", "BCE", 860.0, 0.22, 0.09, 29.0, "zh"),
)
_QUARTERS = tuple(f"{y}Q{q}" for y in (2023, 2024) for q in (1, 2, 3, 4))
_SEASON = (0.93, 1.0, 1.02, 1.08)

_REMARKS_ZH = (
    "本季度主营业务保持稳定，新客户拓展进度符合预期。",
    "受原材料价格波动影响，部分产品线毛利承压。",
    "公司持续投入研发，研发费用同比有所增加。",
    "海外市场收入占比继续提升。",
    "管理层预计下一季度需求将温和回升。",
)
_REMARKS_EN = (
    "Core business remained stable and new customer wins were in line with plan.",
    "Input cost volatility weighed on margins in some product lines.",
    "Investment in research and development continued to rise.",
    "The share of revenue from overseas markets increased again.",
    "Management expects a moderate recovery in demand next quarter.",
)


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def _days(offsets: tuple[int, int]) -> list[dt.date]:
    return [TODAY + dt.timedelta(days=d) for d in range(offsets[0], offsets[1] + 1)]


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"


def _weather(seed: int) -> list[WeatherDay]:
    out: list[WeatherDay] = []
    weights = [w for _, _, w, _ in _CONDITIONS]
    for name, _, code, _, _, mean in _CITIES:
        rng = _rng(seed, "weather", code)
        drift = 0.0
        for day in _days(_WEATHER_DAYS):
            drift = 0.6 * drift + rng.gauss(0.0, 1.6)
            cond, cond_zh, _, (p_lo, p_hi) = rng.choices(_CONDITIONS, weights)[0]
            rainy = p_hi > 0.5
            temp = mean + drift - (2.0 if rainy else 0.0)
            spread = rng.uniform(3.0, 5.0) if rainy else rng.uniform(5.0, 9.0)
            out.append(
                WeatherDay(
                    city=name,
                    date=day,
                    temperature_c=round(temp, 1),
                    temp_min_c=round(temp - spread / 2, 1),
                    temp_max_c=round(temp + spread / 2, 1),
                    condition=cond,
                    condition_zh=cond_zh,
                    humidity_pct=rng.randint(70, 95) if rainy else rng.randint(35, 75),
                    wind_kph=rng.randint(3, 30),
                    precipitation_mm=round(rng.uniform(p_lo, p_hi), 1),
                )
            )
    return out


def _flights(seed: int) -> list[Flight]:
    out: list[Flight] = []
    used: set[str] = set()
    for a, b, fare, minutes in _ROUTES:
        for origin, dest in ((a, b), (b, a)):
            rng = _rng(seed, "schedule", origin, dest)
            times = sorted(rng.sample(_DEPARTURES, 3))
            schedule = []
            for t in times:
                prefix, airline = rng.choice(_AIRLINES)
                number = f"{prefix}{rng.randint(1100, 9899)}"
                while number in used:  # a flight number names one flight only
                    number = f"{prefix}{rng.randint(1100, 9899)}"
                used.add(number)
                # Dawn and late flights are cheaper, as in real fare tables.
                hour = int(t[:2])
                time_factor = 0.85 if hour < 8 or hour >= 21 else 1.0
                schedule.append((t, number, airline, rng.uniform(0.9, 1.15) * time_factor))
            for day in _days(_SCHEDULE_DAYS):
                day_rng = _rng(seed, "fares", origin, dest, day.isoformat())
                day_factor = (1.15 if day.weekday() >= 4 else 1.0) * day_rng.uniform(0.8, 1.2)
                for t, number, airline, factor in schedule:
                    if day_rng.random() < 0.08:
                        continue  # not operated that day
                    dep = int(t[:2]) * 60 + int(t[3:])
                    dur = minutes + day_rng.randint(-10, 15)
                    out.append(
                        Flight(
                            flight_id=f"{number}-{day:%Y%m%d}",
                            flight_no=number,
                            airline=airline,
                            origin=origin,
                            destination=dest,
                            date=day,
                            depart_time=t,
                            arrive_time=_hhmm(dep + dur),
                            duration_min=dur,
                            price_cny=round(fare * factor * day_factor / 10.0) * 10,
                            seats=0 if day_rng.random() < 0.07 else day_rng.randint(1, 40),
                        )
                    )
    return out


def _rooms(seed: int) -> tuple[list[RoomReservation], list[RoomClosure]]:
    reservations: list[RoomReservation] = []
    closures: list[RoomClosure] = []
    titles = ("周会", "项目评审", "客户沟通", "面试", "培训", "1:1")
    for room_id, *_ in _ROOMS:
        rng = _rng(seed, "rooms", room_id)
        busy = rng.uniform(0.2, 0.6)
        for day in _days(_SCHEDULE_DAYS):
            if day.weekday() >= 5:
                continue  # closed at weekends: no slots at all
            if rng.random() < 0.06:
                closures.append(RoomClosure(room_id=room_id, date=day, reason="maintenance"))
                continue
            # Now and then a room is booked solid: an empty free-slot list that is real.
            full = rng.random() < 0.08
            for hour in range(*OPEN_HOURS):
                if full or rng.random() < busy:
                    reservations.append(
                        RoomReservation(
                            room_id=room_id,
                            date=day,
                            start=f"{hour:02d}:00",
                            end=f"{hour + 1:02d}:00",
                            title=rng.choice(titles),
                        )
                    )
    return reservations, closures


def _shop(seed: int) -> tuple[list[Product], list[HistoricalOrder]]:
    rng = _rng(seed, "shop")
    products = [
        Product(sku=s, name=n, name_en=e, price_cny=p, stock=rng.choice((0, 3, 12, 40, 120)))
        for s, n, e, p in _PRODUCTS
    ]
    orders: list[HistoricalOrder] = []
    statuses: tuple[OrderStatus, ...] = (
        "created",
        "paid",
        "shipped",
        "shipped",
        "delivered",
        "delivered",
        "cancelled",
    )
    for i in range(24):
        created = TODAY - dt.timedelta(days=rng.randint(1, 30))
        picked = rng.sample(products, rng.randint(1, 3))
        lines = tuple(
            OrderLine(sku=p.sku, quantity=rng.randint(1, 4), unit_price_cny=p.price_cny)
            for p in picked
        )
        status = rng.choice(statuses)
        tracking = None
        if status in ("shipped", "delivered"):
            carrier, prefix = rng.choice(_CARRIERS)
            eta = None if status == "delivered" else TODAY + dt.timedelta(days=rng.randint(0, 4))
            tracking = Tracking(
                carrier=carrier, tracking_no=f"{prefix}{rng.randint(10**9, 10**10 - 1)}", eta=eta
            )
        orders.append(
            HistoricalOrder(
                order_id=f"ORD-{70001 + i * 7}",
                customer=rng.choice(_CUSTOMERS),
                created=created,
                lines=lines,
                total_cny=sum(line.quantity * line.unit_price_cny for line in lines),
                status=status,
                tracking=tracking,
            )
        )
    return products, orders


def _report_text(company: Company, quarter: str, figs: Figures, lang: str, remark: str) -> str:
    year, q = quarter[:4], quarter[-1]
    trend = figs.revenue_yoy_pct
    if lang == "en":
        return (
            f"{company.name_en} ({company.ticker}) Q{q} {year} results summary\n"
            "Amounts in RMB million\n"
            f"Revenue: {figs.revenue_mcny:,.1f} (YoY {trend:+.1f}%)\n"
            f"Net profit: {figs.net_profit_mcny:,.1f}\n"
            f"Gross margin: {figs.gross_margin_pct:.1f}%\n"
            f"Operating cash flow: {figs.operating_cash_flow_mcny:,.1f}\n"
            f"Commentary: {remark}\n"
        )
    direction = "增长" if trend >= 0 else "下降"
    return (
        f"{company.name}（{company.ticker}）{year}年第{q}季度财务摘要\n"
        "单位：人民币百万元\n"
        f"营业收入：{figs.revenue_mcny:,.1f}，同比{direction}{abs(trend):.1f}%\n"
        f"净利润：{figs.net_profit_mcny:,.1f}\n"
        f"毛利率：{figs.gross_margin_pct:.1f}%\n"
        f"经营活动现金流量净额：{figs.operating_cash_flow_mcny:,.1f}\n"
        f"管理层讨论：{remark}\n"
    )


def _documents(seed: int) -> tuple[list[Company], list[Document]]:
    companies: list[Company] = []
    documents: list[Document] = []
    for cid, name, name_en, ticker, base, growth, margin, gm, lang in _COMPANIES:
        company = Company(company_id=cid, name=name, name_en=name_en, ticker=ticker)
        companies.append(company)
        rng = _rng(seed, "figures", cid)
        # Revenue for 2022..2024 by quarter; 2022 only feeds the 2023 year-on-year figures.
        revenue: list[float] = []
        for i in range(12):
            trend = base * (1.0 + growth) ** (i / 4.0) * _SEASON[i % 4]
            revenue.append(round(trend * rng.uniform(0.95, 1.05), 1))
        for k, quarter in enumerate(_QUARTERS):
            rev = revenue[k + 4]
            figs = Figures(
                revenue_mcny=rev,
                net_profit_mcny=round(rev * margin * rng.uniform(0.7, 1.3), 1),
                gross_margin_pct=round(gm + rng.uniform(-2.5, 2.5), 1),
                operating_cash_flow_mcny=round(rev * margin * rng.uniform(0.6, 1.6), 1),
                revenue_yoy_pct=round((rev / revenue[k] - 1.0) * 100.0, 1),
            )
            remarks = _REMARKS_EN if lang == "en" else _REMARKS_ZH
            clean = _report_text(company, quarter, figs, lang, rng.choice(remarks))
            doc_rng = _rng(seed, "ocr", cid, quarter)
            noise: Noise = doc_rng.choice(("clean", "light", "light", "heavy"))
            title, _, body = clean.partition("\n")
            noisy_body, corruptions = add_ocr_noise(body, noise, doc_rng)
            documents.append(
                Document(
                    doc_id=f"doc-{cid}-{quarter.lower()}",
                    company_id=cid,
                    quarter=quarter,
                    title=title,
                    language="en" if lang == "en" else "zh",
                    noise=noise,
                    corruptions=corruptions,
                    text=f"{title}\n{noisy_body}",
                    clean_text=clean,
                    truth=figs,
                )
            )
    return companies, documents


def generate_world(seed: int) -> WorldData:
    """All the world's data for ``seed``; the same seed always gives the same data."""
    reservations, closures = _rooms(seed)
    products, orders = _shop(seed)
    companies, documents = _documents(seed)
    w_days, s_days = _days(_WEATHER_DAYS), _days(_SCHEDULE_DAYS)
    return WorldData(
        seed=seed,
        today=TODAY,
        weather_from=w_days[0],
        weather_to=w_days[-1],
        schedule_from=s_days[0],
        schedule_to=s_days[-1],
        cities=tuple(
            City(name=n, name_en=e, code=c, abbreviation=a, typos=t) for n, e, c, a, t, _ in _CITIES
        ),
        unknown_cities=_UNKNOWN,
        weather=tuple(_weather(seed)),
        flights=tuple(_flights(seed)),
        rooms=tuple(
            Room(room_id=r, name=n, name_en=e, floor=f, capacity=c, equipment=q)
            for r, n, e, f, c, q in _ROOMS
        ),
        reservations=tuple(reservations),
        closures=tuple(closures),
        products=tuple(products),
        orders=tuple(orders),
        companies=tuple(companies),
        documents=tuple(documents),
    )
