"""The package itself: it imports in Debian's python3, its errors are complete, its types hold."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import os
import pickle
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import rdma_interop
from rdma_interop import _core, errors, wire
from rdma_interop.wire import WIRE_ERROR_NAMES, MpaFrame, TermLayer, WireError

DEBIAN_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(not DEBIAN_PYTHON.exists(), reason="no Debian /usr/bin/python3 on this host")
def test_module_imports_in_debian_python(package_dir: Path | None) -> None:
    env = dict(os.environ)
    if package_dir is not None:
        env["PYTHONPATH"] = str(package_dir)
    result = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import rdma_interop.wire as w; print(w._core.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "_core" in result.stdout


def test_package_has_a_version() -> None:
    assert rdma_interop.__version__.count(".") == 2


def test_every_public_name_exists() -> None:
    for name in wire.__all__:
        assert hasattr(wire, name), name


def test_error_names_are_stable_identifiers() -> None:
    assert len(set(WIRE_ERROR_NAMES)) == len(WIRE_ERROR_NAMES)
    for name in WIRE_ERROR_NAMES:
        assert name.isidentifier() and name == name.lower(), name


@pytest.mark.parametrize("name", WIRE_ERROR_NAMES)
def test_every_error_has_a_message_and_a_terminate_cause(name: str) -> None:
    error = wire._core.make_wire_error(name)
    assert isinstance(error, WireError)
    assert error.name == name and error.message
    assert isinstance(error.terminate.layer, TermLayer)
    assert error.terminate.describe()


def test_wire_error_survives_pickling() -> None:
    with pytest.raises(WireError) as caught:
        MpaFrame.decode(b"")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.name, copy.message, copy.terminate) == (
        caught.value.name,
        caught.value.message,
        caught.value.terminate,
    )


def test_wire_error_is_one_class_shared_by_both_modules() -> None:
    assert wire.WireError is errors.WireError
    assert issubclass(WireError, ValueError)


# ---- typing sanity ------------------------------------------------------------------------

VALUE_TYPES = [
    wire.MpaEnhanced,
    wire.MpaFrame,
    wire.DdpHeader,
    wire.DdpSegment,
    wire.ReadRequest,
    wire.Terminate,
]


@pytest.mark.parametrize("cls", VALUE_TYPES, ids=lambda c: c.__name__)
def test_value_types_are_frozen_dataclasses_with_resolvable_hints(cls: type) -> None:
    assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert f.name in hints, f"{cls.__name__}.{f.name} has no type hint"
    instance = cls(**_required_args(cls))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, dataclasses.fields(cls)[0].name, None)


def _required_args(cls: type) -> dict[str, object]:
    """Arguments for the fields without a default (only DdpSegment and Terminate have any)."""
    samples: dict[str, object] = {
        "header": wire.DdpHeader(),
        "layer": TermLayer.LLP,
        "etype": 0,
        "code": 2,
    }
    return {
        f.name: samples[f.name]
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def _public_callables() -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for name in wire.__all__:
        obj = getattr(wire, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj) and obj.__module__ == wire.__name__:
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member) and member.__qualname__.startswith(obj.__name__):
                    found.append((f"{name}.{attr}", member))
    return found


@pytest.mark.parametrize("name,func", _public_callables(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_api_is_fully_annotated(name: str, func: typing.Callable[..., object]) -> None:
    hints = typing.get_type_hints(func)
    assert "return" in hints, f"{name} has no return annotation"
    for param in inspect.signature(func).parameters.values():
        if param.name in ("self", "cls"):
            continue
        assert param.name in hints, f"{name}({param.name}) has no annotation"


def test_package_ships_py_typed_marker() -> None:
    assert (Path(rdma_interop.__file__).parent / "py.typed").is_file()


def test_core_stub_spells_out_only_what_the_module_binds() -> None:
    # mypy checks the package against _core.pyi, not the module: a name the stub invents
    # would type-check and fail at run time, and a bound field it leaves out would be an error.
    stub = ast.parse((Path(rdma_interop.__file__).parent / "_core.pyi").read_text())
    for node in stub.body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        bound = getattr(_core, node.name, None)
        assert bound is not None, f"_core.pyi: _core has no {node.name}"
        members = {
            item.name for item in node.body if isinstance(item, ast.FunctionDef)
        } | {
            item.target.id for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        }
        for member in members:
            assert hasattr(bound, member), f"_core.pyi: _core.{node.name} has no {member}"
        for field in getattr(bound, "_fields", ()):
            assert field in members, f"_core.pyi: _core.{node.name}.{field} is not in the stub"


def test_whole_package_type_checks_with_mypy_when_available() -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed for this interpreter (Debian: python3-mypy)")
    package = Path(rdma_interop.__file__).parent
    result = subprocess.run(
        # The whole package: the extension module is what _core.pyi says it is.
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", str(package)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
