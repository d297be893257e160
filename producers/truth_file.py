"""The ground truth's file: written as the simulator makes it, read back one section at a time.

Format (JSON lines, version 2). The first line is `{"dirstream_truth":2}`; every other line is a
JSON array whose first element names the section it belongs to:

- `[section, "items", [v, ...]]`: items of a list section (`dead_letters`, `dropped`, ...), in
  order; a section's lines concatenate;
- `[section, "entry", key, value]`: one entry of a mapping section (`partitions`, `discovery`,
  `queue_managers`, ...);
- `[section, "value", value]`: a section's whole value (`seed`, `counts`, `last_arrival_ms`, ...).

A reader that needs some sections skips the other lines by their first characters, without
decoding them. A file of the earlier format (one JSON object) is read too. Both are read into the
same dict: section -> value (the shape `producers.truth` documents).
"""
import json
import os
from typing import Callable, Iterable

__all__ = ["TruthWriter", "read_truth", "is_whole_object", "LIST_SECTIONS", "MAPPING_SECTIONS", "FORMAT_HEADER"]

FORMAT_HEADER = {"dirstream_truth": 2}
# the sections that are lists of items; every other section is a mapping or a single value
LIST_SECTIONS = ("dead_letters", "discarded_notifications", "dropped", "duplicates", "nacks", "attacks")
MAPPING_SECTIONS = ("servers", "partitions", "queue_managers", "discovery", "unreachable", "set_by")
ITEMS_PER_LINE = 1000


def _line(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"      # the C encoder


class TruthWriter:
    """Writes a truth file as it is made: items and entries go out as they are given (list items in
    lines of ITEMS_PER_LINE), so the writer holds nothing of the run. The file appears under its
    name only once closed (written beside it, then renamed): a reader never meets half a truth."""

    def __init__(self, path: str):
        self.path, self._partial = path, f"{path}.partial"
        self._fh = open(self._partial, "w")
        self._fh.write(_line(FORMAT_HEADER))
        self._held: dict[str, list] = {}
        self._written: set[str] = set()

    def item(self, section: str, value) -> None:
        held = self._held.setdefault(section, [])
        held.append(value)
        if len(held) >= ITEMS_PER_LINE:
            self._flush(section)

    def entry(self, section: str, key: str, value) -> None:
        self._written.add(section)
        self._fh.write(_line([section, "entry", key, value]))

    def value(self, section: str, value) -> None:
        self._written.add(section)
        self._fh.write(_line([section, "value", value]))

    def _flush(self, section: str) -> None:
        held = self._held.pop(section, [])
        if held or section not in self._written:
            self._fh.write(_line([section, "items", held]))
            self._written.add(section)

    def close(self) -> None:
        """Write what is held, an empty value for each list or mapping section never written (it is
        there, empty, rather than missing), and give the file its name."""
        for section in list(self._held) + [s for s in LIST_SECTIONS if s not in self._written]:
            self._flush(section)
        for section in MAPPING_SECTIONS:
            if section not in self._written:
                self.value(section, {})
        self._fh.close()
        os.replace(self._partial, self.path)

    def abandon(self) -> None:
        """The run failed: no truth file (a partial one would pass for the run's truth)."""
        self._fh.close()
        os.unlink(self._partial)


def is_whole_object(path: str) -> bool:
    """Whether the file is a truth of the earlier format (one JSON object, read only whole)."""
    with open(path, encoding="utf-8") as fh:
        return not fh.read(len('{"dirstream_truth"')) == '{"dirstream_truth"'


def read_truth(path: str, sections: Iterable[str] | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """The truth file's sections (all when sections is None), as one dict. progress(bytes read,
    file size) is called as the file is read."""
    wanted = None if sections is None else set(sections)
    size = os.path.getsize(path)
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
        if not first.startswith('{"dirstream_truth"'):
            first += fh.read()              # the earlier format: one JSON object
            truth = json.loads(first)
            if progress:
                progress(size, size)
            return truth if wanted is None else {k: v for k, v in truth.items() if k in wanted}
        version = json.loads(first)["dirstream_truth"]
        if version != FORMAT_HEADER["dirstream_truth"]:
            raise ValueError(f"{path}: truth format version {version}; this dirstream reads version "
                             f"{FORMAT_HEADER['dirstream_truth']} and the earlier single-object format")
        return _read_lines(fh, wanted, progress, size, len(first.encode()))


def _read_lines(fh, wanted: set[str] | None, progress, size: int, done: int) -> dict:
    truth: dict = {}
    reported = 0
    for number, line in enumerate(fh, start=2):
        done += len(line)               # characters: close to bytes for this ASCII-mostly file
        if progress and done - reported > size // 100:
            progress(min(done, size), size)
            reported = done
        section = line[2:line.index('"', 2)]
        if wanted is not None and section not in wanted:
            continue
        _, form, *rest = json.loads(line)
        if form == "items":
            truth.setdefault(section, []).extend(rest[0])
        elif form == "entry":
            truth.setdefault(section, {})[rest[0]] = rest[1]
        elif form == "value":
            truth[section] = rest[0]
        else:
            raise ValueError(f"truth file line {number}: unknown form {form!r} (items, entry or value)")
    if progress:
        progress(size, size)
    return truth
