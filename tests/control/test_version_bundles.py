"""Version bundles load side by side in isolated namespaces; DW-ABI-1 is checked in a child."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
import os
import pickle
import sys
import threading
import time
import traceback
import types
import typing
from typing import Any

import pytest

from blackops.control.abi_check import verify_abi
from blackops.control.bundles import MAX_SOURCE_BYTES, check_bundle, load_version, module_prefix
from domain.errors import InvalidRequest


def key_of(modules: dict[str, str], main: str, salt: str = "") -> str:
    """A content address, salted where a test needs a Version no other test loaded."""
    return "sha256:" + hashlib.sha256(json.dumps([modules, main, salt]).encode()).hexdigest()


def prefixed(key: str) -> list[str]:
    prefix = module_prefix(key)
    return [name for name in sys.modules if name == prefix or name.startswith(prefix + ".")]


def test_two_versions_with_the_same_module_names_see_only_their_own_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "helpers", types.ModuleType("helpers"))  # a decoy
    bundles = [
        {
            "flows": "import helpers\nfrom helpers import greet\n"
            "class Flow:\n    def run(self):\n        return greet(), helpers.NAME\n",
            "helpers": f"NAME = {name!r}\ndef greet():\n    return 'hello ' + NAME\n",
        }
        for name in ("one", "two")
    ]
    first, second = (load_version(key_of(b, "flows"), b, "flows") for b in bundles)
    assert first.export("Flow")().run() == ("hello one", "one")
    assert second.export("Flow")().run() == ("hello two", "two")
    assert "flows" not in sys.modules and isinstance(sys.modules["helpers"], types.ModuleType)
    assert not hasattr(sys.modules["helpers"], "NAME")
    assert first.modules["helpers"] is not second.modules["helpers"]
    assert first.main.__name__ == module_prefix(first.key) + ".flows"
    assert sys.modules[first.main.__name__] is first.main


def test_a_module_named_like_the_standard_library_shadows_it_for_that_version_only() -> None:
    shadowing = {"json": "def dumps(value):\n    return 'bundle'\n", "main": "import json\n"}
    plain = {"main": "import json\n"}
    own = load_version(key_of(shadowing, "main"), shadowing, "main")
    other = load_version(key_of(plain, "main"), plain, "main")
    assert own.main.json.dumps(1) == "bundle"
    assert other.main.json is json and json.dumps(1) == "1"
    assert sys.modules["json"] is json


def test_packages_resolve_relative_and_dotted_imports_within_the_version() -> None:
    modules = {
        "lib": "from .util import double\nfrom . import util\n",
        "lib.util": "def double(x):\n    return 2 * x\n",
        "lib.sub": "",
        "lib.sub.deep": "from ..util import double\nfrom .. import util\nVALUE = double(21)\n",
        "main": "import lib.util\nimport lib.sub.deep as deep\nfrom lib import util as u\n",
    }
    main = load_version(key_of(modules, "main"), modules, "main").main
    prefix = module_prefix(key_of(modules, "main"))
    assert main.lib.util.double(4) == 8 and main.u is main.lib.util
    assert main.deep.VALUE == 42 and main.deep.util is main.lib.util
    assert main.lib.__path__ == [] and main.lib.__package__ == f"{prefix}.lib"
    assert main.deep.__package__ == f"{prefix}.lib.sub"


def test_a_relative_import_in_a_top_level_module_fails_as_in_python() -> None:
    modules = {"helpers": "", "main": "from . import helpers\n"}
    with pytest.raises(ImportError, match="no known parent package"):
        load_version(key_of(modules, "main"), modules, "main")


def test_an_unknown_name_under_a_bundle_package_is_not_looked_up_in_the_host() -> None:
    modules = {"json": "", "main": "import json.decoder\n"}  # the host has json.decoder
    with pytest.raises(ModuleNotFoundError, match=r"json\.decoder"):
        load_version(key_of(modules, "main"), modules, "main")


def test_circular_imports_see_the_module_registered_before_its_body_runs() -> None:
    modules = {
        "a": "import b\nNAME = 'a'\ndef partner():\n    return b.NAME\n",
        "b": "import a\nNAME = 'b'\nSEEN_EARLY = hasattr(a, 'NAME')\n"
        "def partner():\n    return a.NAME\n",
        "main": "import a\n",
    }
    loaded = load_version(key_of(modules, "main"), modules, "main")
    assert loaded.main.a.partner() == "b" and loaded.modules["b"].partner() == "a"
    assert loaded.modules["b"].SEEN_EARLY is False


def test_a_failing_module_body_leaves_nothing_registered_and_is_raised() -> None:
    modules = {
        "ok": "X = 1\n",
        "helpers": "import ok\nraise ValueError('boom')\n",
        "main": "import helpers\n",
    }
    key = key_of(modules, "main")
    for _ in range(2):  # a failure is not cached: the second call runs the bodies again
        with pytest.raises(ValueError, match="boom") as caught:
            load_version(key, modules, "main")
        assert prefixed(key) == []
    text = "".join(traceback.format_exception(caught.value))
    assert f'File "{key}/helpers.py", line 2' in text and "raise ValueError('boom')" in text


def test_dataclasses_enums_type_hints_pickle_and_getsource_work_in_bundle_code() -> None:
    modules = {
        "shapes": "from __future__ import annotations\nimport dataclasses, enum\n"
        "class Colour(enum.Enum):\n    RED = 1\n\n"
        "@dataclasses.dataclass(frozen=True)\nclass Point:\n"
        "    x: int\n    colour: Colour\n"
        "    tags: list[str] = dataclasses.field(default_factory=list)\n",
        "main": "from shapes import Point, Colour\n",
    }
    loaded = load_version(key_of(modules, "main"), modules, "main")
    point_cls, colour = loaded.export("Point"), loaded.export("Colour")
    point = point_cls(1, colour.RED)
    assert dataclasses.is_dataclass(point) and isinstance(colour.RED, enum.Enum)
    assert typing.get_type_hints(point_cls) == {"x": int, "colour": colour, "tags": list[str]}
    assert pickle.loads(pickle.dumps(point)) == point
    assert pickle.loads(pickle.dumps(colour.RED)) is colour.RED
    assert inspect.getsource(point_cls).startswith("@dataclasses.dataclass(frozen=True)")


def test_a_module_imported_inside_a_function_runs_later_in_the_same_version() -> None:
    modules = {"late": "VALUE = 'late'\n", "main": "def get():\n    import late\n    return late\n"}
    loaded = load_version(key_of(modules, "main"), modules, "main")
    assert "late" not in loaded.modules
    assert loaded.export("get")().VALUE == "late"
    assert loaded.export("get")() is sys.modules[module_prefix(loaded.key) + ".late"]


def test_export_of_a_missing_name_is_a_lookup_error() -> None:
    modules = {"main": "class Flow:\n    pass\n"}
    loaded = load_version(key_of(modules, "main"), modules, "main")
    with pytest.raises(LookupError, match="Nope"):
        loaded.export("Nope")


def test_the_same_key_loads_once_and_returns_the_same_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = types.SimpleNamespace(calls=[])
    monkeypatch.setitem(sys.modules, "_bundle_test_counter", counter)
    modules = {"main": "import _bundle_test_counter\n_bundle_test_counter.calls.append(1)\n"}
    key = key_of(modules, "main", salt="once")
    assert load_version(key, modules, "main") is load_version(key, modules, "main")
    assert counter.calls == [1]


def test_concurrent_loads_of_one_key_run_the_bundle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = types.SimpleNamespace(calls=[])
    monkeypatch.setitem(sys.modules, "_bundle_test_counter", counter)
    modules = {
        "main": "import time, _bundle_test_counter\n"
        "_bundle_test_counter.calls.append(1)\ntime.sleep(0.05)\n"
    }
    key = key_of(modules, "main", salt="threads")
    barrier = threading.Barrier(16)
    results: list[object] = []

    def load() -> None:
        barrier.wait()
        results.append(load_version(key, modules, "main"))

    threads = [threading.Thread(target=load) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 16 and all(result is results[0] for result in results)
    assert counter.calls == [1]


@pytest.mark.parametrize(
    ("modules", "main", "message"),
    [
        (["main"], "main", "must be an object"),
        ({"main": 1}, "main", "must be an object"),
        ({1: ""}, "main", "must be an object"),
        ({}, "main", "must not be empty"),
        ({f"m{i}": "" for i in range(257)}, "m0", "at most 256"),
        ({"1abc": ""}, "1abc", "not a dotted Python name"),
        ({"a..b": "", "a": ""}, "a", "not a dotted Python name"),
        ({"class": ""}, "class", "not a dotted Python name"),
        ({"my-mod": ""}, "my-mod", "not a dotted Python name"),
        ({"a.b": ""}, "a.b", "needs its package 'a'"),
        ({"main": ""}, 1, "main must name a module"),
        ({"main": ""}, "other", "main must name a module"),
        ({"main": "x = 1\ndef f(:\n"}, "main", "module 'main' does not compile: line 2"),
        ({"main": "\udc80"}, "main", "not valid Unicode"),
        ({"main": "#" + "é" * (MAX_SOURCE_BYTES // 2)}, "main", "exceed 1048576 UTF-8 bytes"),
    ],
)
def test_check_bundle_refuses_what_cannot_be_loaded(modules: Any, main: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        check_bundle(modules, main)


def test_check_bundle_accepts_a_bundle_at_its_limits() -> None:
    modules = {f"m{i}": "" for i in range(255)} | {"main": "#" + "a" * (MAX_SOURCE_BYTES - 1)}
    check_bundle(modules, "main")
    assert len(modules) == 256


def test_load_version_refuses_an_invalid_bundle_before_registering_anything() -> None:
    modules = {"main": "def f(:\n"}
    key = key_of(modules, "main")
    with pytest.raises(InvalidRequest, match="does not compile"):
        load_version(key, modules, "main")
    assert prefixed(key) == []


# -- DW-ABI-1 ---------------------------------------------------------------------------

ABI_MAIN = """
import abc

class Good:
    def __init__(self, env):
        self.env = env
    def run(self, event, step):
        return None

class Inherited(Good):
    pass

class Static:
    def __init__(self, env=None):
        pass
    @staticmethod
    def run(event, step):
        return None

class Klass:
    def __init__(self, *args):
        pass
    @classmethod
    def run(cls, event, step):
        return None

class CallableObject:
    def __call__(self, event, step):
        return None

class WithCallable(Good):
    run = CallableObject()

class NoRun:
    def __init__(self, env):
        pass

class RunNotCallable(Good):
    run = 5

class RunProperty(Good):
    @property
    def run(self):
        return lambda event, step: None

class RunTooFewParams(Good):
    def run(self):
        return None

class Abstract(abc.ABC):
    def __init__(self, env):
        pass
    @abc.abstractmethod
    def run(self, event, step):
        ...

class TwoArgs:
    def __init__(self, env, extra):
        pass
    def run(self, event, step):
        return None

def not_a_class(env):
    return None

GOOD_INSTANCE = Good(None)
"""
ABI_EXPECTED = {
    "Good": None,
    "Inherited": None,
    "Static": None,
    "Klass": None,
    "CallableObject": "cannot be constructed with one argument (env)",
    "WithCallable": None,
    "NoRun": "has no run method",
    "RunNotCallable": "run is not callable (int)",
    "RunProperty": "run is not callable (property)",
    "RunTooFewParams": "run cannot be called as run(event, step)",
    "Abstract": "abstract class (not implemented: run)",
    "TwoArgs": "cannot be constructed with one argument (env)",
}


@pytest.fixture(scope="module")
def abi_verdict() -> dict[str, Any]:
    modules = {"main": ABI_MAIN}
    return verify_abi(key_of(modules, "main"), modules, "main")


def test_dw_abi_1_lists_exactly_the_top_level_classes(abi_verdict: dict[str, Any]) -> None:
    """DW-ABI-1: functions and instances are not exports; `abc` (a module) is not either."""
    assert abi_verdict["loaded"] is True and abi_verdict["error"] is None
    assert set(abi_verdict["classes"]) == set(ABI_EXPECTED)
    assert json.loads(json.dumps(abi_verdict)) == abi_verdict


@pytest.mark.parametrize(("name", "reason"), ABI_EXPECTED.items())
def test_dw_abi_1_judges_each_class(abi_verdict: dict[str, Any], name: str, reason: str) -> None:
    """DW-ABI-1: constructible with `env`, not abstract, `run(event, step)` callable."""
    verdict = abi_verdict["classes"][name]
    if reason is None:
        assert verdict == {"ok": True, "reason": None}
    else:
        assert verdict["ok"] is False and verdict["reason"].startswith(reason)


def _verify(main_source: str, **kwargs: Any) -> dict[str, Any]:
    modules = {"helpers": "X = 1\n", "main": main_source}
    return verify_abi(key_of(modules, "main"), modules, "main", **kwargs)


def test_dw_abi_1_an_import_error_is_reported_without_a_traceback() -> None:
    """DW-ABI-1: a main module that fails to import is `loaded: False`."""
    verdict = _verify("import helpers\nfrom missing_module_xyz import Flow\n")
    assert verdict == {
        "loaded": False,
        "error": "ModuleNotFoundError: No module named 'missing_module_xyz'",
        "classes": {},
    }


def test_dw_abi_1_a_long_error_message_is_cut_to_500_characters() -> None:
    """DW-ABI-1: errors stay short."""
    verdict = _verify("raise RuntimeError('x' * 5000)\n")
    assert verdict["loaded"] is False and len(verdict["error"]) == 500
    assert verdict["error"].startswith("RuntimeError: xxx")


def test_dw_abi_1_an_invalid_bundle_is_refused_in_the_verifier() -> None:
    """DW-ABI-1: a bundle that does not compile never loads."""
    verdict = _verify("def f(:\n")
    assert verdict["loaded"] is False
    assert verdict["error"].startswith("InvalidRequest: module 'main' does not compile: line 1")


def test_dw_abi_1_an_endless_import_times_out() -> None:
    """DW-ABI-1: the verifier is killed at the timeout."""
    started = time.monotonic()
    verdict = _verify("while True:\n    pass\n", timeout=2)
    assert verdict == {"loaded": False, "error": "verification timed out after 2 s", "classes": {}}
    assert time.monotonic() - started < 10


def test_dw_abi_1_output_printed_by_the_bundle_does_not_corrupt_the_verdict() -> None:
    """DW-ABI-1: stdout noise (print, raw fd 1, a child process) goes elsewhere."""
    verdict = _verify(
        "import os, subprocess, sys\n"
        'print(\'{"loaded": false}\')\nos.write(1, b"garbage")\n'
        "subprocess.run([sys.executable, '-c', 'print(123)'])\n"
        "class Flow:\n    def __init__(self, env): pass\n    def run(self, event, step): pass\n"
    )
    assert verdict == {
        "loaded": True,
        "error": None,
        "classes": {"Flow": {"ok": True, "reason": None}},
    }


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("import sys\nsys.exit()\n", "SystemExit"),
        ("import sys\nsys.exit('bye')\n", "SystemExit: bye"),
        ("import os\nos._exit(3)\n", "verifier exited with status 3"),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
            "verifier exited with status -9",
        ),
    ],
)
def test_dw_abi_1_an_exit_or_crash_at_import_is_not_loaded(source: str, error: str) -> None:
    """DW-ABI-1: exits and crashes of the verifier are reported, never raised."""
    assert _verify(source) == {"loaded": False, "error": error, "classes": {}}


def test_dw_abi_1_verification_runs_in_another_process() -> None:
    """DW-ABI-1: the bundle's top level runs in a fresh process, not in the host."""
    modules = {
        "main": "import os\nos.environ['BUNDLE_RAN_HERE'] = '1'\n"
        "globals()['Pid%d' % os.getpid()] = type('P', (), {})\n"
    }
    key = key_of(modules, "main", salt="process")
    before = set(sys.modules)
    verdict = verify_abi(key, modules, "main")
    (name,) = verdict["classes"]
    assert name.startswith("Pid") and int(name[3:]) != os.getpid()
    assert "BUNDLE_RAN_HERE" not in os.environ
    assert prefixed(key) == [] and set(sys.modules) - before == set()
