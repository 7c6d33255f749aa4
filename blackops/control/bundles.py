"""Version bundles: validate a Worker's modules and load each Version in its own namespace.

A Version is ``modules`` (dotted module name -> source; a package ``lib`` is its
``__init__`` source under ``"lib"``) and ``main``. Many Versions with the same module
names run side by side in one process:

* each bundle module is a fresh module named ``<prefix>.<name>`` (the prefix is
  derived from the Version key) and registered in ``sys.modules`` under that name
  only, so dataclasses, enum, ``typing.get_type_hints``, pickle and ``inspect`` work;
  a bare name such as ``flows`` is never registered nor read;
* the isolation is a per-Version import hook, not global state: every bundle module
  gets the Version's copy of the builtins whose ``__import__`` resolves absolute names
  whose top segment is in the bundle, and relative imports from bundle modules, to the
  same Version; everything else goes to the host's ``builtins.__import__``;
* modules run lazily, as Python does: ``load_version`` runs ``main`` and what it
  imports; a module imported later (inside a function) runs then, under the Version's
  lock. A module is registered before its body runs (circular imports work); a body
  that raises is unregistered again, and a failed ``load_version`` removes every
  ``sys.modules`` entry of its prefix.

Not supported: ``importlib.import_module("helpers")`` and ``importlib.reload`` from
bundle code go through the host's import system, which knows bundle modules only by
their prefixed names and only once they are loaded. Use ``import`` statements.
This is isolation of names, not a sandbox: bundle code runs with the host's rights
(``blackops.control.abi_check`` runs untrusted bundles in a separate process).
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import linecache
import re
import sys
import threading
from dataclasses import dataclass
from importlib.abc import Loader
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType
from typing import Any

from domain.errors import InvalidRequest

MAX_MODULES = 256
MAX_SOURCE_BYTES = 1_048_576
_SHA256_KEY = re.compile(r"sha256:([0-9a-f]{64})")


def check_bundle(modules: object, main: object) -> None:
    """Refuse, with :class:`InvalidRequest`, a bundle that cannot be loaded as given."""
    if not isinstance(modules, dict) or not all(
        isinstance(name, str) and isinstance(source, str) for name, source in modules.items()
    ):
        raise InvalidRequest("modules must be an object of module name -> source text")
    if not modules:
        raise InvalidRequest("modules must not be empty")
    if len(modules) > MAX_MODULES:
        raise InvalidRequest(f"a bundle holds at most {MAX_MODULES} modules")
    for name in modules:
        if not all(part.isidentifier() and not keyword.iskeyword(part) for part in name.split(".")):
            raise InvalidRequest(f"module name {name[:100]!r} is not a dotted Python name")
        parent = name.rpartition(".")[0]
        if parent and parent not in modules:
            raise InvalidRequest(f"module {name!r} needs its package {parent!r} in the bundle")
    if not isinstance(main, str) or main not in modules:
        raise InvalidRequest("main must name a module of the bundle")
    size = 0
    for name, source in modules.items():
        try:
            size += len(source.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRequest(f"module {name!r} is not valid Unicode text") from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidRequest(f"the bundle's sources exceed {MAX_SOURCE_BYTES} UTF-8 bytes")
    for name, source in modules.items():
        _compile(source, _filename("bundle", name, _is_package(name, modules)), name)


@dataclass(frozen=True, eq=False)
class LoadedVersion:
    """One loaded Version: its main module and the modules ``load_version`` ran."""

    key: str
    main: ModuleType
    modules: dict[str, ModuleType]

    def export(self, name: str) -> Any:
        """A top-level name of the main module (a workflow class), or LookupError."""
        try:
            return getattr(self.main, name)
        except AttributeError:
            raise LookupError(f"Version {self.key} exports no {name!r}") from None


_cache: dict[str, LoadedVersion] = {}
_key_locks: dict[str, threading.Lock] = {}
_lock = threading.Lock()  # guards the two dicts above and the claim of a prefix


def load_version(key: str, modules: dict[str, str], main: str) -> LoadedVersion:
    """Load a Version once per process (per ``key``) and return it.

    ``key`` is trusted to address ``modules`` and ``main``: a second call with the same
    key returns the first load. Raises InvalidRequest for a bad bundle, and re-raises
    what a module body raised (nothing of that Version stays registered).
    """
    with _lock:
        loaded = _cache.get(key)
        if loaded is not None:
            return loaded
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:  # one load per key; other keys load in parallel
        loaded = _cache.get(key)
        if loaded is None:
            loaded = _load(key, dict(modules), main)
            with _lock:
                _cache[key] = loaded
        return loaded


def module_prefix(key: str) -> str:
    """The package name under which a Version's modules are registered."""
    match = _SHA256_KEY.fullmatch(key)
    digest = match.group(1) if match else hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()
    return f"_bo_v_{digest[:24]}"


def _load(key: str, modules: dict[str, str], main: str) -> LoadedVersion:
    check_bundle(modules, main)
    prefix = module_prefix(key)
    importer = _Importer(key, prefix, modules)
    with _lock:
        if prefix in sys.modules:  # another key with the same 96-bit prefix
            raise InvalidRequest(f"Version key {key[:80]!r} collides with a loaded Version")
        sys.modules[prefix] = importer.root
    try:
        main_module = importer.load(main)
    except BaseException:
        for name in [n for n in list(sys.modules) if n == prefix or n.startswith(prefix + ".")]:
            sys.modules.pop(name, None)
        raise
    return LoadedVersion(key, main_module, dict(importer.loaded))


class _Importer:
    """The import hook and the module table of one Version."""

    def __init__(self, key: str, prefix: str, sources: dict[str, str]) -> None:
        self.key = key
        self.prefix = prefix
        self.sources = sources
        self.tops = {name.partition(".")[0] for name in sources}
        self.loaded: dict[str, ModuleType] = {}  # bare name -> module, registered first
        self.lock = threading.RLock()  # an RLock: bodies import while one is loading
        self.builtins = dict(vars(builtins))
        self.builtins["__import__"] = self.import_
        self.root = ModuleType(prefix)
        self.root.__path__ = []
        self.root.__package__ = prefix

    def import_(
        self,
        name: str,
        globals: dict[str, Any] | None = None,  # the signature of __import__
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> ModuleType:
        bare = self._bundle_name(name, globals, level)
        if bare is None:
            return builtins.__import__(name, globals, locals, fromlist or (), level)
        module = self.load(bare)
        if fromlist:
            # `from pkg import sub` (and `*` with __all__) may name submodules.
            items = list(fromlist)
            if "*" in items:
                items += list(getattr(module, "__all__", ()))
            for item in items:
                sub = f"{bare}.{item}"
                if isinstance(item, str) and not hasattr(module, item) and sub in self.sources:
                    self.load(sub)
            return module
        if level == 0:  # `import a.b` binds `a`
            return self.loaded[bare.partition(".")[0]]
        return self.loaded[bare[: len(bare) - len(name) + len(name.partition(".")[0])]]

    def _bundle_name(self, name: str, globals: dict[str, Any] | None, level: int) -> str | None:
        """The bare bundle name an import means, or None for the host's import system."""
        if not isinstance(name, str):
            return None
        if level == 0:
            return name if name.partition(".")[0] in self.tops else None
        package = (globals or {}).get("__package__")
        if not isinstance(package, str) or not (
            package == self.prefix or package.startswith(self.prefix + ".")
        ):
            return None
        parts = package[len(self.prefix) + 1 :].split(".") if package != self.prefix else []
        if not parts:
            raise ImportError("attempted relative import with no known parent package")
        if level > len(parts):
            raise ImportError("attempted relative import beyond top-level package")
        base = ".".join(parts[: len(parts) - level + 1])
        return f"{base}.{name}" if name else base

    def load(self, bare: str) -> ModuleType:
        """The module ``bare`` of this Version, running its body on first use."""
        with self.lock:
            module = self.loaded.get(bare)
            if module is not None:
                return module
            parent_name, _, child = bare.rpartition(".")
            parent = self.load(parent_name) if parent_name else self.root
            module = self.loaded.get(bare)  # the parent's body may have imported it
            if module is not None:
                return module
            if bare not in self.sources:
                raise ModuleNotFoundError(f"No module named {bare!r}", name=bare)
            module, code = self._new_module(bare)
            self.loaded[bare] = module
            sys.modules[module.__name__] = module
            try:
                exec(code, module.__dict__)
            except BaseException:
                # As Python does: a failed body leaves no registered module behind.
                del self.loaded[bare]
                sys.modules.pop(module.__name__, None)
                raise
            setattr(parent, child, module)
            return module

    def _new_module(self, bare: str) -> tuple[ModuleType, CodeType]:
        full = f"{self.prefix}.{bare}"
        is_package = _is_package(bare, self.sources)
        filename = _filename(self.key, bare, is_package)
        source = self.sources[bare]
        code = _compile(source, filename, bare)
        # Tracebacks and inspect.getsource read bundle lines from linecache; the
        # loader's get_source refills it should someone clear the cache.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        loader = _SourceLoader(source)
        module = ModuleType(full)
        module.__file__ = filename
        module.__loader__ = loader
        module.__spec__ = ModuleSpec(full, loader, origin=filename, is_package=is_package)
        module.__spec__.has_location = True
        module.__package__ = full if is_package else full.rpartition(".")[0]
        if is_package:
            module.__path__ = []
        module.__builtins__ = self.builtins  # type: ignore[attr-defined]
        return module, code


class _SourceLoader(Loader):
    """Just enough of a loader for linecache and inspect: the module's source."""

    def __init__(self, source: str) -> None:
        self._source = source

    def get_source(self, fullname: str) -> str:
        return self._source


def _is_package(name: str, modules: dict[str, str]) -> bool:
    return any(other.startswith(name + ".") for other in modules)


def _filename(key: str, name: str, is_package: bool) -> str:
    path = name.replace(".", "/")
    return f"{key}/{path}/__init__.py" if is_package else f"{key}/{path}.py"


def _compile(source: str, filename: str, name: str) -> CodeType:
    try:
        # dont_inherit: this file's `from __future__` flags must not leak into bundles.
        return compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        raise InvalidRequest(
            f"module {name!r} does not compile: line {error.lineno}: {str(error.msg)[:200]}"
        ) from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise InvalidRequest(f"module {name!r} does not compile: {str(error)[:200]}") from None
