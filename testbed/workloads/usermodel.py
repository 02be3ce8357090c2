"""A user's own network, named in a scenario as ``workload.model: "package.module:ClassName"`` with
keyword arguments ``workload.model_args``.

This is the one place a scenario file names code rather than a registered entry, like Hydra's
``_target_``; a scenario that names a model runs that package's code, so run scenarios you trust.
Three limits keep the name from reaching anything else: the attribute must be a `torch.nn.Module`
subclass before it is called, and the standard library and the testbed's own modules are refused
(``os:system`` is not a model, and no scenario should build ``testbed`` internals).

The module is imported from the Python path, or else from the working directory. Flower's client
actors and other Ray workers must import it too. On this machine: Ray itself puts the driver's
working directory on its workers' path, and the folder the module was found in is added to
``PYTHONPATH``, which every process this one starts later inherits (the local engine's Ray), so a
model found anywhere on the driver's path is found by the workers. On a Ray cluster (``engine.type:
ray``), whose nodes were started before the run with their own environment and may be other
machines: `worker_code` names the model's package folder (or module file) where it was found
outside the installed packages, and the engine has Ray ship it to every worker
(``runtime_env={"py_modules": [...]}``: Ray uploads it to the cluster when the run joins and each
node unpacks it on its workers' path), so a model in the user's working folder trains on every node
without being installed there. A model installed in site-packages is not shipped: install it on
every node, as the testbed itself is.

`probe` builds the model once and runs a forward pass on a batch of the scenario's data, so
``testbed validate`` refuses a model that cannot be imported, built or run on that data, in one line
naming ``workload.model``, and reports its parameter count.
"""

from __future__ import annotations

import importlib
import os
import site
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError, one_line, shorten

FIELD = "workload.model"


def _refuse(spec: str, problem: str) -> ScenarioError:
    return ScenarioError(one_line(f"{FIELD}: {shorten(spec)}: {problem}"))


def model_class(spec: str) -> type:
    """The `torch.nn.Module` subclass ``spec`` ("module:Class") names, imported (see the module docstring)."""
    from torch import nn

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute or " " in spec:
        raise _refuse(spec, "write it as 'package.module:ClassName'")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in ("testbed", "__main__"):
        what = "the standard library" if top in sys.stdlib_module_names else "not a user package"
        raise _refuse(spec, f"'{top}' is {what}; name a torch.nn.Module class of your own package")
    module = _import(spec, module_name)
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not (isinstance(target, type) and issubclass(target, nn.Module)):
        what = "missing from" if target is None else "not a torch.nn.Module class in"
        raise _refuse(spec, f"'{attribute}' is {what} module '{module_name}'")
    _share_with_workers(module, module_name)
    return target


def _import(spec: str, module_name: str) -> Any:
    """Import from the Python path, or else from the working directory (where the scenario runs)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is None or not module_name.startswith(err.name) or str(Path.cwd()) in sys.path:
            raise _refuse(spec, f"cannot be imported ({type(err).__name__}: {err})") from None
    except Exception as err:  # any failure of the user's code while it imports
        raise _refuse(spec, f"cannot be imported ({type(err).__name__}: {err})") from None
    sys.path.insert(0, str(Path.cwd()))
    importlib.invalidate_caches()
    return _import(spec, module_name)


def _share_with_workers(module: Any, module_name: str) -> None:
    """Put the folder the module's top package lives in on ``PYTHONPATH`` for processes started later."""
    top = _top_level_path(module, module_name)
    if top is None:
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(top.parent) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(top.parent), *paths])


def _top_level_path(module: Any, module_name: str) -> Path | None:
    """The folder of the module's top package, or the file of a top-level module; None for a
    module without a file (a namespace package)."""
    file = getattr(module, "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    depth = module_name.count(".") + (path.name == "__init__.py")  # folders from the file up to the top one
    return path.parents[depth - 1] if depth else path


def worker_code(workload_params: dict[str, Any]) -> tuple[str, ...]:
    """The code outside the installed packages that the run's workers must import: the top package
    folder (or module file) of the workload's own model where it was not found in site-packages,
    else nothing. Engines whose workers may be other machines ship it to them (see the module docstring)."""
    spec = workload_params.get("model")
    if not isinstance(spec, str) or not spec:
        return ()
    module_name = spec.partition(":")[0]
    model_class(spec)  # imports it (validate has, in this process: no second import)
    top = _top_level_path(sys.modules[module_name], module_name)
    installed = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages(),
                                             sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))}
    if top is None or installed & {top, *top.parents}:
        return ()
    return (str(top),)


def build_model(spec: str, args: dict[str, Any]) -> Any:
    """An instance of the model ``spec`` names, built with ``args`` (parameters from torch's global RNG)."""
    cls = model_class(spec)
    try:
        return cls(**args)
    except Exception as err:  # the user's constructor: any failure is theirs, named in one line
        raise _refuse(spec, f"cannot be built with model_args {shorten(args)} ({type(err).__name__}: {err})") \
            from None


def probe(spec: str, args: dict[str, Any], batch: Any, num_classes: int) -> int:
    """Build the model, run it on ``batch`` (a float tensor of the scenario's samples) and check that it
    gives [batch, num_classes] logits; returns its parameter count."""
    import torch

    model = build_model(spec, args)
    model.eval()  # one forward pass only: batch norm must not need a batch of several
    try:
        with torch.no_grad():
            out = model(batch)
    except Exception as err:  # the user's forward pass
        raise _refuse(spec, f"fails on a batch of shape {tuple(batch.shape)} ({type(err).__name__}: {err})") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(batch), num_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise _refuse(spec, f"gives {shape} on a batch of shape {tuple(batch.shape)}; expected "
                            f"{(len(batch), num_classes)} logits for the {num_classes} classes")
    return sum(p.numel() for p in model.parameters())


@lru_cache(maxsize=8)
def probe_data(spec: str, args_json: str, data_json: str) -> int:
    """`probe` on two training samples of the data block ``data_json`` (cached: validation and the
    parameter count that `testbed validate` prints share one build)."""
    import json

    import torch

    from testbed.data import train_test_split
    from testbed.data.config import DataConfig
    from testbed.data.select import load_selected

    data = DataConfig.model_validate(json.loads(data_json))
    # The split's shape: a table's categorical columns are one-hot encoded by the split.
    train, _ = train_test_split(load_selected(data), data.test_fraction, 0)
    return probe(spec, json.loads(args_json), torch.from_numpy(train.x[:2]), train.num_classes)


def describe(workload_params: dict[str, Any], data: Any) -> str:
    """``" (workload.model X: N parameters)"`` where the workload names its own model, else ``""``."""
    import json

    spec = workload_params.get("model")
    if not spec:
        return ""
    count = probe_data(spec, json.dumps(workload_params.get("model_args") or {}, sort_keys=True),
                       json.dumps(data.model_dump(mode="json"), sort_keys=True))
    return f" ({FIELD} {spec}: {count:,} parameters)"
