#!/usr/bin/env python3
"""The docs check: every relative link in the repository's Markdown resolves, and the runnable snippets run.

  scripts/check-docs.py links                 every relative link and anchor (no build needed)
  scripts/check-docs.py run --bin DIR         also runs each snippet marked runnable, with DIR first on PATH
  scripts/check-docs.py self-test             proves the checker fails on what it must refuse

Links: a link to a file must name a file git tracks (the repository carries everything it links to; nothing
outside it, such as ../shared, and nothing untracked); a link with #anchor into a Markdown file must name one of
its headings (GitHub's rule: lower case, punctuation dropped, spaces to hyphens, -1, -2 … for repeats). Links in
code blocks and code spans are not links. Web links are not fetched.

Runnable snippets: a ```sh block right after a line `<!-- runnable … -->`. Each runs under `bash -euo pipefail`
from the repository's root, in a process group of its own that is ended afterwards (so `&` servers go with it),
with HOME and BROKER_HOME in a fresh temporary folder, no D-Bus session (the CLI keeps its sessions in a file),
and curl following redirects as BROWSER (with an emulator that approves by itself, a sign-in then completes
without a human). A snippet fails on a non-zero exit or after 180 s; its output is printed then.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNIPPET_SECONDS = 180


def tracked_files(root: Path) -> set[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    return {name for name in out.stdout.decode().split("\0") if name}


def markdown_files(tracked: set[str]) -> list[str]:
    return sorted(name for name in tracked if name.endswith(".md") and not name.startswith(("Tests/", "Fuzz/")))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LN":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def fenced(text: str):
    """Each line of the text with whether it belongs to a fenced code block (its fences included)."""
    fence = None
    for line in text.split("\n"):
        stripped = line.lstrip()
        match = re.match(r"(`{3,}|~{3,})", stripped)
        if match and (fence is None or stripped.startswith(fence)):
            fence = match.group(1) if fence is None else None
            yield line, True
        else:
            yield line, fence is not None


def without_code(text: str) -> str:
    """The text with fenced code blocks and code spans blanked to spaces: same length, same line breaks."""
    return "\n".join(
        " " * len(line) if in_code else re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
        for line, in_code in fenced(text)
    )


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings."""
    seen: dict[str, int] = {}
    result = set()
    for line, in_code in fenced(text):
        heading = None if in_code else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def check_links(root: Path) -> list[str]:
    tracked = tracked_files(root)
    problems = []
    contents = {name: (root / name).read_text(encoding="utf-8") for name in markdown_files(tracked)}
    heading_sets = {name: anchors(text) for name, text in contents.items()}
    tracked_dirs = {str(Path(name).parent) for name in tracked}
    for parent in list(tracked_dirs):
        path = Path(parent)
        while str(path) not in ("", "."):
            tracked_dirs.add(str(path))
            path = path.parent
    for name, text in contents.items():
        here = Path(name).parent
        # A link's text may run over a line break, so the whole text is searched at once.
        for match in LINK.finditer(without_code(text)):
            number = text.count("\n", 0, match.start()) + 1
            target = match.group(1)
            where = f"{name}:{number}: ({target})"
            if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # web and mail links are not fetched
            path_part, _, anchor = target.partition("#")
            if path_part.startswith("/"):
                problems.append(f"{where}: an absolute path; link relative to the file")
                continue
            resolved = os.path.normpath(here / path_part) if path_part else name
            if resolved.startswith(".."):
                problems.append(f"{where}: outside the repository, which a reader of it does not have")
                continue
            if resolved not in tracked and resolved.rstrip("/") not in tracked_dirs:
                problems.append(f"{where}: no such file in the repository ({resolved})")
                continue
            if anchor:
                if resolved not in heading_sets:
                    problems.append(f"{where}: #{anchor} into a file that is not Markdown")
                elif anchor not in heading_sets[resolved]:
                    problems.append(f"{where}: {resolved} has no heading with the anchor #{anchor}")
    return problems


def runnable_snippets(root: Path) -> list[tuple[str, int, str]]:
    snippets = []
    for name in markdown_files(tracked_files(root)):
        lines = (root / name).read_text(encoding="utf-8").split("\n")
        for index, line in enumerate(lines):
            if not re.match(r"^<!--\s*runnable\b.*-->\s*$", line.strip()):
                continue
            if index + 1 >= len(lines) or lines[index + 1].strip() not in ("```sh", "```bash", "```shell"):
                snippets.append((name, index + 1, ""))  # a marker with no shell block after it: reported
                continue
            body = []
            for following in lines[index + 2 :]:
                if following.strip().startswith("```"):
                    break
                body.append(following)
            snippets.append((name, index + 2, "\n".join(body) + "\n"))
    return snippets


def run_snippets(root: Path, bin_dir: str, announce: bool = True) -> list[str]:
    problems = []
    for name, number, body in runnable_snippets(root):
        if not body.strip():
            problems.append(f"{name}:{number}: a runnable marker with no ```sh block right after it")
            continue
        if announce:
            print(f"== {name}:{number}: running the snippet", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="broker-docs-") as home:
            environment = {
                key: value for key, value in os.environ.items() if not key.startswith(("BROKER_", "DBUS_"))
            }
            environment.update(
                {
                    "HOME": home,
                    "BROKER_HOME": f"{home}/.config/broker",
                    "XDG_CONFIG_HOME": f"{home}/.config",
                    "XDG_DATA_HOME": f"{home}/.local/share",
                    "PATH": f"{os.path.abspath(bin_dir)}:{environment.get('PATH', '')}",
                    "BROWSER": "curl -sfL -o /dev/null",
                }
            )
            # The output goes to a file, not a pipe: a snippet's `&` servers keep their copy of it open, and the
            # snippet is over when its shell exits, not when they do.
            with open(f"{home}/output", "w+b") as log:
                process = subprocess.Popen(
                    ["bash", "-euo", "pipefail", "-c", body],
                    cwd=root,
                    env=environment,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    status = process.wait(timeout=SNIPPET_SECONDS)
                except subprocess.TimeoutExpired:
                    status = None
                finally:
                    try:
                        os.killpg(process.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    process.wait()
                log.seek(0)
                output = log.read()
            if status != 0:
                said = "did not finish in %d s" % SNIPPET_SECONDS if status is None else f"exited with {status}"
                problems.append(
                    f"{name}:{number}: the runnable snippet {said}; its output:\n"
                    + output.decode(errors="replace")[-6000:]
                )
    return problems


def self_test() -> list[str]:
    """Builds a small repository with one of each defect and checks that each is reported."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="broker-docs-self-test-") as folder:
        root = Path(folder)
        files = {
            "README.md": "# Top\n\n## A `code` heading\n\n## Repeat\n\n## Repeat\n\n"
            "[ok](docs/guide.md#second-part) [ok2](#a-code-heading) [ok3](#repeat-1) [web](https://example.com)\n"
            "[missing file](docs/nothing.md)\n"
            "[missing anchor](docs/guide.md#no-such-part)\n"
            "[outside](../shared/CONTRACT.md)\n"
            "[untracked](notes.txt)\n"
            "`[not a link](nowhere.md)`\n\n```sh\n[in code](nowhere.md)\n```\n\n"
            "<!-- runnable -->\n```sh\nexit 3\n```\n\n<!-- runnable -->\n```sh\necho fine\n```\n",
            "docs/guide.md": "# Guide\n\n## Second part\n\n![picture](shot.png) [back](../README.md#top)\n",
            "docs/shot.png": "png",
        }
        for path, content in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content)
        (root / "notes.txt").write_text("not committed")
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "add", *files], check=True)
        problems = check_links(root)
        expected = {
            "README.md:10: (docs/nothing.md): no such file": "a missing file",
            "README.md:11: (docs/guide.md#no-such-part): docs/guide.md has no heading": "a missing anchor",
            "README.md:12: (../shared/CONTRACT.md): outside the repository": "a link outside the repository",
            "README.md:13: (notes.txt): no such file in the repository": "an untracked file",
        }
        for prefix, what in expected.items():
            if not any(problem.startswith(prefix) for problem in problems):
                failures.append(f"self-test: {what} was not reported (got {problems})")
        if len(problems) != len(expected):
            failures.append(f"self-test: expected {len(expected)} link problems, got {problems}")
        snippet_problems = run_snippets(root, "/nonexistent", announce=False)
        if len(snippet_problems) != 1 or "exited with 3" not in snippet_problems[0]:
            failures.append(f"self-test: the failing snippet (and only it) should be reported, got {snippet_problems}")
    return failures


def main() -> int:
    arguments = sys.argv[1:]
    if not arguments or arguments[0] not in ("links", "run", "self-test"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 64
    if arguments[0] == "self-test":
        problems = self_test()
    else:
        problems = check_links(ROOT)
        if arguments[0] == "run":
            if len(arguments) != 3 or arguments[1] != "--bin":
                print("usage: scripts/check-docs.py run --bin DIR", file=sys.stderr)
                return 64
            if not problems:
                problems = run_snippets(ROOT, arguments[2])
    for problem in problems:
        print(f"check-docs: {problem}", file=sys.stderr)
    if not problems:
        print(f"check-docs: {arguments[0]}: ok", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
