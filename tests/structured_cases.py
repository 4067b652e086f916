"""Acceptance data for structured output: 50 JSON Schemas of realistic variety (nested objects, arrays with
min/max items, enums, anyOf, string formats and patterns, numeric bounds, required/optional,
additionalProperties false), three GBNF grammars with reference parsers, and regexes.

Strings and arrays are bounded (maxLength / maxItems), so every output fits the tests' token budget: an
output cut by max_tokens would be a valid prefix, not a valid document (runtime/constraints.py).
"""
from __future__ import annotations

import ast
import csv
import io
import re

S = {"type": "string", "maxLength": 16}
NAME = {"type": "string", "minLength": 1, "maxLength": 16}
EMAIL = {"type": "string", "format": "email", "maxLength": 24}


def obj(props: dict, required: list[str] | None = None, closed: bool = True) -> dict:
    out = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if closed:
        out["additionalProperties"] = False
    return out


SCHEMAS: list[tuple[str, dict]] = [
    ("a person", obj({"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}})),
    ("a point in 3D", obj({"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}})),
    ("a boolean flag named enabled", obj({"enabled": {"type": "boolean"}})),
    ("a traffic light state", obj({"color": {"enum": ["red", "amber", "green"]}})),
    ("an HTTP response summary", obj({"status": {"type": "integer", "minimum": 100, "maximum": 599},
                                      "ok": {"type": "boolean"}})),
    ("a product", obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                       "price": {"type": "number", "minimum": 0, "maximum": 10000},
                       "in_stock": {"type": "boolean"}})),
    ("a user account", obj({"username": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,11}$"},
                            "email": EMAIL}, ["username"])),
    ("a calendar date", obj({"date": {"type": "string", "format": "date"}})),
    ("a meeting", obj({"title": S, "start": {"type": "string", "format": "time"},
                       "minutes": {"type": "integer", "minimum": 5, "maximum": 240}})),
    ("an RGB color", obj({"r": {"type": "integer", "minimum": 0, "maximum": 255},
                          "g": {"type": "integer", "minimum": 0, "maximum": 255},
                          "b": {"type": "integer", "minimum": 0, "maximum": 255}})),
    ("a shopping list", obj({"items": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 3}})),
    ("a vector of three numbers", obj({"v": {"type": "array", "items": {"type": "integer", "minimum": -9,
                                                                          "maximum": 9},
                                             "minItems": 3, "maxItems": 3}})),
    ("a book", obj({"title": S, "author": NAME, "year": {"type": "integer", "minimum": 1450, "maximum": 2030},
                    "isbn": {"type": "string", "pattern": "^[0-9]{10}$"}}, ["title", "author"])),
    ("a server address", obj({"host": {"type": "string", "format": "ipv4"},
                              "port": {"type": "integer", "minimum": 1, "maximum": 65535}})),
    ("a log entry", obj({"level": {"enum": ["debug", "info", "warn", "error"]}, "message": S,
                         "code": {"type": "integer", "minimum": 0, "maximum": 999}}, ["level", "message"])),
    ("a temperature reading", obj({"celsius": {"type": "number", "minimum": -90, "maximum": 60},
                                   "unit": {"const": "C"}})),
    ("a chess move", obj({"from": {"type": "string", "pattern": "^[a-h][1-8]$"},
                          "to": {"type": "string", "pattern": "^[a-h][1-8]$"},
                          "capture": {"type": "boolean"}})),
    ("an address", obj({"street": S, "city": NAME, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                        "country": {"enum": ["US", "FR", "DE", "JP"]}}, ["city", "country"])),
    ("a company with its address", obj({"name": NAME, "address": obj({"city": NAME, "country": {
        "enum": ["US", "FR", "DE", "JP"]}})})),
    ("a rectangle", obj({"width": {"type": "integer", "minimum": 1, "maximum": 100},
                         "height": {"type": "integer", "minimum": 1, "maximum": 100}})),
    ("a shape that is a circle or a square", {"anyOf": [
        obj({"kind": {"const": "circle"}, "radius": {"type": "integer", "minimum": 1, "maximum": 50}}),
        obj({"kind": {"const": "square"}, "side": {"type": "integer", "minimum": 1, "maximum": 50}})]}),
    ("a payment by card or cash", obj({"amount": {"type": "integer", "minimum": 1, "maximum": 500},
                                       "method": {"anyOf": [{"const": "cash"}, obj({"card": {
                                           "type": "string", "pattern": "^[0-9]{4}$"}})]}})),
    ("an id that is a number or a short string", obj({"id": {"anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 99999}, {"type": "string", "maxLength": 8}]}})),
    ("a contact with optional phone", obj({"name": NAME, "phone": {"type": "string",
                                                                   "pattern": "^\\+?[0-9]{7,12}$"}},
                                          ["name"])),
    ("a team of people", obj({"team": NAME, "members": {"type": "array", "minItems": 1, "maxItems": 2,
                                                       "items": obj({"name": NAME, "role": {
                                                           "enum": ["dev", "pm", "qa"]}})}})),
    ("a weather forecast", obj({"city": NAME, "days": {"type": "array", "minItems": 1, "maxItems": 2,
                                                       "items": obj({"high": {"type": "integer", "minimum": -30,
                                                                              "maximum": 50},
                                                                     "sky": {"enum": ["sun", "cloud", "rain"]}})}})),
    ("a version number", obj({"major": {"type": "integer", "minimum": 0, "maximum": 99},
                              "minor": {"type": "integer", "minimum": 0, "maximum": 99},
                              "patch": {"type": "integer", "minimum": 0, "maximum": 99}})),
    ("a semantic version string", obj({"version": {"type": "string",
                                                   "pattern": "^[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,2}$"}})),
    ("a file", obj({"path": {"type": "string", "pattern": "^/[a-z]{1,8}(/[a-z]{1,8}){0,2}$"},
                    "size": {"type": "integer", "minimum": 0, "maximum": 1000000},
                    "readonly": {"type": "boolean"}}, ["path"])),
    ("a rating", obj({"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": S}, ["stars"])),
    ("a yes/no answer with confidence", obj({"answer": {"enum": ["yes", "no"]},
                                             "confidence": {"type": "number", "minimum": 0, "maximum": 1}})),
    ("a timezone offset", obj({"tz": {"type": "string", "pattern": "^[+-](0[0-9]|1[0-4]):[0-5][0-9]$"}})),
    ("a to-do item", obj({"task": S, "done": {"type": "boolean"},
                          "priority": {"enum": ["low", "medium", "high"]}}, ["task", "done"])),
    ("a pair of coordinates", obj({"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                   "lon": {"type": "number", "minimum": -180, "maximum": 180}})),
    ("a list of up to three tags", obj({"tags": {"type": "array", "maxItems": 3,
                                                 "items": {"type": "string", "pattern": "^[a-z]{2,8}$"}}})),
    ("a matrix of 2 by 2 digits", obj({"m": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}})),
    ("an email message header", obj({"from": EMAIL, "to": EMAIL, "subject": S})),
    ("a uuid record", obj({"id": {"type": "string", "format": "uuid"}})),
    ("a feature toggle set", obj({"dark_mode": {"type": "boolean"}, "beta": {"type": "boolean"},
                                  "sync": {"type": "boolean"}})),
    ("a nullable middle name", obj({"first": NAME, "middle": {"type": ["string", "null"], "maxLength": 12},
                                    "last": NAME})),
    ("an animal", obj({"species": {"enum": ["cat", "dog", "owl", "fox"]}, "legs": {"enum": [2, 4]},
                       "name": NAME})),
    ("a sports score", obj({"home": {"type": "integer", "minimum": 0, "maximum": 20},
                            "away": {"type": "integer", "minimum": 0, "maximum": 20},
                            "final": {"type": "boolean"}})),
    ("a recipe ingredient", obj({"item": NAME, "grams": {"type": "integer", "minimum": 1, "maximum": 2000},
                                 "optional": {"type": "boolean"}}, ["item", "grams"])),
    ("a flight", obj({"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2,4}$"},
                      "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                      "to": {"type": "string", "pattern": "^[A-Z]{3}$"}})),
    ("an open key-value note", obj({"key": NAME, "value": S}, ["key"], closed=False)),
    ("a sensor event", obj({"sensor": {"type": "string", "pattern": "^s[0-9]{2}$"},
                            "kind": {"enum": ["temp", "humidity", "motion"]},
                            "value": {"type": "integer", "minimum": 0, "maximum": 100}})),
    ("a percentage", obj({"percent": {"type": "integer", "minimum": 0, "maximum": 100}})),
    ("a language preference", obj({"primary": {"enum": ["en", "fr", "de", "ja"]},
                                   "others": {"type": "array", "maxItems": 2,
                                              "items": {"enum": ["en", "fr", "de", "ja"]}}}, ["primary"])),
    ("a network interface", obj({"name": {"type": "string", "pattern": "^(eth|wlan)[0-9]$"},
                                 "ipv6": {"type": "string", "format": "ipv6", "maxLength": 24},
                                 "up": {"type": "boolean"}}, ["name", "up"])),
    ("an order with lines", obj({"order": {"type": "integer", "minimum": 1, "maximum": 9999},
                                 "lines": {"type": "array", "minItems": 1, "maxItems": 2,
                                           "items": obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}})}})),
]
assert len(SCHEMAS) == 50


# -- grammars, each with the parser that must accept every output -----------------------------------------

ARITHMETIC = r"""
root   ::= expr
expr   ::= term (("+" | "-") term){0,3}
term   ::= factor (("*" | "/") factor){0,2}
factor ::= num | "(" expr ")"
num    ::= [1-9] [0-9]{0,2}
"""


def parse_arithmetic(text: str) -> None:
    """A Python expression of integers, + - * / and parentheses only."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        assert isinstance(node, (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div)), \
            ast.dump(node)
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, int)


C_LIKE = r"""
root  ::= func
func  ::= "int " ident "(" params? ") {" stmt{1,3} " }"
params ::= "int " ident (", int " ident){0,1}
stmt  ::= " " (decl | assign | ret)
decl  ::= "int " ident " = " expr ";"
assign ::= ident " = " expr ";"
ret   ::= "return " expr ";"
expr  ::= operand (" " [-+*] " " operand){0,2}
operand ::= ident | [0-9]{1,3}
ident ::= [a-z] [a-z0-9]{0,5}
"""
_C_TOKEN = re.compile(r"\s*(int|return|[a-z][a-z0-9]*|[0-9]+|[(){};,=+*-])")


def parse_c_like(text: str) -> None:
    """A recursive-descent parser of the C-like grammar above (a function of declarations, assignments and
    returns); raises AssertionError on anything else."""
    toks, pos = [], 0
    while pos < len(text):
        m = _C_TOKEN.match(text, pos)
        assert m and m.group(1), f"bad character at {pos}: {text[pos:pos + 10]!r}"
        toks.append(m.group(1))
        pos = m.end()
    i = 0

    def take(want: str | None = None) -> str:
        nonlocal i
        assert i < len(toks), f"unexpected end, wanted {want}"
        t = toks[i]
        if want == "ident":
            assert re.fullmatch(r"[a-z][a-z0-9]*", t) and t not in ("int", "return"), t
        elif want == "number":
            assert t.isdigit(), t
        elif want is not None:
            assert t == want, (t, want)
        i += 1
        return t

    def expr() -> None:
        operand()
        while i < len(toks) and toks[i] in "+-*":
            take()
            operand()

    def operand() -> None:
        take("number" if toks[i].isdigit() else "ident")

    take("int"), take("ident"), take("(")
    if toks[i] == "int":
        take("int"), take("ident")
        while toks[i] == ",":
            take(","), take("int"), take("ident")
    take(")"), take("{")
    n = 0
    while toks[i] != "}":
        if toks[i] == "int":
            take("int"), take("ident"), take("="), expr(), take(";")
        elif toks[i] == "return":
            take("return"), expr(), take(";")
        else:
            take("ident"), take("="), expr(), take(";")
        n += 1
    take("}")
    assert n >= 1 and i == len(toks)


CSV = r"""
root ::= header row{1,3}
header ::= "name,qty,price\n"
row  ::= name "," qty "," price "\n"
name ::= [a-z]{1,8}
qty  ::= [0-9]{1,3}
price ::= [0-9]{1,3} "." [0-9]{2}
"""


def parse_csv(text: str) -> None:
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["name", "qty", "price"] and 2 <= len(rows) <= 4, rows
    for r in rows[1:]:
        assert len(r) == 3 and r[0].isalpha() and int(r[1]) >= 0 and float(r[2]) >= 0, r


GRAMMARS = [("an arithmetic expression", ARITHMETIC, parse_arithmetic),
            ("a small C function", C_LIKE, parse_c_like),
            ("a CSV table of products", CSV, parse_csv)]

REGEXES = [("a US phone number", r"\(\d{3}\) \d{3}-\d{4}"),
           ("a date", r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"),
           ("a hex color", r"#[0-9a-f]{6}"),
           ("a yes or no", r"(yes|no)"),
           ("a licence plate", r"[A-Z]{2}-[0-9]{3}-[A-Z]{2}")]
