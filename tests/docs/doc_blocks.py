"""The fenced examples of README.md and docs/*.md, and how the doc-test harness reads them.

Every fenced block either runs (tests/docs/test_doc_examples.py executes it, in order, against a live
server) or carries a marker on the line right before its fence (an HTML comment: invisible when rendered):

    <!-- doc-test: skip (why it cannot run here: a remote gateway, a GPU, a minutes-long job...) -->
    <!-- doc-test: output (what it is: output, a JSON body, a config, a layout, a synopsis) -->

``skip`` needs its reason. An unmarked block must be one the harness can run: ``bash``/``sh``/``shell``
(split into commands), ``console`` or a plain block whose lines start with ``$ `` (each command runs and
the output below it must match, ``...`` standing for anything), ``python``, or a plain block of shell
commands. Any other unmarked block (``json``, ``yaml``, ``text``) fails the test.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"^<!--\s*doc-test:\s*(\S+)\s*(.*?)\s*-->\s*$")
KINDS = ("skip", "output")
SHELL = ("bash", "sh", "shell")
SERVICE = re.compile(r"(localhost|127\.0\.0\.1):8000")
NEEDS_SERVER = re.compile(r"(localhost|127\.0\.0\.1):8000|--server |dpicl (datasets|budget|audit)\b")


def doc_paths() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository root
    line: int  # line of the opening fence, 1-based
    lang: str
    body: str
    marker: str | None  # "skip" | "output" | None (runs)
    reason: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def mode(self) -> str:
        """How an unmarked block runs: shell, console, python; "" when the harness cannot run it."""
        if self.lang in SHELL:
            return "shell"
        if self.lang == "python":
            return "python"
        if self.lang == "console" or (self.lang == "" and self.body.lstrip().startswith("$ ")):
            return "console"
        if self.lang == "":
            return "shell"
        return ""

    @property
    def needs_server(self) -> bool:
        return self.marker is None and bool(NEEDS_SERVER.search(self.body))


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        mk = MARKER.match(before)
        reason = mk.group(2).strip() if mk else ""
        if reason.startswith("(") and reason.endswith(")"):
            reason = reason[1:-1].strip()
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        out.append(Block(name, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                         mk.group(1) if mk else None, reason))
    return out


def problems(b: Block) -> str | None:
    """Why a block breaks the rule (None: it runs or is marked properly)."""
    if b.marker is None:
        return None if b.mode else (f"{b.where}: an unmarked ```{b.lang} block the harness cannot run: mark it "
                                    "<!-- doc-test: output (...) --> or <!-- doc-test: skip (reason) -->")
    if b.marker not in KINDS:
        return f"{b.where}: unknown doc-test marker {b.marker!r} (known: {', '.join(KINDS)})"
    if b.marker == "skip" and len(b.reason) < 8:
        return f"{b.where}: <!-- doc-test: skip --> needs its reason"
    return None


def shell_commands(block: str) -> list[str]:
    """Commands of a shell block: a command goes on while a quote is open or a line ends with a backslash;
    blank lines and comment lines between commands are dropped."""
    cmds, cur = [], ""
    for line in block.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line + "\n"
        if line.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(cur, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        cmds.append(cur.strip())
        cur = ""
    assert not cur, f"unterminated command: {cur!r}"
    return cmds


def console_steps(block: str) -> list[tuple[str, list[str]]]:
    """``$ command`` (continued by a trailing backslash) and the output lines shown below it."""
    steps: list[tuple[str, list[str]]] = []
    cont = False
    for line in block.splitlines():
        if cont:
            steps[-1] = (steps[-1][0] + "\n" + line, steps[-1][1])
        elif line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
        cont = (cont or line.startswith("$ ")) and line.rstrip().endswith("\\")
    return steps


def expected_exit(cmd: str) -> int:
    m = re.search(r"#\s*exit\s+(\d+)\s*$", cmd)
    return int(m.group(1)) if m else 0


_ANNOTATION = re.compile(r"^(.*?\S)\s{2,}\(.*\)$")


def _line_pattern(line: str) -> re.Pattern[str]:
    norm = " ".join(line.split())
    return re.compile(".*".join(re.escape(p) for p in norm.split("...")).replace("\\ ", r"\s+"))


def line_matches(doc_line: str, actual: str) -> bool:
    """A shown output line matches a real one: whitespace runs are equal, ``...`` stands for anything, and a
    note in parentheses after two spaces (``epsilon  32.77   (BBGHS; ...)``) is the doc's, not the tool's."""
    actual = " ".join(actual.split())
    cands = [doc_line]
    m = _ANNOTATION.match(doc_line.strip())
    if m:
        cands.append(m.group(1))
    return any(_line_pattern(c).fullmatch(actual) for c in cands)


def output_mismatch(shown: list[str], actual: str) -> str | None:
    """None when every shown line (bar ``...`` lines) matches a real output line, in order."""
    real = [x for x in actual.splitlines() if x.strip()]
    shown = [x for x in shown if x.strip() != "..."]
    if shown and shown[0].lstrip().startswith("{"):
        import json

        try:
            return None if json.loads("\n".join(shown)) == json.loads(actual) else "the JSON differs"
        except ValueError as e:
            return f"not JSON: {e}"
    i = 0
    for want in shown:
        while i < len(real) and not line_matches(want, real[i]):
            i += 1
        if i == len(real):
            return f"no output line matches {want!r} (in order)"
        i += 1
    return None


# Filled by tests/docs/test_doc_examples.py, printed by tests/docs/conftest.py's terminal summary:
# "static" -> (unmarked, skip, output, total); (doc, database kind or "-") -> {"ran", "skip", "output"}.
TALLY: dict = {}


def summary_line() -> str:
    lines = []
    if "static" in TALLY:
        run, skip, out, total = TALLY["static"]
        lines.append(f"doc examples: {run} run, {skip} marked not runnable, {out} output "
                     f"({total} fenced blocks in README.md and docs/*.md)")
    for kind in sorted({k[1] for k in TALLY if k != "static"}):
        done = {k[0]: v for k, v in TALLY.items() if k != "static" and k[1] == kind}
        where = "without a server" if kind == "-" else f"against a live server on {kind}"
        lines.append(f"doc examples ran {where}: {sum(v['ran'] for v in done.values())} blocks of "
                     f"{len(done)} docs (" + ", ".join(f"{d} {v['ran']}/{v['skip']}/{v['output']}"
                                                      for d, v in sorted(done.items())) + "; ran/skip/output)")
    return "\n".join(lines)
