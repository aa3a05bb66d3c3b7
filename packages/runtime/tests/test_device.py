import importlib.metadata
import textwrap

import pytest

from ember.codegen import CRenderer, Renderer
from ember.runtime import Allocator, CompiledDevice, Compiler, Device, DeviceRegistry
from ember.runtime.cpu import CPUDevice
from ember.runtime.python import PythonDevice, PythonRenderer
from ember.uops import settings


def test_this_package_registers_cpu_and_python_through_entry_points():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="ember.devices")}
    assert eps["CPU"] == "ember.runtime.cpu:CPUDevice"
    assert eps["PYTHON"] == "ember.runtime.python:PythonDevice"
    assert {"CPU", "PYTHON"} <= set(Device.registered())
    assert Device.registered() == sorted(Device.registered())


@pytest.mark.parametrize("name, canonical", [("cpu", "CPU"), ("CPU", "CPU"), ("cpu:1", "CPU:1"), ("CPU:0", "CPU"),
                                             ("python", "PYTHON")])
def test_canonicalize(name, canonical):
    assert Device.canonicalize(name) == canonical


@pytest.mark.parametrize("name", ["CPU:x", "CPU:", "cpu:-1", "CPU:1.5", "PYTHON:a"])
def test_an_instance_that_is_not_an_int_is_refused(name):
    with pytest.raises(ValueError, match="must be a non-negative int"):  # ("CPU:x" made a CPU device of that name)
        Device[name]


def test_instances_are_cached_per_full_name():
    cpu = Device["CPU"]
    assert isinstance(cpu, CPUDevice) and cpu.name == "CPU"
    assert Device["cpu"] is cpu and Device["CPU:0"] is cpu
    cpu1 = Device["CPU:1"]
    assert isinstance(cpu1, CPUDevice) and cpu1.name == "CPU:1"
    assert cpu1 is not cpu and Device["cpu:1"] is cpu1
    assert isinstance(Device["PYTHON"], PythonDevice)


@pytest.mark.parametrize("name", ["CPU", "PYTHON"])
def test_device_interface(name):
    dev = Device[name]
    assert isinstance(dev, CompiledDevice)
    assert isinstance(dev.renderer, Renderer) and isinstance(dev.compiler, Compiler)
    assert isinstance(dev.allocator, Allocator)
    assert dev.synchronize() is None


def test_renderers():
    assert isinstance(Device["CPU"].renderer, CRenderer)
    assert isinstance(Device["PYTHON"].renderer, PythonRenderer)


def test_default_device_from_dev(monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    assert Device.DEFAULT == "CPU"
    monkeypatch.setenv("DEV", "python")
    assert Device.DEFAULT == "PYTHON"
    monkeypatch.setenv("DEV", "cpu:1")
    assert Device.DEFAULT == "CPU:1"
    monkeypatch.setenv("DEV", "NOPE")
    with pytest.raises(ValueError, match=r"DEV='NOPE' is not a registered device; registered devices: \[.*'CPU'"):
        Device.DEFAULT  # noqa: B018
    monkeypatch.setenv("DEV", "")  # empty: the default
    assert Device.DEFAULT == "CPU"
    with settings.Context(DEV="python"):
        assert Device.DEFAULT == "PYTHON"


def test_unknown_device_lists_the_registered_ones():
    with pytest.raises(ValueError, match="unknown device 'NOPE:1'") as e:
        Device["NOPE:1"]
    assert "'CPU'" in str(e.value) and "'PYTHON'" in str(e.value)
    assert "NOPE" not in Device and "cpu:3" in Device


def test_bad_device_name_type():
    with pytest.raises(TypeError, match="non-empty str"):
        Device[3]  # type: ignore[index]


def test_an_installed_backend_registers_itself(tmp_path, monkeypatch):
    # a distribution on sys.path with an entry point in the group, as `pip install ember-fake` would leave it
    (tmp_path / "ember_fake_backend.py").write_text(textwrap.dedent("""
        from ember.runtime.python import PythonDevice

        class FakeDevice(PythonDevice):
            pass
    """))
    dist = tmp_path / "ember_fake-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ember-fake\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ember.devices]\nFAKE = ember_fake_backend:FakeDevice\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = DeviceRegistry()
    assert "FAKE" in registry.registered() and "CPU" in registry.registered()
    dev = registry["fake:2"]
    assert type(dev).__name__ == "FakeDevice" and dev.name == "FAKE:2"
    assert registry["FAKE:2"] is dev
