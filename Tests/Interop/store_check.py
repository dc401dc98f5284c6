#!/usr/bin/env python3
"""Reads a broker's SQLite store beside the running broker (Python's sqlite3, not broker code) for the crash
consistency test. Usage: store_check.py DB < {"tokens": [refresh tokens], "emails": [registered emails]}
Prints {"integrity", "foreign_key_errors", "double_live", "tokens": {token: state}, "missing_emails"}, where a
token's state is "live", "used", "revoked" (its session) or "unknown"."""
import hashlib
import json
import sqlite3
import sys

wanted = json.load(sys.stdin)
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=30)
result = {
    "integrity": db.execute("PRAGMA integrity_check").fetchone()[0],
    "foreign_key_errors": len(db.execute("PRAGMA foreign_key_check").fetchall()),
    "double_live": db.execute(
        "SELECT count(*) FROM (SELECT session_id FROM refresh_tokens WHERE used_at IS NULL "
        "GROUP BY session_id HAVING count(*) > 1)").fetchone()[0],
    "tokens": {},
}
for token in wanted.get("tokens", []):
    digest = hashlib.sha256(token.encode()).hexdigest()
    row = db.execute(
        "SELECT t.used_at, s.revoked_at FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id "
        "WHERE t.hash = ?", (digest,)).fetchone()
    if row is None:
        state = "unknown"
    elif row[1] is not None:
        state = "revoked"
    else:
        state = "live" if row[0] is None else "used"
    result["tokens"][token] = state
emails = wanted.get("emails", [])
present = {r[0] for r in db.execute(
    f"SELECT email FROM password_accounts WHERE email IN ({','.join('?' * len(emails))})", emails)} if emails else set()
result["missing_emails"] = [e for e in emails if e not in present]
print(json.dumps(result))
