"""The control-plane CLI (docs/resources.md): space, principal, token, worker, version,
deploy, deployment, workflow; ``serve``'s dev admin bootstrap; the guide's examples.

The CLI runs in-process (``blackops.cli.main.main``) on both stores; ``--json`` output is
exactly one JSON document; errors exit 1 with their taxonomy code.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blackops import Application
from blackops.cli.deploy import choose_main, read_modules
from blackops.cli.main import main
from blackops.cli.serve import bootstrap_dev_admin
from blackops.http.app import create_http_app
from domain.access import Role
from domain.context import Actor
from domain.errors import InvalidRequest, Unauthorized

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "resources.md"

FLOWS = (
    "from helpers import double\n"
    "\n"
    "\n"
    "class Flow:\n"
    "    def __init__(self, env):\n"
    "        self.env = env\n"
    "\n"
    "    async def run(self, event, step):\n"
    "        return await step.do('a', lambda: {'v': double(event.params['n'])})\n"
    "\n"
    "\n"
    "class Broken:\n"
    "    def __init__(self, env, extra):\n"
    "        pass\n"
    "\n"
    "    async def run(self, event, step):\n"
    "        return None\n"
)
HELPERS = "def double(n):\n    return 2 * n\n"


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> Any:
        """The one JSON document on stdout (fails if there is anything else)."""
        return json.loads(self.out)


@pytest.fixture
def cli(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Ran]:
    """``blackops ARGS --store STORE``, in-process; ``expect`` is the exit status."""
    monkeypatch.setenv("USER", "ana")

    def run(*args: str, expect: int | None = 0) -> Ran:
        capsys.readouterr()
        code = main([*args, "--store", store_url])
        captured = capsys.readouterr()
        ran = Ran(code, captured.out, captured.err)
        if expect is not None:
            assert code == expect, ran
        return ran

    return run


def two_module_folder(root: Path) -> Path:
    """A folder of two modules (one imports the other) plus what must be skipped."""
    folder = root / "flows"
    folder.mkdir()
    (folder / "flows.py").write_text(FLOWS)
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "flows.cpython-311.py").write_text("raise SystemExit\n")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "secret.py").write_text("x = (\n")
    (folder / ".editor.py").write_text("x = (\n")
    (folder / "README.txt").write_text("not code\n")
    return folder


def error_of(ran: Ran) -> str:
    assert ran.code == 1, ran
    return str(ran.doc["error"]["code"])


# -- reading a folder ------------------------------------------------------------------------


def test_read_modules_maps_paths_to_module_names_and_skips_noise(tmp_path: Path) -> None:
    """A folder becomes a Version's modules and main (what DW-ABI-1 then verifies)."""
    folder = two_module_folder(tmp_path)
    (folder / "lib").mkdir()
    (folder / "lib" / "__init__.py").write_text("")
    (folder / "lib" / "util.py").write_text("X = 1\n")
    modules = read_modules(str(folder))
    assert sorted(modules) == ["flows", "helpers", "lib", "lib.util"]
    assert modules["helpers"] == HELPERS and modules["lib"] == ""
    # The only top-level .py files are flows and helpers: no single one, no main/workflows.
    with pytest.raises(InvalidRequest, match="--main: one of flows, helpers"):
        choose_main(modules, None)
    assert choose_main({"flows": "", "lib": "", "lib.util": ""}, None) == "flows"
    assert choose_main({**modules, "workflows": ""}, None) == "workflows"
    assert choose_main({**modules, "main": "", "workflows": ""}, None) == "main"
    assert choose_main(modules, "helpers") == "helpers"
    with pytest.raises(InvalidRequest, match="not one of the modules"):
        choose_main(modules, "nope")


def test_read_modules_refuses_what_cannot_be_a_version(tmp_path: Path) -> None:
    """invalid_request before anything is sent (python-contract §3)."""
    with pytest.raises(InvalidRequest, match="not a folder"):
        read_modules(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("")
    with pytest.raises(InvalidRequest, match=r"no \.py files"):
        read_modules(str(tmp_path / "empty"))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    with pytest.raises(InvalidRequest, match="itself a package"):
        read_modules(str(tmp_path / "pkg"))
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "m.py").write_bytes(b"x = '\xe9'\n")
    with pytest.raises(InvalidRequest, match="UTF-8"):
        read_modules(str(tmp_path / "latin"))


@pytest.mark.parametrize(
    "command",
    [
        [], ["space", "create"], ["space", "list"], ["principal", "create"],
        ["principal", "grant"], ["principal", "revoke"], ["principal", "list"],
        ["token", "issue"], ["token", "revoke"], ["worker"], ["worker", "create"],
        ["worker", "list"], ["version", "upload"], ["deploy"], ["deployment", "show"],
        ["deployment", "set"], ["workflow", "create"], ["workflow", "get"],
        ["workflow", "list"], ["workflow", "replace"], ["workflow", "delete"],
    ],
)  # fmt: skip
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """python-contract §5: every command documents itself (exit 0)."""
    with pytest.raises(SystemExit) as exited:
        main([*command, "-h"])
    assert exited.value.code == 0 and "usage: blackops" in capsys.readouterr().out


def test_usage_errors_exit_two(capsys: pytest.CaptureFixture[str]) -> None:
    """A missing required flag is a usage error (2), not a taxonomy error."""
    with pytest.raises(SystemExit) as exited:
        main(["principal", "grant", "ana", "--space", "acme"])
    assert exited.value.code == 2 and "--role" in capsys.readouterr().err


# -- access commands ---------------------------------------------------------------------------


def test_space_principal_and_token_commands(cli: Callable[..., Ran], store_url: str) -> None:
    """Access from the CLI (python-contract §3 codes): the recorded actor is $USER/cli;
    tokens print once and are journaled only as hashes."""
    created = cli("space", "create", "acme", "--json").doc
    assert created["name"] == "acme" and "createdAt" in created
    assert cli("space", "create", "zeta").out == "space zeta created\n"
    assert error_of(cli("space", "create", "acme", "--json", expect=None)) == "conflict"
    assert cli("space", "list", "--json").doc == {"items": [{"name": "acme"}, {"name": "zeta"}]}
    assert cli("space", "list").out.split() == ["acme", "zeta"]

    ana = cli("principal", "create", "ana", "--json").doc
    assert ana == {"id": "ana", "system": False, "roles": {}, "tokens": []}
    assert cli("principal", "create", "root", "--system", "--json").doc["system"] is True
    assert error_of(cli("principal", "create", "ana", "--json", expect=None)) == "conflict"
    granted = cli("principal", "grant", "ana", "--space", "acme", "--role", "operator", "--json")
    assert granted.doc["roles"] == {"acme": "operator"}
    bad_role = cli("principal", "grant", "ana", "--space", "acme", "--role", "boss", "--json",
                   expect=None)  # fmt: skip
    assert error_of(bad_role) == "invalid_request" and "reader" in bad_role.doc["error"]["message"]
    assert "invalid_request" in cli("principal", "grant", "ana", "--space", "acme", "--role",
                                    "boss", expect=1).err  # fmt: skip
    nobody = cli("principal", "grant", "bob", "--space", "acme", "--role", "reader", "--json",
                 expect=None)  # fmt: skip
    assert error_of(nobody) == "not_found"
    no_space = cli("principal", "list", "--space", "nope", "--json", expect=None)
    assert error_of(no_space) == "not_found"
    assert cli("principal", "list", "--space", "acme", "--json").doc == {
        "items": [{"id": "ana", "role": "operator"}]
    }

    issued = cli("token", "issue", "ana", "--label", "laptop", "--json").doc
    assert set(issued) >= {"token", "tokenId"} and issued["label"] == "laptop"
    human = cli("token", "issue", "ana")
    plaintext = human.out.strip()
    assert plaintext.startswith("bo_") and "\n" not in plaintext and "shown once" in human.err
    with Application(store_url) as app:
        who = app.access.authenticate(issued["token"])
        assert who.id == "ana" and who.role_in("acme") is Role.OPERATOR
        assert app.access.authenticate(plaintext).id == "ana"
        # The journal records the CLI user as the actor, and never the plaintext.
        events = app.store.read_stream("principal-ana")
        assert {e.context["actor"]["kind"] for e in events} == {"cli"}
        assert {e.context["actor"]["id"] for e in events} == {"ana"}
        assert all(issued["token"] not in json.dumps(e.data) for e in events)

    revoked = cli("token", "revoke", "ana", issued["tokenId"], "--json").doc
    assert revoked["revoked"] is True
    assert error_of(cli("token", "revoke", "ana", "0" * 16, "--json", expect=None)) == "not_found"
    with Application(store_url) as app, pytest.raises(Unauthorized):
        app.access.authenticate(issued["token"])

    assert cli("principal", "revoke", "ana", "--space", "acme", "--json").doc["roles"] == {}
    assert cli("principal", "list", "--space", "acme").out.strip() == "no principals"


# -- Workers, Versions, Deployments --------------------------------------------------------


def test_worker_create_and_list_keep_the_store_and_json_given_to_worker(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``worker --store S --json create|list``: the subcommand's own defaults overwrote
    both, so the Worker went to the default journal (created in the current folder) and
    the answer was text (found by a defect hunt, stop 40)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BLACKOPS_STORE", raising=False)
    monkeypatch.setenv("USER", "ana")
    assert main(["space", "create", "acme", "--store", store_url]) == 0
    capsys.readouterr()
    assert main(["worker", "--store", store_url, "--json", "create", "w1", "--space", "acme"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert main(["worker", "--json", "--store", store_url, "list", "--space", "acme"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [w["uid"] for w in listed["items"]] == [made["resource"]["uid"]]
    assert main(["worker", "list", "--space", "acme", "--store", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == listed  # given to the subcommand: the same
    assert not (tmp_path / ".blackops").exists()


def test_worker_version_and_deployment_commands(cli: Callable[..., Ran], tmp_path: Path) -> None:
    """DW-ABI-1 verdict per class; content addressing; DW-SPEC-7 pending updates."""
    folder = two_module_folder(tmp_path)
    space = ("--space", "acme")
    # The control plane needs the Space: not_found before anything is recorded.
    assert error_of(cli("worker", "list", *space, "--json", expect=None)) == "not_found"
    cli("space", "create", "acme")
    made = cli("worker", "create", "shop", *space, "--json").doc
    assert made["status"] == "completed" and made["location"].endswith(made["operationId"])
    assert re.fullmatch(r"wk-[0-9a-f]{32}", made["resource"]["uid"])
    assert made["resource"]["name"] == "shop" and made["resource"]["space"] == "acme"
    assert error_of(cli("worker", "create", "shop", *space, "--json", expect=None)) == "conflict"
    assert error_of(cli("worker", "create", "bad name", *space, "--json", expect=None)) == (
        "invalid_request"
    )
    listed = cli("worker", "list", *space, "--json").doc["items"]
    assert [w["uid"] for w in listed] == [made["resource"]["uid"]]
    assert made["resource"]["uid"] in cli("worker", "list", *space).out

    unknown = cli("version", "upload", str(folder), *space, "--worker", "nope", "--main",
                  "flows", "--json", expect=None)  # fmt: skip
    assert error_of(unknown) == "not_found" and "nope" in unknown.doc["error"]["message"]
    uploaded = cli("version", "upload", str(folder), *space, "--worker", "shop",
                   "--main", "flows", "--json").doc  # fmt: skip
    assert uploaded["status"] == "completed"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", uploaded["version"])
    version = uploaded["resource"]
    assert version["modules"] == ["flows", "helpers"] and version["main"] == "flows"
    verdict = version["verification"]
    assert verdict["loaded"] is True and verdict["classes"]["Flow"]["ok"] is True
    assert verdict["classes"]["Broken"]["ok"] is False and verdict["classes"]["Broken"]["reason"]
    # The same folder again is the same Version (content-addressed), by UID too.
    uid = made["resource"]["uid"]
    again = cli("version", "upload", str(folder), *space, "--worker", uid, "--main", "flows",
                "--json").doc  # fmt: skip
    assert again["version"] == uploaded["version"]
    assert again["operationId"] == uploaded["operationId"]
    human = cli("version", "upload", str(folder), *space, "--worker", "shop", "--main", "flows")
    assert "Flow" in human.out and "ok" in human.out and "FAILED" in human.out

    env_file = tmp_path / "env.json"
    env_file.write_text('{"GREETING": "hi"}')
    pending = cli("version", "upload", str(folder), *space, "--worker", "shop", "--main",
                  "flows", "--env-file", str(env_file), "--no-wait", "--json").doc  # fmt: skip
    assert pending["status"] == "accepted" and pending["resource"]["verification"] is None
    assert pending["resource"]["env"] == {"GREETING": "hi"}
    assert pending["version"] != uploaded["version"]
    bad_env = tmp_path / "bad.json"
    bad_env.write_text("{nope")
    no_env = cli("version", "upload", str(folder), *space, "--worker", "shop", "--main",
                 "flows", "--env-file", str(bad_env), "--json", expect=None)  # fmt: skip
    assert error_of(no_env) == "invalid_request"
    bad_env.write_text('{"GREETING": "hi", "GREETING": "bye"}')  # which one would it hold?
    doubled = cli("version", "upload", str(folder), *space, "--worker", "shop", "--main",
                  "flows", "--env-file", str(bad_env), "--json", expect=None)  # fmt: skip
    assert error_of(doubled) == "invalid_request"

    show = cli("deployment", "show", *space, "--worker", "shop", "--json").doc
    assert show["allocation"] == [] and show["generation"] == 0 and show["pending"] == []
    v1, v2 = uploaded["version"], pending["version"]
    queued = cli("deployment", "set", *space, "--worker", "shop", f"{v1}=90", f"{v2}=10",
                 "--no-wait", "--json").doc  # fmt: skip
    assert queued["status"] == "accepted"
    shown = cli("deployment", "show", *space, "--worker", "shop", "--json").doc
    assert shown["allocation"] == [] and [p["operationId"] for p in shown["pending"]] == [
        queued["operationId"]
    ]
    assert "pending" in cli("deployment", "show", *space, "--worker", "shop").out
    applied = cli("deployment", "set", *space, "--worker", "shop", f"{v1}=100", "--key", "k1",
                  "--json").doc  # fmt: skip
    assert applied["status"] == "completed"
    assert applied["resource"]["allocation"] == [{"version": v1, "weight": 100}]
    for wrong in ([f"{v1}=50"], [f"{v1}=abc"], ["nonsense"], [f"{'sha256:' + '0' * 64}=100"]):
        refused = cli("deployment", "set", *space, "--worker", "shop", *wrong, "--json",
                      expect=None)  # fmt: skip
        assert error_of(refused) in ("invalid_request", "not_found"), wrong


def test_deploy_two_modules_end_to_end(
    cli: Callable[..., Ran], tmp_path: Path, store_url: str
) -> None:
    """deploy --create-worker --promote, workflow create (DW-CRUD-1, DW-OBS-1: observed,
    ready), then an instance of the Workflow resource completes via ``blackops wf``."""
    folder = two_module_folder(tmp_path)
    space = ("--space", "acme")
    cli("space", "create", "acme")
    missing = cli("deploy", str(folder), *space, "--worker", "shop", "--main", "flows",
                  "--json", expect=None)  # fmt: skip
    assert error_of(missing) == "not_found"  # no --create-worker: nothing is created
    assert cli("worker", "list", *space, "--json").doc["items"] == []
    # --check-histories out of range (a usage error) or without --promote: refused before
    # the Worker is created and the Version uploaded (found by a defect hunt, stop 40).
    deploying = ("deploy", str(folder), *space, "--worker", "shop", "--main", "flows",
                 "--create-worker", "--json")  # fmt: skip
    with pytest.raises(SystemExit) as usage:
        cli(*deploying, "--promote", "--check-histories", "100001")
    assert usage.value.code == 2
    assert error_of(cli(*deploying, "--check-histories", "5", expect=None)) == "invalid_request"
    assert cli("worker", "list", *space, "--json").doc["items"] == []

    done = cli("deploy", str(folder), *space, "--worker", "shop", "--main", "flows",
               "--create-worker", "--promote", "--json").doc  # fmt: skip
    assert done["worker"]["created"] is True and done["worker"]["name"] == "shop"
    assert done["verification"]["status"] == "completed" and done["verification"]["loaded"]
    assert done["verification"]["classes"]["Flow"]["ok"] is True
    assert done["verification"]["classes"]["Broken"]["ok"] is False
    assert done["modules"] == ["flows", "helpers"] and done["main"] == "flows"
    assert 0 < done["elapsedSeconds"] < 60
    assert done["deployment"]["status"] == "completed"
    assert done["deployment"]["resource"]["allocation"] == [
        {"version": done["version"], "weight": 100}
    ]
    human = cli("deploy", str(folder), *space, "--worker", "shop", "--main", "flows")
    assert done["version"] in human.out and "Flow" in human.out and " s " in human.out
    assert "not deployed yet" in human.out  # no --promote

    created = cli("workflow", "create", "orders", *space, "--worker", "shop", "--class", "Flow",
                  "--key", "orders-1", "--json").doc  # fmt: skip
    assert created["status"] == "completed"
    resource = created["resource"]
    uid = resource["uid"]
    assert re.fullmatch(r"wf-[0-9a-f]{32}", uid)
    # DW-SPEC-6: the name was resolved once, client-side; the spec holds the UID.
    assert resource["spec"] == {
        "worker": {"resourceUid": done["worker"]["uid"]},
        "className": "Flow",
    }
    assert resource["observed"]["ready"] is True and resource["observedGeneration"] == 1
    # The same Idempotency-Key is the same Operation and the same UID (DW-DEL-5 style).
    same = cli("workflow", "create", "orders", *space, "--worker", "shop", "--class", "Flow",
               "--key", "orders-1", "--json").doc  # fmt: skip
    assert same["operationId"] == created["operationId"] and same["resource"]["uid"] == uid

    assert cli("wf", "create", uid, "--id", "o-1", "--params", '{"n": 21}', "--json").doc == {
        "id": "o-1",
        "status": "queued",
    }
    with Application(store_url) as app:
        asyncio.run(app.work_until_idle())
    status = cli("wf", "status", uid, "o-1", "--json").doc
    assert status == {"status": "complete", "output": {"v": 42}}
    got = cli("workflow", "get", uid, *space, "--json").doc
    assert got["observed"]["instanceCounts"]["complete"] == 1


def test_deploy_exits_four_when_the_module_does_not_load(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    """DW-ABI-1: a main module that fails to import is a verdict, and deploy says so."""
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "flows.py").write_text("import helpers_that_do_not_exist\n")
    cli("space", "create", "acme")
    ran = cli("deploy", str(folder), "--space", "acme", "--worker", "w", "--create-worker",
              "--promote", "--json", expect=4)  # fmt: skip
    assert ran.doc["verification"]["loaded"] is False
    assert "helpers_that_do_not_exist" in ran.doc["verification"]["error"]
    assert "deployment" not in ran.doc  # never promoted
    shown = cli("deployment", "show", "--space", "acme", "--worker", "w", "--json").doc
    assert shown["allocation"] == [] and shown["pending"] == []
    human = cli("deploy", str(folder), "--space", "acme", "--worker", "w", expect=4)
    assert "NOT LOADED" in human.out


def test_workflow_commands_and_their_errors(cli: Callable[..., Ran], tmp_path: Path) -> None:
    """DW-SPEC-4, DW-SPEC-7, DW-CRUD-2, DW-DEL-2/4 from the CLI."""
    folder = two_module_folder(tmp_path)
    space = ("--space", "acme")
    cli("space", "create", "acme")
    cli("space", "create", "other")
    cli("deploy", str(folder), *space, "--worker", "shop", "--main", "flows",
        "--create-worker", "--promote")  # fmt: skip
    cli("worker", "create", "elsewhere", "--space", "other")

    def create(name: str, *flags: str, expect: int | None = 0) -> Ran:
        return cli("workflow", "create", name, *space, *flags, "--json", expect=expect)

    assert error_of(create("a", "--worker", "nope", "--class", "Flow", expect=None)) == (
        "not_found"
    )
    # Another Space's Worker is as unknown as none at all (DW-SPEC-4).
    assert error_of(create("a", "--worker", "elsewhere", "--class", "Flow", expect=None)) == (
        "not_found"
    )
    # The Deployment's Version has no valid class Broken (DW-SPEC-7, DW-ABI-1).
    conflict = create("a", "--worker", "shop", "--class", "Broken", expect=None)
    assert error_of(conflict) == "dependency_conflict"
    assert error_of(create("a", "--worker", "shop", "--class", "1nvalid", expect=None)) == (
        "invalid_request"
    )
    assert cli("workflow", "list", *space, "--json").doc == {"items": []}

    pending = create("orders", "--worker", "shop", "--class", "Flow", "--no-wait").doc
    assert pending["status"] == "accepted" and pending["resource"]["observed"] == {}
    uid = pending["resource"]["uid"]
    assert "not observed yet" in cli("workflow", "get", uid, *space).out
    replaced = cli("workflow", "replace", uid, *space, "--worker", "shop", "--class", "Flow",
                   "--json").doc  # fmt: skip
    assert replaced["status"] == "completed" and replaced["resource"]["generation"] == 2
    assert replaced["resource"]["observedGeneration"] == 2
    changed = cli("workflow", "replace", uid, *space, "--worker", "shop", "--class", "Broken",
                  "--json", expect=None)  # fmt: skip
    assert error_of(changed) == "invalid_request"  # DW-CRUD-2: same worker and className
    assert error_of(create("orders", "--worker", "shop", "--class", "Flow", expect=None)) == (
        "conflict"
    )
    listed = cli("workflow", "list", *space, "--json").doc["items"]
    assert [w["uid"] for w in listed] == [uid]
    assert "ready" in cli("workflow", "list", *space).out
    # Another Space does not see it.
    assert error_of(cli("workflow", "get", uid, "--space", "other", "--json", expect=None)) == (
        "not_found"
    )

    cli("wf", "create", uid, "--id", "left-queued")
    deleted = cli("workflow", "delete", uid, *space, "--json").doc
    assert deleted["status"] == "completed" and deleted["resource"]["deleted"] is True
    assert error_of(cli("workflow", "get", uid, *space, "--json", expect=None)) == "not_found"
    assert error_of(cli("wf", "status", uid, "left-queued", "--json", expect=None)) == ("not_found")
    # DW-DEL-4: no cascade; the name can be used again, for a new UID.
    assert len(cli("worker", "list", *space, "--json").doc["items"]) == 1
    again = create("orders", "--worker", "shop", "--class", "Flow").doc
    assert again["resource"]["uid"] != uid
    queued_delete = cli("workflow", "delete", again["resource"]["uid"], *space, "--no-wait",
                        "--json").doc  # fmt: skip
    assert queued_delete["status"] == "accepted"
    assert queued_delete["resource"]["deleting"] is True


def test_wf_commands_keep_working_for_local_workflows(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The --app group still lists and creates local workflows (examples.shop)."""
    assert main(["wf", "list", "--app", "examples.shop:app", "--json", "--store", store_url]) == 0
    listed = json.loads(capsys.readouterr().out)["workflows"]
    assert [w["uid"] for w in listed] == ["OrderApproval"]


# -- serve: the dev admin --------------------------------------------------------------------


def test_serve_bootstrap_prints_a_token_that_is_admin_of_default(
    store_url: str, tmp_path: Path
) -> None:
    """Space default, principal admin with role admin, a token kept 0600 and reused."""
    path = tmp_path / "state" / "admin-token"
    actor = Actor("ops", "cli")
    with Application(store_url) as app:
        first = bootstrap_dev_admin(app, actor, path)
        assert first["issued"] is True and first["space"] == "default"
        who = app.access.authenticate(first["token"])
        assert who.id == "admin" and who.role_in("default") is Role.ADMIN
        assert path.read_text().strip() == first["token"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        again = bootstrap_dev_admin(app, actor, path)
        assert again["token"] == first["token"] and again["issued"] is False
        assert again["tokenId"] == first["tokenId"]
        app.access.revoke_token("admin", first["tokenId"], app.access_context(actor, "default"))
    with Application(store_url) as app:  # a fresh authentication cache
        renewed = bootstrap_dev_admin(app, actor, path)
        assert renewed["issued"] is True and renewed["token"] != first["token"]
        assert app.access.authenticate(renewed["token"]).role_in("default") is Role.ADMIN
        assert path.read_text().strip() == renewed["token"]
        assert app.access.spaces() == ["default"]


def test_serve_banner_uses_the_admin_token(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``blackops serve`` prints the admin token (and the system token) and its curls use
    it; the served app accepts both. uvicorn is replaced: no server starts."""
    from blackops.cli import serve

    served: list[Any] = []
    monkeypatch.setattr(serve, "_run_uvicorn", lambda config, _, **__: served.append(config.app))
    monkeypatch.setenv("BLACKOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BLACKOPS_DEV_TOKEN", "")
    monkeypatch.delitem(sys.modules, "examples.shop", raising=False)  # a fresh app object
    args = ["serve", "--app", "examples.shop:app", "--store", store_url, "--no-worker",
            "--port", "0"]  # fmt: skip
    assert main(args) == 0
    banner = capsys.readouterr().out
    admin = (tmp_path / "home" / "admin-token").read_text().strip()
    system = (tmp_path / "home" / "dev-token").read_text().strip()
    assert f"export TOKEN={admin}" in banner and system in banner
    assert "/v1/spaces/default/workflows" in banner and "blackops deploy" in banner
    client = TestClient(served[0])
    for token in (admin, system):
        answer = client.get(
            "/v1/spaces/default/workflows", headers={"Authorization": f"Bearer {token}"}
        )
        # The example app's registered workflow is listed (read-only): the curl works.
        assert answer.status_code == 200
        assert [(i["uid"], i["registered"]) for i in answer.json()["items"]] == [
            ("OrderApproval", True)
        ]
    # A second start reuses the saved token; --json is one document naming both tokens.
    assert main([*args, "--json"]) == 0
    started = json.loads(capsys.readouterr().out)
    assert started["adminToken"] == admin and started["token"] == system


def test_serve_without_app_still_runs_a_worker(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --app the in-process worker still runs the control plane's operations."""
    from blackops.cli import serve

    # serve binds its socket itself, then hands it to uvicorn: nothing is served here.
    monkeypatch.setattr(serve, "_run_uvicorn", lambda config, listener, **_: None)
    monkeypatch.setenv("BLACKOPS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BLACKOPS_APP", raising=False)
    code = main(["serve", "--store", store_url, "--json", "--workflow-processes", "1",
                 "--port", "0"])  # fmt: skip
    assert code == 0
    assert json.loads(capsys.readouterr().out)["worker"] is not None


# -- the guide's examples (docs/resources.md) ------------------------------------------------

_CAPTURE = re.compile(r"^(\w+)=\$\((.*) \| jq -r (\S+)\)$")
_ECHO = re.compile(r"^echo '(.*)' > (\S+)$")


def _tested_blocks(kind: str) -> list[str]:
    text = DOCS.read_text()
    return re.findall(rf"<!-- tested: {kind} -->\n```sh\n(.*?)```", text, re.DOTALL)


def _lines(block: str) -> list[str]:
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip()]


def _jq(document: Any, path: str) -> str:
    for part in path.strip(".").split("."):
        document = document[part]
    return str(document)


def _substitute(line: str, names: dict[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: names.get(m.group(1), m.group(0)), line)


def _expected(line: str) -> int | None:
    """``# exit N`` / ``# NNN`` after a command: what it must answer."""
    comment = line.partition("  #")[2] or line.partition(" # ")[2]
    found = re.search(r"(?:exit )?(\d+)", comment)
    return int(found.group(1)) if found else None


def test_resources_guide_files_and_cli_examples_run(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/resources.md: every tested ``blackops`` line runs as written (a worker is
    simulated between blocks by ``work_until_idle``) and exits as its comment says."""
    text = DOCS.read_text()
    for path, source in re.findall(r"```python\n# file: (\S+)\n(.*?)```", text, re.DOTALL):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BLACKOPS_STORE", store_url)
    monkeypatch.setenv("USER", "ana")
    names: dict[str, str] = {}
    outputs: list[str] = []
    blocks = _tested_blocks("cli")
    assert len(blocks) >= 6
    for block in blocks:
        for line in _lines(block):
            line = _substitute(line, names)
            if echo := _ECHO.match(line):
                Path(echo.group(2)).write_text(echo.group(1) + "\n")
                continue
            capture = _CAPTURE.match(line)
            command = capture.group(2) if capture else line
            argv = shlex.split(command, comments=True)
            assert argv[0] == "blackops", line
            capsys.readouterr()
            code = main(argv[1:])
            out = capsys.readouterr().out
            outputs.append(out)
            assert code == (_expected(line) or 0), (line, out)
            if capture:
                names[capture.group(1)] = _jq(json.loads(out), capture.group(3))
        with Application(store_url) as app:  # the worker the guide asks for
            asyncio.run(app.work_until_idle())
    # What the guide says the instance printed.
    assert 'complete\noutput  {"order":"order-1","total":12}\n' in outputs
    assert re.fullmatch(r"wf-[0-9a-f]{32}", names["WF"])
    assert names["VID"] != names["CANARY"]


def test_resources_guide_http_examples_run(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/resources.md: the tested curl lines answer as their comments say, through the
    HTTP app with the dev admin token (404 for another Space, 403 for a too-low role)."""
    system = "bo_dev_system-token-for-the-test"
    with Application(store_url) as app:
        admin = bootstrap_dev_admin(app, Actor("ops", "cli"), tmp_path / "admin-token")
        client = TestClient(create_http_app(app, system))
        names = {"URL": "", "TOKEN": admin["token"], "SYSTEM": system}
        blocks = _tested_blocks("http")
        assert len(blocks) == 2
        answers = []
        for line in [line for block in blocks for line in _lines(block)]:
            if line.startswith("export "):
                continue
            line = _substitute(line, names)
            capture = _CAPTURE.match(line)
            argv = shlex.split(capture.group(2) if capture else line, comments=True)
            assert argv[0] == "curl", line
            method, url, headers, body = "GET", "", {}, None
            items = iter(argv[1:])
            for item in items:
                if item == "-X":
                    method = next(items)
                elif item == "-H":
                    key, _, value = next(items).partition(": ")
                    headers[key] = value
                elif item == "-d":
                    body = next(items)
                elif item != "-s":
                    url = item
            answer = client.request(method, url, headers=headers, content=body)
            expected = _expected(line)
            if expected is None:
                assert answer.is_success, (line, answer.text)
            else:
                assert answer.status_code == expected, (line, answer.text)
            answers.append(answer)
            if capture:
                names[capture.group(1)] = _jq(answer.json(), capture.group(3))
            asyncio.run(app.work_until_idle())  # the server's worker
        [instance] = [a for a in answers if a.request.url.path.endswith("/instances/h-1")]
        assert instance.json() == {"status": "complete", "output": {"hi": "ana"}}
        assert answers[-1].status_code == 202


def test_resources_guide_python_example_runs() -> None:
    """docs/resources.md: the Python example runs as written (its asserts are the checks)."""
    text = DOCS.read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "asyncio.run" in b]
    exec(compile(block, "docs/resources.md", "exec"), {"__name__": "docs_resources"})


# -- a product finding -------------------------------------------------------------------------


def test_http_system_token_gets_not_found_for_a_missing_space(store_url: str) -> None:
    """The access rule (docs/resources.md): a missing Space is 404, for everyone."""
    with Application(store_url) as app:
        client = TestClient(create_http_app(app, "bo_dev_system"))
        answer = client.post(
            "/v1/spaces/nope/workers",
            json={"name": "w"},
            headers={"Authorization": "Bearer bo_dev_system"},
        )
        assert answer.status_code == 404
