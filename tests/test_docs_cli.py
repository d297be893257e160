"""docs/running.md and the `dirstream` command's own help agree with the command's parsers.

The parsers are built in-process (`streaming.apps.cli.build_parser`): no subprocess, no Spark, no
Kafka. Rules the page follows, checked here:

- every subcommand, at every level, has a section headed `## dirstream <path>` (the command itself
  `## dirstream`), and every `## dirstream ...` heading names a subcommand that exists;
- a section's flags are the rows of its one table headed `| flag | default | meaning |`, each
  first cell one name in backticks: an option by its long form(s) (`--max-records`), spelled with
  its dashes exactly as argparse has it; an option that has only a short form by that form; a
  short alias of an option with a long form is not listed (none exists today); a positional
  argument by its argparse name (`files`, `action`); -h/--help is never listed. A section without
  such a table documents no flags (`dirstream produce`);
- the default column shows the parser's default, in backticks, for every option whose default is
  a value (not None, off, an empty list or suppressed);
- every `dirstream ...` line of the sh blocks of this page and of every other docs/*.md page (the
  configuration and deployment pages hold examples too) and of the help epilogs parses.

And, for README.md, every docs/*.md and every .py file of streaming/, producers/, tests/ and
infra/: none cites an issue number or a path into the spec texts kept beside the checkout.
"""
import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

from streaming.apps.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
RUNNING = ROOT / "docs" / "running.md"
TABLE_HEADER = ["flag", "default", "meaning"]
SHELL_OPERATORS = {">", ">>", "2>&1", "&", "&&", "|", ";", "<"}


def parsers(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()):
    """(path, parser) for the command and every subcommand below it, depth first."""
    parser = parser or build_parser()
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, path + (name,))


def documented_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The names the page must list for this parser (see the module's rules), each with its action."""
    names = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if not action.option_strings:
            names[action.dest] = action
            continue
        long_forms = [o for o in action.option_strings if o.startswith("--")]
        for option in long_forms or action.option_strings:
            names[option] = action
    return names


def sections(text: str) -> dict[str, list[str]]:
    """The page's level-2 sections: heading text -> the lines below it (code blocks skipped for headings)."""
    found: dict[str, list[str]] = {}
    current = None
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = line[3:].strip()
            assert current not in found, f"heading '## {current}' appears twice in {RUNNING.name}"
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


def cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def flag_table(lines: list[str], heading: str) -> dict[str, str]:
    """The section's `| flag | default | meaning |` table: flag -> default cell ({} without one)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == TABLE_HEADER]
    assert len(starts) <= 1, f"'## {heading}' has {len(starts)} flag tables"
    if not starts:
        return {}
    rows: dict[str, str] = {}
    for line in lines[starts[0] + 2:]:
        if not line.startswith("|"):
            break
        first, default = cells(line)[:2]
        match = re.fullmatch(r"`([^`\s]+)`", first)
        assert match, f"'## {heading}': a flag cell is one name in backticks, got {first!r}"
        assert match[1] not in rows, f"'## {heading}' lists {match[1]} twice"
        rows[match[1]] = default
    return rows


def dirstream_sections() -> dict[tuple[str, ...], tuple[str, list[str]]]:
    return {tuple(h.split()[1:]): (h, lines) for h, lines in sections(RUNNING.read_text()).items()
            if h.split()[0] == "dirstream"}


def test_every_subcommand_and_flag_is_documented_and_every_documented_one_exists():
    documented = dirstream_sections()
    tree = dict(parsers())
    missing = [" ".join(("dirstream",) + p) for p in tree if p not in documented]
    assert not missing, f"{RUNNING.name} has no section for: {missing}"
    unknown = [h for p, (h, _) in documented.items() if p not in tree]
    assert not unknown, f"{RUNNING.name} documents subcommands that do not exist: {unknown}"
    for path, parser in tree.items():
        heading, lines = documented[path]
        table = set(flag_table(lines, heading))
        actual = set(documented_actions(parser))
        assert not actual - table, f"'## {heading}' does not list {sorted(actual - table)}"
        assert not table - actual, f"'## {heading}' lists flags {parser.prog} does not have: {sorted(table - actual)}"


def test_documented_defaults_are_the_parsers():
    documented = dirstream_sections()
    for path, parser in parsers():
        if path not in documented:
            continue                              # reported by the test above
        heading, lines = documented[path]
        table = flag_table(lines, heading)
        for name, action in documented_actions(parser).items():
            if name not in table:
                continue                          # reported by the test above
            if action.required:
                assert table[name] == "required", f"'## {heading}': {name} is required"
                continue
            if action.default in (None, False, [], argparse.SUPPRESS):
                continue
            assert f"`{action.default}`" in table[name], \
                f"'## {heading}': the default of {name} is {action.default!r}, the page says {table[name]!r}"


def help_examples(text: str) -> list[str]:
    """The `dirstream ...` lines that follow a line starting with "example" in a help text."""
    lines = text.splitlines()
    examples = []
    for i, line in enumerate(lines):
        if line.lower().startswith("example"):
            for following in lines[i + 1:]:
                if not following.startswith("  dirstream "):
                    break
                examples.append(following.strip())
    return examples


def test_every_help_has_a_description_and_an_example():
    for path, parser in parsers():
        text = parser.format_help()
        description = (parser.description or "").strip()
        assert description, f"{parser.prog} has no description"
        first = description.splitlines()[0].strip()
        assert first and first in text.splitlines(), f"{parser.prog}: its description's first line is not one line " \
                                                     f"of its help: {first!r}"
        examples = help_examples(text)
        assert examples, f"{parser.prog} --help has no 'example' followed by a line starting with '  dirstream '"
        for example in examples:
            assert example == parser.prog or example.startswith(parser.prog + " "), \
                f"{parser.prog} --help shows an example of another command: {example!r}"


def shell_commands(text: str) -> list[str]:
    """The `dirstream ...` commands of a page's sh blocks (continuation lines joined)."""
    commands, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = line.strip() == "```sh" if not fenced else False
            continue
        if not fenced:
            continue
        line = pending + line
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.startswith("dirstream "):
            commands.append(line)
    return commands


def parses(command: str) -> str:
    """'' if `command` (a `dirstream ...` line) parses, else argparse's message."""
    words = shlex.split(command, comments=True)[1:]
    for i, word in enumerate(words):
        if word in SHELL_OPERATORS:
            words = words[:i]
            break
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(words)
    except SystemExit as exc:
        return "" if exc.code == 0 else err.getvalue().strip()
    return ""


def test_every_example_parses():
    examples = shell_commands(RUNNING.read_text())
    assert len(examples) > 20
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page != RUNNING:
            examples += shell_commands(page.read_text())
    for _, parser in parsers():
        examples += help_examples(parser.format_help())
    failures = {e: message for e in examples if (message := parses(e))}
    assert not failures, failures


# a tracker reference: the word issue(s) and a number, with or without "#", or "#" and a number
# standing alone, as in "(#" or "see #"; not a colour, an anchor ("#1-setup"), a comment ("# 1")
# or a section number ("3.1.5.8.1")
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&#/\"'`-])#\d+(?![\w-]|\.\d)", re.IGNORECASE)
# a path into the spec texts kept beside the checkout, written as a path or built with "/"
SHARED = re.compile(r"\.\./shared\b|\bshared/spec|[\"']shared[\"']\s*/")
# the one line allowed to name that folder: the code line of tests/conftest.py that says where the
# tests look for the spec texts by default
SPEC_DEFAULT = ("tests/conftest.py", "SPEC = ")


def pages_and_sources() -> list[Path]:
    """README.md, docs/*.md, and every .py file of the code and the tests."""
    return ([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            + [p for top in ("streaming", "producers", "tests", "infra") for p in sorted((ROOT / top).rglob("*.py"))])


def test_no_page_or_source_names_an_issue_or_a_path_outside_the_repository():
    found = []
    for path in pages_and_sources():
        where = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{where}:{number}: issue number: {line.strip()}")
            if SHARED.search(line) and (where, line[:len(SPEC_DEFAULT[1])]) != SPEC_DEFAULT:
                found.append(f"{where}:{number}: path outside the repository: {line.strip()}")
    assert len(pages_and_sources()) > 100
    assert not found, "\n".join(found)
