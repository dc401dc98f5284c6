#!/usr/bin/env python3
"""Where a callgrind dump's instructions go, per request: the functions with the most, by their own
instructions (self) or with their callees' (inclusive), or who calls one.

  top.py DUMP [--requests N] [--inclusive] [--callers REGEX] [--limit K]

Reads callgrind's format as Benchmarks/callgrind.sh writes it (--compress-strings=no). Debian 12's
callgrind_annotate puts a whole dump taken mid-run on the thread's entry (clone), hence this reader. Swift names
come out mangled; pipe through `swift demangle --simplified`. Inclusive counts add each call's cost to its
caller once per call site (recursion is counted at every level), so read them as an upper bound.
"""
import argparse
import collections
import re

parser = argparse.ArgumentParser()
parser.add_argument("dump")
parser.add_argument("--requests", type=int, default=1, help="divide every count by this")
parser.add_argument("--inclusive", action="store_true")
parser.add_argument("--callers", help="list the callers of the functions matching this regular expression")
parser.add_argument("--limit", type=int, default=40)
arguments = parser.parse_args()

own = collections.Counter()
inclusive = collections.Counter()
callers = collections.Counter()
target = re.compile(arguments.callers) if arguments.callers else None
function = callee = None
in_call = False
cost = re.compile(r"^(?:[+-]?\d+|\*) (\d+)$")
summary = None
with open(arguments.dump) as dump:
    for line in dump:
        if line.startswith("summary:"):
            summary = int(line.split()[1])
        elif line.startswith("fn="):
            function = line[3:].rstrip("\n")
        elif line.startswith("cfn="):
            callee = line[4:].rstrip("\n")
        elif line.startswith("calls="):
            in_call = True
        elif match := cost.match(line):
            count = int(match.group(1))
            if in_call:
                in_call = False
                if callee != function:
                    inclusive[function] += count
                if target and target.search(callee):
                    callers[(function, callee)] += count
            else:
                own[function] += count
                inclusive[function] += count

total = summary or sum(own.values())
print(f"{total / arguments.requests:,.0f} instructions" + (" per request" if arguments.requests > 1 else ""))
if target:
    for (caller, callee), count in callers.most_common(arguments.limit):
        print(f"{count / arguments.requests:12,.0f}  {caller}  ->  {callee}")
else:
    for name, count in (inclusive if arguments.inclusive else own).most_common(arguments.limit):
        print(f"{count / arguments.requests:12,.0f}  {100 * count / total:5.1f}%  {name}")
