"""The writers' documents against the readers' JSON Schemas (docs/schemas/, generated from
fp8_report's types): a small checker of the keywords schemars writes, shared by the tests."""

from __future__ import annotations

import json


def check(value, schema: dict, defs: dict, at: str = "$") -> None:
    """A small JSON Schema check (the keywords schemars writes): raises ValueError naming the path."""
    if "$ref" in schema:
        schema = {**defs[schema["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in schema.items() if k != "$ref"}}
    if "anyOf" in schema or "oneOf" in schema:
        errors = []
        for s in schema.get("anyOf", schema.get("oneOf")):
            try:
                return check(value, s, defs, at)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(f"{at}: matches none of {errors}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{at}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        raise ValueError(f"{at}: {value!r} is not {schema['const']!r}")
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        py = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None), "integer": int, "number": (int, float)}
        if not any(isinstance(value, py[t]) and not (t in ("integer", "number") and isinstance(value, bool)) for t in types):
            raise ValueError(f"{at}: {value!r} is not {types}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                raise ValueError(f"{at}: missing {k}")
        for k, v in value.items():
            if k in props:
                check(v, props[k], defs, f"{at}.{k}")
            elif schema.get("additionalProperties") is False:
                raise ValueError(f"{at}: unknown field {k}")
            elif isinstance(schema.get("additionalProperties"), dict):  # a map's values
                check(v, schema["additionalProperties"], defs, f"{at}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            check(v, schema["items"], defs, f"{at}[{i}]")


def schema(root, name):
    """A committed schema and its definitions."""
    s = json.loads((root / "docs" / "schemas" / name).read_text())
    return s, s.get("$defs", {})
