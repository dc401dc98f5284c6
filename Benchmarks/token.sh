#!/usr/bin/env bash
# `broker token` on a warm cache against /bin/true, measured together with hyperfine; writes the
# "broker token" section of BENCHMARKS.md.
#   Benchmarks/token.sh [runs]     (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-300}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

swift build -c release --product broker >&2 && swift build -c release --product broker-full >&2
BIN=$PWD/.build/release/broker
"$BIN" serve --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
export BROKER_URL=$(sed 's/broker listening on //' "$WORK/out") BROKER_HOME=$WORK/home
openssl rand -base64 18 | "$BIN" register --email bench@example.com --password-stdin 2>/dev/null
"$BIN" token >/dev/null  # warm: the cached token meets --min-valid, no network
kill "$(cat "$WORK/pid")"  # the server is not needed on the warm path: prove it by stopping it

hyperfine -N --warmup 30 --runs "$RUNS" --export-json "$WORK/h.json" /bin/true "$BIN token" "$BIN-full token" >&2
python3 - "$WORK/h.json" "$RUNS" <<'PY' | python3 Benchmarks/write_section.py "## broker token (warm cache"
import datetime, json, pathlib, sys
results = {r["command"].split("/")[-1]: r for r in json.load(open(sys.argv[1]))["results"]}
base, token, full = results["true"], results["broker token"], results["broker-full token"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
ratio = token["mean"] / base["mean"]
section = f"""## broker token (warm cache, hyperfine)

Command: `Benchmarks/token.sh {sys.argv[2]}` — {datetime.date.today()}, {cpu}, release build, `hyperfine -N`, {sys.argv[2]} runs each, the broker stopped (the warm path never touches the network).

| command | mean | σ | ratio to `/bin/true` | goal |
|---|---:|---:|---:|---:|
| `/bin/true` | {base["mean"] * 1000:.2f} ms | {base["stddev"] * 1000:.2f} ms | 1.00x | — |
| `broker token` | {token["mean"] * 1000:.2f} ms | {token["stddev"] * 1000:.2f} ms | **{ratio:.1f}x** | ≤ 5x (goal ≤ 3x) |
| `broker-full token` (the same answer without the launcher) | {full["mean"] * 1000:.2f} ms | {full["stddev"] * 1000:.2f} ms | {full["mean"] / base["mean"]:.1f}x | — |

`broker` is a small launcher (Sources/broker), a fully static executable (`-static-executable`:
the Swift standard library and glibc linked in, so no dynamic loader runs at all): it answers a warm `broker token` itself — reading `credentials.json` with
the same BrokerCredentials code as the full CLI, without a lock or the network — and `execv`s
`broker-full` for everything else. `broker-full` carries the server and the rest of the CLI, and its start
alone (mapping and relocating Foundation, OpenSSL, SQLite, libcurl's chain, NIO, the Swift runtime) costs
the second row.
"""
print(section, end="")
PY
