"""The documentation stays true to the code: docs/tables.md documents every sink table and column
(and nothing else), every relative link and repository path in README.md and docs/*.md resolves
(a link's `#anchor` to a heading of its page), and the example queries of the tables page run
against an empty sink. Pure Python: no Spark, no Kafka."""
import re
import sqlite3
from pathlib import Path
from urllib.parse import unquote

import pytest

from streaming.sinks import TABLES, open_sink

ROOT = Path(__file__).resolve().parents[1]
TABLES_PAGE = ROOT / "docs" / "tables.md"
# a word of an inline-code span that starts with one of these is taken for a path in the repository
PATH_PREFIXES = ("streaming/", "producers/", "tests/", "infra/", "schemas/", "docs/",
                 "LICENSE", "Makefile", "pyproject.toml", "README.md")
# paths the user's own runs create (`make run`, `make setup`): not in a checkout (.gitignore keeps
# them out), so the docs may name them although they do not exist here
CREATED_PATHS = ("var/", ".venv/")
WILDCARDS = set("*?[]{}<>…|$")

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINK_TEXT = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks."""
    out, fenced = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line.lstrip())
        if fenced is None and opening:
            fenced = opening.group(1)
        elif fenced is not None and line.lstrip().startswith(fenced):
            fenced = None
        elif fenced is None:
            out.append((number, line))
    return out


def markdown_files() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


# ------------------------------------------------------------------------ the tables page
def sections(text: str) -> dict[str, list[str]]:
    """The lines under each `## ` heading (outside code blocks), by heading."""
    out: dict[str, list[str]] = {}
    current = None
    for _number, line in prose_lines(text):
        if line.startswith("## "):
            current = line[3:].strip()
            assert current not in out, f"docs/tables.md has two sections `## {current}`"
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def column_table(lines: list[str]) -> list[str] | None:
    """The first column of the section's `| column | type | meaning |` table (backticks removed),
    or None if the section has no such table."""
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|") and [c.lower() for c in cells(line)][:3] == ["column", "type", "meaning"]:
            names = []
            for row in lines[i + 2:]:                       # past the header and its |---| line
                if not row.lstrip().startswith("|"):
                    break
                names.append(cells(row)[0].strip("`").strip())
            return names
    return None


def test_every_sink_table_and_column_is_documented_and_nothing_else():
    documented = sections(TABLES_PAGE.read_text())
    missing, extra = sorted(set(TABLES) - set(documented)), sorted(set(documented) - set(TABLES))
    assert not missing and not extra, (f"docs/tables.md: tables without a `## name` section: {missing}; "
                                       f"sections that are no sink table: {extra}")
    problems = []
    for name, table in TABLES.items():
        names = column_table(documented[name])
        if names is None:
            problems.append(f"{name}: no `| column | type | meaning |` table")
            continue
        want = table.column_names
        lacking = [c for c in want if c not in names]
        unknown = [c for c in names if c not in want]
        twice = sorted({c for c in names if names.count(c) > 1})
        if lacking or unknown or twice:
            problems.append(f"{name}: columns not documented {lacking}, documented but not in the table {unknown}"
                            + (f", documented twice {twice}" if twice else ""))
        elif names != want:
            problems.append(f"{name}: columns documented in another order than the table's: {names}, not {want}")
    assert not problems, "docs/tables.md:\n  " + "\n  ".join(problems)


def test_the_column_types_in_the_tables_page_are_the_tables():
    """The type column says the table's type (text, bigint, double, bool, bytes, timestamp, json)."""
    documented = sections(TABLES_PAGE.read_text())
    problems = []
    for name, table in TABLES.items():
        lines = documented.get(name, [])
        types = dict(table.columns)
        for i, line in enumerate(lines):
            if line.lstrip().startswith("|") and [c.lower() for c in cells(line)][:3] == ["column", "type", "meaning"]:
                for row in lines[i + 2:]:
                    if not row.lstrip().startswith("|"):
                        break
                    column, written = cells(row)[0].strip("`"), cells(row)[1].strip("`")
                    if column in types and written != types[column]:
                        problems.append(f"{name}.{column}: documented as {written!r}, the table says {types[column]!r}")
                break
    assert not problems, "docs/tables.md:\n  " + "\n  ".join(problems)


# ------------------------------------------------------------------------ links and paths
def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: its rendered text (a link's text, no backticks) in
    lower case, punctuation other than '-' and '_' dropped, each space a '-'."""
    text = LINK_TEXT.sub(r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown page: its headings' slugs (a repeated one as GitHub numbers it:
    `name`, `name-1`, ...) and any `<a name=...>` or `<a id=...>`."""
    found, seen = set(), {}
    for _number, line in prose_lines(path.read_text()):
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
        found.update(HTML_ANCHOR.findall(line))
    return found


def repository_paths(span: str) -> list[str]:
    """The words of an inline-code span that name a path: each starts with one of PATH_PREFIXES
    or CREATED_PATHS and holds no wildcard or placeholder (an option's `--name=value` is its value)."""
    words = (w.rpartition("=")[2].strip("\"'(),;") for w in span.split())
    return [w for w in words if w.startswith(PATH_PREFIXES + CREATED_PATHS) and not WILDCARDS & set(w)]


def broken_references(path: Path) -> list[str]:
    """Every relative link target (from the file's folder), every link's anchor (a heading of the
    page it points to) and every inline-code repository path (from the repository root) in a
    markdown file that does not resolve, as `file:line: what`."""
    where = path.relative_to(ROOT)
    out = []
    for number, line in prose_lines(path.read_text()):
        targets = [m.group(1) for m in LINK.finditer(line)]
        ref = REFERENCE.match(line)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            target = target.strip("<>").strip()
            if not target or SCHEME.match(target):
                continue                                    # http(s):, mailto:, ...
            file_part, _, anchor = target.partition("#")
            file_part = unquote(file_part.split("?", 1)[0])
            page = path.parent / file_part if file_part else path
            if not page.exists():
                out.append(f"{where}:{number}: link ({target}) does not resolve")
            elif anchor and page.suffix == ".md" and unquote(anchor) not in anchors(page):
                out.append(f"{where}:{number}: link ({target}): no such heading in {page.relative_to(ROOT)}")
        for m in CODE_SPAN.finditer(line):
            for word in repository_paths(m.group(2)):
                if word.startswith(CREATED_PATHS):
                    continue
                file_part = word.split("::", 1)[0]          # a pytest node id names its file
                if not (ROOT / file_part).exists():
                    out.append(f"{where}:{number}: path `{word}` does not exist")
    return out


def test_the_paths_the_docs_may_name_without_a_file_are_not_the_repositorys():
    ignored = {line.strip().lstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()}
    assert set(CREATED_PATHS) <= ignored, f"not ignored by .gitignore: {set(CREATED_PATHS) - ignored}"


def test_every_relative_link_and_path_in_the_docs_resolves():
    broken = [b for path in markdown_files() for b in broken_references(path)]
    if broken:
        print("\n".join(broken))
    assert not broken, "links and paths that do not resolve:\n  " + "\n  ".join(broken)


# ------------------------------------------------------------------------ the examples
def sql_examples(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every ```sql block."""
    out, block, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if block is None and re.fullmatch(r"```\s*sql", stripped, re.IGNORECASE):
            block, start = [], number
        elif block is not None and stripped.startswith("```"):
            out.append((start, "\n".join(block)))
            block = None
        elif block is not None:
            block.append(line)
    assert block is None, f"docs/tables.md: the ```sql block at line {start} is not closed"
    return out


def test_the_examples_in_the_tables_page_run(tmp_path):
    path = tmp_path / "s.db"
    open_sink(f"sqlite:///{path}").close()                  # every table, empty
    examples = sql_examples(TABLES_PAGE.read_text())
    assert examples, "docs/tables.md has no ```sql examples"
    failures = []
    conn = sqlite3.connect(path)
    try:
        for line, sql in examples:
            try:
                conn.executescript("BEGIN;\n" + sql + "\nROLLBACK;") if _writes(sql) else conn.execute(sql).fetchall()
            except sqlite3.Error as exc:
                failures.append(f"line {line}: {exc}\n{sql}")
    finally:
        conn.close()
    assert not failures, "docs/tables.md examples that do not run on SQLite:\n" + "\n".join(failures)


def _writes(sql: str) -> bool:
    """More than one statement, or one that is not a query: run as a script, then rolled back."""
    body = sql.strip().rstrip(";")
    return ";" in body or not re.match(r"(?is)^\s*(--[^\n]*\n\s*)*(SELECT|WITH)\b", body)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_has_an_example(name):
    """Each table's section holds at least one ```sql example that names the table."""
    text = TABLES_PAGE.read_text()
    lines = text.splitlines()
    starts = {line.strip()[3:].strip(): i for i, line in enumerate(lines) if line.startswith("## ")}
    begin = starts.get(name)
    assert begin is not None, f"docs/tables.md has no `## {name}` section"
    after = [i for i in starts.values() if i > begin]
    section = "\n".join(lines[begin:min(after) if after else len(lines)])
    blocks = [sql for _line, sql in sql_examples(section)]
    assert any(re.search(rf"\b{name}\b", sql) for sql in blocks), f"docs/tables.md: `## {name}` has no example on it"


# ---------------------------------------------------------------- the README's runnable blocks
RUNNABLE = "<!-- runnable"


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block whose opening line follows a `<!-- runnable ... -->`
    line: what a user is told to type after `make run`, in the project's folder."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip().startswith(RUNNABLE) and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            language, end = lines[i + 1][3:].strip(), lines.index("```", i + 2)
            out.append((language, "\n".join(lines[i + 2:end])))
    return out


def run_readme_blocks(folder: Path) -> list[str]:
    """Runs the README's runnable blocks in `folder`, which holds what `make run` leaves (.venv/bin,
    var/truth.json, var/dirstream.db): sh blocks with bash -e, sql blocks against var/dirstream.db.
    Returns what each printed."""
    import subprocess
    printed = []
    for language, code in runnable_blocks((ROOT / "README.md").read_text()):
        if language == "sh":
            done = subprocess.run(["bash", "-e", "-c", code], cwd=folder, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"README block failed:\n{code}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            printed.append(done.stdout)
        else:
            with sqlite3.connect(folder / "var" / "dirstream.db") as conn:
                printed.append(repr(conn.execute(code).fetchall()))
    return printed


def test_the_readme_marks_its_quick_start_blocks_runnable():
    """The blocks the README marks runnable are shell or SQL (test_dashboard runs them over a
    finished run's sink); the quick start has at least a verify and a query."""
    blocks = runnable_blocks((ROOT / "README.md").read_text())
    assert {language for language, _ in blocks} == {"sh", "sql"}, blocks
    assert any("dirstream verify" in code for _, code in blocks)


# ---------------------------------------------------------------------------- troubleshooting
MESSAGE_BLOCK = re.compile(r"^```message\n(.*?)^```", re.MULTILINE | re.DOTALL)
FORMAT_SPEC = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfx]")


def code_strings() -> list[str]:
    """Every string the project's code can print, its variable parts as `…`: f-strings' fields and
    %-style specifications (log lines). Adjacent literals are one string (the parser joins them)."""
    import ast
    out = []
    for top in ("streaming", "producers", "infra"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.JoinedStr):
                    out.append("".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out.append(FORMAT_SPEC.sub("…", node.value))
    return out


def unquoted(lines: list[str], strings: list[str]) -> list[str]:
    """The fixed parts of the lines (between the `…` that stand for what depends on the run) that no
    string of the code holds: each part is a piece of a string, or a string with its fields filled
    in (its fixed text most of the part), after the prefix of a wrapper that prints another
    message after it (f"dirstream run: {exc}")."""
    wrappers = sorted({s.rstrip("…") for s in strings if re.fullmatch(r"[^…]{4,30}…+", s)}, key=len, reverse=True)
    patterns = [(len(s) - s.count("…"), re.compile(".+?".join(map(re.escape, s.split("…"))))) for s in strings
                if "…" in s]
    missing = []
    for line in lines:
        for part in (p.strip() for p in line.split("…")):
            part = next((part[len(w):] for w in wrappers if part.startswith(w) and len(part) > len(w)), part)
            quoted = any(part in s for s in strings)
            shown = any(fixed >= 0.6 * len(part) and p.fullmatch(part) for fixed, p in patterns)
            if len(part) >= 4 and not (quoted or shown):
                missing.append(f"{part!r} (of {line!r})")
    return missing


def test_every_message_the_troubleshooting_page_quotes_is_in_the_code():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    blocks = MESSAGE_BLOCK.findall(text)
    assert len(blocks) >= 8
    missing = unquoted([line for block in blocks for line in block.splitlines() if line.strip()], code_strings())
    assert not missing, "quoted on docs/troubleshooting.md but in no string of the code:\n" + "\n".join(missing)


def test_the_troubleshooting_checker_finds_a_message_the_code_does_not_print():
    strings = code_strings()
    assert any("did not answer for … s" in s for s in strings)           # an f-string's fixed parts
    assert any("does not answer (…); waiting up to … s" in s for s in strings)     # a log line's
    java = "dirstream run: Java (17 or later) is needed for Spark and was not found: install it " \
           "(apt-get install default-jre-headless) or set JAVA_HOME"
    assert unquoted([java, "Kafka at … does not answer (…); waiting up to … s"], strings) == []
    assert unquoted([java.replace("was not found", "was missing")], strings)
    assert unquoted(["dirstream run: the broker is on holiday"], strings)
