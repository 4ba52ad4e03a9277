"""The function catalog the stateless families draw from: twelve domains, three functions each.

Each function carries its OpenAI-style schema, value pools for its arguments and a few
ways a user asks for it (templates over the argument names). An optional argument a
template does not mention may take any value: the user did not say.
"""

from __future__ import annotations

from ._fn import Fn, Param
from ._fn import enum_param as _e
from ._fn import int_param as _i
from ._fn import number_param as _n
from ._fn import string_param as _s

__all__ = ["CATALOG", "DOMAINS", "Fn", "Param"]

_CITIES = ("Oslo", "Lisbon", "Nairobi", "Osaka", "Denver", "Lima", "Hanoi", "Krakow", "Perth")
_DATES = ("2026-03-14", "2026-04-02", "2026-05-21", "2026-06-09", "2026-07-30", "2026-09-11")
_TIMES = ("08:30", "09:00", "11:15", "13:45", "16:00", "18:30")
_ROOMS = ("living_room", "bedroom", "kitchen", "office")
_ROOM_SAY = {"living_room": "living room"}
_PEOPLE = ("Amara Okafor", "Lars Berg", "Mei Tanaka", "Diego Ruiz", "Priya Nair", "Tom Walsh")
_EMAILS = ("ana@example.com", "raj@example.org", "kim@example.net", "ola@example.com")

CATALOG: tuple[Fn, ...] = (
    Fn(
        "weather",
        "get_current_weather",
        "The current weather in a city.",
        (
            _s("city", "City name", *_CITIES),
            _e("unit", "Temperature unit", "celsius", "fahrenheit"),
        ),
        (
            "What is the weather in {city} right now? Give the temperature in {unit}.",
            "Current conditions in {city}, in {unit} please.",
        ),
    ),
    Fn(
        "weather",
        "get_forecast",
        "A daily forecast for the next days.",
        (_s("city", "City name", *_CITIES), _i("days", "Number of days, 1 to 10", 2, 3, 5, 7)),
        (
            "Give me the {days}-day forecast for {city}.",
            "What will the weather be like in {city} over the next {days} days?",
        ),
    ),
    Fn(
        "weather",
        "get_air_quality",
        "The air quality index of a city today.",
        (_s("city", "City name", *_CITIES),),
        ("How clean is the air in {city} today?", "Air quality index for {city}, please."),
    ),
    Fn(
        "travel",
        "search_flights",
        "Search flights between two cities on a date.",
        (
            _s("origin", "Departure city", *_CITIES[:5]),
            _s("destination", "Arrival city", *_CITIES[5:]),
            _s("date", "Date, YYYY-MM-DD", *_DATES),
            _e("cabin", "Cabin class", "economy", "premium", "business", required=False),
        ),
        (
            "Find {cabin} flights from {origin} to {destination} on {date}.",
            "I need to fly {origin} to {destination} on {date}; show me the options.",
        ),
    ),
    Fn(
        "travel",
        "book_hotel",
        "Book a hotel room.",
        (
            _s("city", "City", *_CITIES),
            _s("check_in", "Check-in date, YYYY-MM-DD", *_DATES),
            _i("nights", "Number of nights", 1, 2, 3, 4, 6),
            _i("guests", "Guests", 1, 2, 3, 4),
        ),
        (
            "Book a hotel in {city} from {check_in} for {nights} nights, {guests} guests.",
            "Reserve a room in {city}: check in {check_in}, {nights} nights, {guests} people.",
        ),
    ),
    Fn(
        "travel",
        "get_visa_requirements",
        "Visa rules for a nationality and a destination.",
        (
            _s("nationality", "Traveller's nationality", "German", "Brazilian", "Indian", "Kenyan"),
            _s("destination", "Destination country", "Japan", "Canada", "Peru", "Vietnam"),
        ),
        (
            "Do {nationality} citizens need a visa to visit {destination}?",
            "Visa requirements for a {nationality} passport holder going to {destination}?",
        ),
    ),
    Fn(
        "banking",
        "get_account_balance",
        "The balance of one of the user's accounts.",
        (_e("account", "Which account", "checking", "savings", "credit"),),
        ("What's the balance on my {account} account?", "How much is in {account}?"),
    ),
    Fn(
        "banking",
        "send_payment",
        "Send money to a person.",
        (
            _s("recipient", "Who receives it", *_PEOPLE),
            _n("amount", "Amount", 12.5, 40.0, 75.25, 120.0, 310.8),
            _e("currency", "Currency code", "USD", "EUR", "GBP", "JPY"),
        ),
        ("Send {amount} {currency} to {recipient}.", "Pay {recipient} {amount} in {currency}."),
    ),
    Fn(
        "banking",
        "get_exchange_rate",
        "The exchange rate between two currencies.",
        (
            _e("base", "From currency", "USD", "EUR", "GBP"),
            _e("target", "To currency", "JPY", "CHF", "INR"),
        ),
        (
            "What is the exchange rate from {base} to {target}?",
            "How many {target} do I get for one {base}?",
        ),
    ),
    Fn(
        "calendar",
        "schedule_meeting",
        "Put a meeting in the user's calendar.",
        (
            _s("title", "Meeting title", "Budget review", "Team sync", "Design critique"),
            _s("date", "Date, YYYY-MM-DD", *_DATES),
            _s("time", "Start, HH:MM (24 h)", *_TIMES),
            _i("duration_minutes", "Length in minutes", 15, 30, 45, 60, 90),
        ),
        (
            'Schedule "{title}" on {date} at {time} for {duration_minutes} minutes.',
            'Put a {duration_minutes}-minute meeting called "{title}" in my calendar, {date} {time}.',
        ),
    ),
    Fn(
        "calendar",
        "find_free_slot",
        "Find a free slot of a given length on a date.",
        (
            _s("date", "Date, YYYY-MM-DD", *_DATES),
            _i("duration_minutes", "Length in minutes", 20, 30, 60, 120),
        ),
        (
            "Find me a free {duration_minutes}-minute slot on {date}.",
            "When am I free for {duration_minutes} minutes on {date}?",
        ),
    ),
    Fn(
        "calendar",
        "set_reminder",
        "Set a reminder at a time today.",
        (
            _s("message", "What to remind", "call the plumber", "water the plants", "book a cab"),
            _s("time", "When, HH:MM (24 h)", *_TIMES),
        ),
        ('Remind me to "{message}" at {time}.', "At {time}, remind me: {message}."),
    ),
    Fn(
        "shopping",
        "search_products",
        "Search the shop's catalogue.",
        (
            _s("query", "Search words", "running shoes", "desk lamp", "coffee grinder"),
            _n("max_price", "Highest price in dollars", 25.0, 60.0, 150.0),
            _e(
                "sort",
                "Order of results",
                "cheapest",
                "best_rated",
                "newest",
                required=False,
                best_rated="best rated",
            ),
        ),
        (
            "Search for {query} under ${max_price}, {sort} first.",
            "Show me {query} that cost at most {max_price} dollars, {sort} first.",
        ),
    ),
    Fn(
        "shopping",
        "add_to_cart",
        "Add a product to the cart.",
        (
            _s("product_id", "Product id", "P-1042", "P-2231", "P-3307", "P-4410"),
            _i("quantity", "How many", 1, 2, 3, 5),
        ),
        (
            "Add {quantity} of product {product_id} to my cart.",
            "Put {quantity} x {product_id} in the basket.",
        ),
    ),
    Fn(
        "shopping",
        "track_order",
        "Where an order is.",
        (_s("order_id", "Order id", "ORD-55120", "ORD-60233", "ORD-71844"),),
        ("Where is my order {order_id}?", "Track order {order_id} for me."),
    ),
    Fn(
        "files",
        "search_files",
        "Search the user's documents.",
        (
            _s("query", "Search words", "tax return", "lease", "roadmap"),
            _e("file_type", "File type", "pdf", "docx", "xlsx", "txt"),
        ),
        (
            "Find {file_type} files about {query}.",
            "Look for my {query} documents, {file_type} only.",
        ),
    ),
    Fn(
        "files",
        "share_file",
        "Share a file with someone.",
        (
            _s("path", "File path", "/docs/plan.pdf", "/docs/budget.xlsx", "/photos/trip.zip"),
            _s("email", "Their email", *_EMAILS),
            _e("permission", "Access level", "view", "comment", "edit"),
        ),
        (
            "Share {path} with {email}, {permission} access.",
            "Give {email} {permission} rights on {path}.",
        ),
    ),
    Fn(
        "files",
        "compress_folder",
        "Pack a folder into an archive.",
        (
            _s("path", "Folder path", "/projects/site", "/photos/2025", "/backup/mail"),
            _e("format", "Archive format", "zip", "tar.gz", "7z"),
        ),
        ("Compress {path} into a {format} archive.", "Make a {format} of the folder {path}."),
    ),
    Fn(
        "units",
        "convert_length",
        "Convert a length between units.",
        (
            _n("value", "The length", 3.5, 12.0, 42.195, 100.0),
            _e("from_unit", "Unit of value", "km", "mi", "ft"),
            _e("to_unit", "Unit wanted", "m", "in", "yd"),
        ),
        ("Convert {value} {from_unit} to {to_unit}.", "How many {to_unit} is {value} {from_unit}?"),
    ),
    Fn(
        "units",
        "convert_temperature",
        "Convert a temperature between scales.",
        (
            _n("value", "The temperature", -4.0, 21.5, 37.0, 98.6),
            _e("from_scale", "Scale of value", "celsius", "fahrenheit"),
            _e("to_scale", "Scale wanted", "kelvin", "rankine"),
        ),
        (
            "Convert {value} degrees {from_scale} to {to_scale}.",
            "What is {value} {from_scale} in {to_scale}?",
        ),
    ),
    Fn(
        "units",
        "compute_percentage",
        "What percentage a part is of a whole.",
        (_n("part", "The part", 18.0, 45.0, 7.5), _n("whole", "The whole", 60.0, 240.0, 30.0)),
        ("What percentage of {whole} is {part}?", "{part} out of {whole} is what percent?"),
    ),
    Fn(
        "messaging",
        "send_sms",
        "Send a text message to a phone number.",
        (
            _s("phone", "Phone number", "+1-555-0134", "+44-20-7946-0958", "+61-2-5550-1234"),
            _s("message", "The text", "Running late", "Call me back", "Dinner at eight"),
        ),
        ('Text {phone} saying "{message}".', 'Send "{message}" by SMS to {phone}.'),
    ),
    Fn(
        "messaging",
        "send_email",
        "Send an email.",
        (
            _s("to", "Recipient address", *_EMAILS),
            _s("subject", "Subject line", "Quarterly report", "Invoice 2291", "Party on Friday"),
            _e("priority", "Importance", "low", "normal", "high", required=False),
        ),
        (
            'Email {to} with the subject "{subject}", {priority} priority.',
            'Send an email to {to}; subject: "{subject}".',
        ),
    ),
    Fn(
        "messaging",
        "create_group_chat",
        "Create a group chat.",
        (
            _s("name", "Group name", "Book club", "Hiking crew", "Launch team"),
            _e("privacy", "Who may join", "public", "private"),
        ),
        (
            'Create a {privacy} group chat called "{name}".',
            'Start a new group "{name}" and make it {privacy}.',
        ),
    ),
    Fn(
        "iot",
        "set_thermostat",
        "Set a room's thermostat.",
        (
            Param("room", "string", "Room", _ROOMS, enum=True, say=_ROOM_SAY),
            _n("temperature", "Target in degrees Celsius", 18.5, 20.0, 21.5, 23.0),
            _e("mode", "Mode", "heat", "cool", "auto", required=False),
        ),
        (
            "Set the {room} thermostat to {temperature} degrees, {mode} mode.",
            "Make the {room} {temperature} °C.",
        ),
    ),
    Fn(
        "iot",
        "toggle_light",
        "Switch a room's lights.",
        (
            Param("room", "string", "Room", _ROOMS, enum=True, say=_ROOM_SAY),
            _e("state", "On or off", "on", "off"),
        ),
        ("Turn the {room} lights {state}.", "Switch {state} the light in the {room}."),
    ),
    Fn(
        "iot",
        "lock_door",
        "Lock a door.",
        (_e("door", "Which door", "front", "back", "garage"),),
        ("Lock the {door} door.", "Make sure the {door} door is locked."),
    ),
    Fn(
        "hr",
        "request_time_off",
        "Ask for days off.",
        (
            _s("start_date", "First day, YYYY-MM-DD", *_DATES[:3]),
            _s("end_date", "Last day, YYYY-MM-DD", *_DATES[3:]),
            _e("kind", "Kind of leave", "vacation", "sick", "personal"),
        ),
        (
            "Request {kind} leave from {start_date} to {end_date}.",
            "I'd like to take {kind} days off, {start_date} through {end_date}.",
        ),
    ),
    Fn(
        "hr",
        "get_employee_info",
        "Look up an employee by id.",
        (_s("employee_id", "Employee id", "E-10234", "E-20871", "E-33016"),),
        ("Pull up the record of employee {employee_id}.", "Who is employee {employee_id}?"),
    ),
    Fn(
        "hr",
        "submit_expense",
        "File an expense claim.",
        (
            _n("amount", "Amount in dollars", 18.4, 64.0, 230.75),
            _e("category", "Category", "travel", "meals", "equipment", "training"),
        ),
        (
            "File a {category} expense of ${amount}.",
            "Submit an expense claim: {amount} dollars, {category}.",
        ),
    ),
    Fn(
        "recipes",
        "find_recipes",
        "Search recipes.",
        (
            _s("ingredient", "Main ingredient", "chickpeas", "salmon", "mushrooms", "tofu"),
            _e("diet", "Diet", "vegetarian", "vegan", "gluten_free", gluten_free="gluten-free"),
            _i("max_minutes", "Longest cooking time", 20, 30, 45, required=False),
        ),
        (
            "Find {diet} recipes with {ingredient} that take at most {max_minutes} minutes.",
            "Any {diet} dishes using {ingredient}?",
        ),
    ),
    Fn(
        "recipes",
        "scale_recipe",
        "Scale a saved recipe to a number of servings.",
        (
            _s("recipe", "Recipe name", "lentil soup", "banana bread", "pad thai"),
            _i("servings", "Servings", 2, 4, 6, 10),
        ),
        (
            "Scale my {recipe} recipe to {servings} servings.",
            "Adjust {recipe} for {servings} people.",
        ),
    ),
    Fn(
        "recipes",
        "get_nutrition",
        "Nutrition facts of a food.",
        (_s("food", "Food", "oats", "almonds", "brown rice"), _i("grams", "Portion", 50, 100, 250)),
        (
            "Nutrition facts for {grams} g of {food}?",
            "How many calories are in {grams} grams of {food}?",
        ),
    ),
    Fn(
        "music",
        "play_song",
        "Play a song.",
        (
            _s("title", "Song title", "Blue Monday", "Clair de Lune", "Dreams"),
            _s("artist", "Artist", "New Order", "Debussy", "Fleetwood Mac"),
        ),
        ("Play {title} by {artist}.", "Put on {artist}'s {title}."),
    ),
    Fn(
        "music",
        "set_volume",
        "Set the speaker volume.",
        (_i("level", "Volume, 0 to 100", 10, 35, 60, 80),),
        ("Set the volume to {level}.", "Volume {level} please."),
    ),
    Fn(
        "music",
        "create_playlist",
        "Create a playlist.",
        (
            _s("name", "Playlist name", "Morning run", "Focus", "Road trip"),
            Param(
                "public",
                "boolean",
                "Visible to others",
                (True, False),
                say={True: "public", False: "private"},
            ),
        ),
        ('Make a {public} playlist called "{name}".', 'New playlist "{name}", {public}.'),
    ),
)
"""Every catalog function."""

DOMAINS: tuple[str, ...] = tuple(dict.fromkeys(f.domain for f in CATALOG))
"""The catalog's domains, in catalog order."""
