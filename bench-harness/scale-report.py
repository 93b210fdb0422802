#!/usr/bin/env python3
"""Prints a scale run's figures side by side: one row per figure, one column per broker,
and the first broker's figure over the second's. Every round of a figure that has
rounds is printed, not only its median.

    scale-report.py RESULTS_DIR BROKER [BROKER...]

Each broker's figures are the JSON lines of RESULTS_DIR/BROKER.jsonl written by
`skein bench scale` and `scale.sh` (`{"step": NAME, field: value, ...}`).
"""
import json
import math
import sys


def flatten(line):
    """(figure name, value) pairs of one JSON line: `step.field`, or `step` alone for
    a line with a single `value`."""
    step = line.get("step", "?")
    if set(line) == {"step", "value"}:
        yield step, line["value"]
        return
    for field, value in line.items():
        if field == "step":
            continue
        if isinstance(value, dict):
            if not value:
                continue
            value = "; ".join(f"{k}: {v}" for k, v in value.items())
        yield f"{step}.{field}", value


def show(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "never"
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return " ".join(show(v) for v in value)
    return str(value)


def main():
    out, brokers = sys.argv[1], sys.argv[2:]
    figures, order = {}, []
    for broker in brokers:
        try:
            lines = [json.loads(l) for l in open(f"{out}/{broker}.jsonl") if l.strip()]
        except FileNotFoundError:
            lines = []
        for line in lines:
            for name, value in flatten(line):
                if name not in figures:
                    figures[name] = {}
                    order.append(name)
                figures[name][broker] = value
    width = max((len(n) for n in order), default=10)
    header = f"{'figure':<{width}}  " + "  ".join(f"{b:>22}" for b in brokers)
    if len(brokers) == 2:
        header += f"  {brokers[0]}/{brokers[1]:>6}"
    print(header)
    for name in order:
        values = [figures[name].get(b) for b in brokers]
        row = f"{name:<{width}}  " + "  ".join(f"{show(v):>22}" for v in values)
        a, b = (values + [None, None])[:2]
        if len(brokers) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            if b and not (isinstance(a, float) and math.isnan(a)) and not (isinstance(b, float) and math.isnan(b)):
                row += f"  {a / b:>12.3f}"
        print(row)


if __name__ == "__main__":
    main()
