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

BOUND_VALUE_TYPES = [
    wire.MpaEnhanced,
    wire.MpaFrame,
    wire.DdpHeader,
    wire.ReadRequest,
    wire.Terminate,
]


@pytest.mark.parametrize("cls", BOUND_VALUE_TYPES, ids=lambda c: c.__name__)
def test_wire_values_are_the_bound_cpp_types_frozen_and_hashable(cls: type) -> None:
    # Bound once (bindings/value_class.h): the C++ struct, not a Python copy of it.
    assert cls.__module__ == "rdma_interop._core"
    instance = cls()
    assert instance == cls() and hash(instance) == hash(cls())
    first = cls._fields[0]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        setattr(instance, first, getattr(instance, first))
    assert instance.replace() == instance  # type: ignore[attr-defined]
    assert repr(instance).startswith(f"{cls.__name__}({first}=")


def test_wire_values_take_their_fields_by_position_as_a_dataclass_did() -> None:
    frame = wire.MpaFrame(wire.MpaKind.REPLY, True)
    assert (frame.kind, frame.markers) == (wire.MpaKind.REPLY, True)
    with pytest.raises(TypeError):
        wire.MpaFrame(wire.MpaKind.REPLY, kind=wire.MpaKind.REQUEST)
    with pytest.raises(TypeError):
        wire.ReadRequest(1, 2, 3, 4, 5, 6)
    with pytest.raises(TypeError):
        wire.ReadRequest(sink=1)
    # A Terminate's three numbers are its cause's parts.
    assert wire.Terminate(TermLayer.DDP, 2, 1).cause == (TermLayer.DDP, 2, 1)
    assert wire.Terminate(2, 0, 2) == wire.Terminate(cause=(TermLayer.LLP, 0, 2))


def test_ddp_segment_is_a_frozen_dataclass_with_resolvable_hints() -> None:
    # The one wire value of the package's own: C++ has its payload as a view, Python as bytes.
    assert dataclasses.is_dataclass(wire.DdpSegment)
    hints = typing.get_type_hints(wire.DdpSegment)
    assert {f.name for f in dataclasses.fields(wire.DdpSegment)} <= set(hints)
    segment = wire.DdpSegment(wire.DdpHeader())
    with pytest.raises(dataclasses.FrozenInstanceError):
        segment.payload = b"x"  # type: ignore[misc]


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
