"""The project's own code as one zip that the job ships to Spark executors itself
(SparkContext.addPyFile), so the workers of a real cluster need only Python and the third-party
dependencies: the packages `streaming` (with its Avro schemas as streaming/schemas/*.avsc, read
with importlib.resources) and `producers`, whatever way they are installed here."""
import hashlib
import io
import zipfile
from importlib import resources
from pathlib import Path

from ..wire.envelope import SCHEMA_IDS, schema_text

__all__ = ["archive_bytes", "PACKAGES", "write_code_archive"]

PACKAGES = ("streaming", "producers")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)               # same bytes for the same code: a stable file name


def _package_files(package: str):
    root = resources.files(package)
    stack = [(root, package)]
    while stack:
        folder, prefix = stack.pop()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and entry.name != "__pycache__":
                stack.append((entry, f"{prefix}/{entry.name}"))
            elif entry.is_file() and entry.name.endswith((".py", ".avsc")):
                yield f"{prefix}/{entry.name}", entry.read_bytes()


def archive_bytes() -> bytes:
    files = dict(f for package in PACKAGES for f in _package_files(package))
    for name in SCHEMA_IDS:                         # a source checkout keeps them in schemas/
        files.setdefault(f"streaming/schemas/{name}.avsc", schema_text(name).encode("utf-8"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname in sorted(files):
            zf.writestr(zipfile.ZipInfo(arcname, _FIXED_TIME), files[arcname])
    return buf.getvalue()


def write_code_archive(directory: Path) -> Path:
    """The archive under `directory`, named after its content's digest (written once per content)."""
    data = archive_bytes()
    path = Path(directory) / f"msmq-dirstream-code-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
