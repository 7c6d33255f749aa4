"""`blackops version upload` / `deploy` read only regular files inside the folder (found by a
defect hunt, stop 34): a FIFO named ``*.py`` hung the upload for ever, a link to a file
outside the folder uploaded that file, and a huge file was read whole before the bundle's
size check. Each is now one clear ``invalid_request`` before anything is read."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from blackops.cli.deploy import read_modules
from blackops.control.bundles import MAX_SOURCE_BYTES
from domain.errors import InvalidRequest

FLOW = "class Flow:\n    pass\n"


def folder(tmp_path: Path) -> Path:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "workflows.py").write_text(FLOW)
    return flows


def refusal(path: Path) -> str:
    answers: list[BaseException] = []

    def read() -> None:
        try:
            read_modules(str(path))
        except BaseException as error:
            answers.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert answers, "the read never ended"
    assert isinstance(answers[0], InvalidRequest), answers[0]
    return str(answers[0])


def test_a_fifo_is_refused_not_waited_for(tmp_path: Path) -> None:
    flows = folder(tmp_path)
    os.mkfifo(flows / "zz_fifo.py")
    assert "is not a regular file" in refusal(flows)


def test_a_link_out_of_the_folder_is_refused_one_inside_is_read(tmp_path: Path) -> None:
    flows = folder(tmp_path)
    (tmp_path / "secret.py").write_text("TOKEN = 'x'\n")
    (flows / "leak.py").symlink_to(tmp_path / "secret.py")
    assert "outside" in refusal(flows)
    (flows / "leak.py").unlink()
    (flows / "alias.py").symlink_to(flows / "workflows.py")
    assert read_modules(str(flows)) == {"alias": FLOW, "workflows": FLOW}


def test_files_over_the_bundle_size_are_refused_before_they_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flows = folder(tmp_path)
    with open(flows / "huge.py", "wb") as huge:
        huge.truncate(MAX_SOURCE_BYTES + 1)  # sparse: nothing to read until it is read
    read: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *args: object, **kwargs: object) -> str:
        read.append(self)
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counted)
    assert "exceed" in refusal(flows)
    assert not [path for path in read if path.name == "huge.py"]
