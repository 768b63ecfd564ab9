#!/usr/bin/env python3
# Validates JSON documents against the JSON Schema files of docs/schema/
# (Debian's python3-jsonschema): validate.py SCHEMA DOC [DOC ...]. Prints
# one line per document and exits 1 when one does not validate, 3 when
# the jsonschema module is missing (the test then skips or, under CI,
# fails).
import json
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed", file=sys.stderr)
    sys.exit(3)

schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
bad = 0
for path in sys.argv[2:]:
    doc = json.load(open(path))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc),
                    key=lambda e: list(e.path))
    for e in errors[:5]:
        where = "/".join(str(p) for p in e.path) or "(top)"
        print(f"{path}: {where}: {e.message}")
    bad |= bool(errors)
    if not errors:
        print(f"{path}: valid")
sys.exit(1 if bad else 0)
