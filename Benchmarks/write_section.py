#!/usr/bin/env python3
"""Replaces (or appends) one "## HEADING…" section of BENCHMARKS.md with the text on stdin.

  write_section.py "## broker serve (wrk"  < section.md

The heading argument is a prefix of the section's heading line; the section runs to the next "## ".
"""
import pathlib
import sys

heading = sys.argv[1]
section = sys.stdin.read().rstrip("\n") + "\n"
path = pathlib.Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
doc = path.read_text()
start = doc.find(heading)
if start >= 0:
    end = doc.find("\n## ", start + len(heading))
    doc = doc[:start] + section + (doc[end:] if end >= 0 else "")
else:
    doc = doc.rstrip("\n") + "\n\n" + section
path.write_text(doc)
sys.stdout.write(section)
