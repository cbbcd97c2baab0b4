"""The shipped Prometheus alert rules are well formed: rule groups, each rule with an alert
name, an expression, a severity of warning or critical and a summary; `for` durations in
Prometheus's syntax; alert names unique.

Usage: alert_rules.py RULES_FILE
"""

import re
import sys

import yaml

rules_file = sys.argv[1]
doc = yaml.safe_load(open(rules_file))
names = set()
count = 0
for group in doc["groups"]:
    assert group["name"], group
    for rule in group["rules"]:
        name = rule["alert"]
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), name
        assert name not in names, f"{name} twice"
        names.add(name)
        assert isinstance(rule["expr"], str) and rule["expr"].strip(), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"], name
        if "for" in rule:
            assert re.fullmatch(r"\d+[smhd]", rule["for"]), (name, rule["for"])
        count += 1
assert count >= 8, count
print(f"{count} rules in {len(doc['groups'])} groups")
print("OK")
