"""The JSON Schemas kvenv publishes, by name (``kvenv schema NAME``): which model each one is.

The registry lives at the top layer because it names models of every layer (the profile and
host snapshot in :mod:`kvenv.model`, the plan in :mod:`kvenv.plan`, the manifest in
:mod:`kvenv.env`); the generator itself is :mod:`kvenv.model.schema`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up, issue 13)
if TYPE_CHECKING:  # imported where used: `kvenv schema --help` lists the names cheaply
    from kvenv.model.schema import JsonSchema

# name -> "module:Class". Each entry has a committed ``schemas/<name>.schema.json``.
SCHEMAS: dict[str, str] = {
    "profile": "kvenv.model.profile:Profile",
    "host": "kvenv.model.snapshot:HostSnapshot",
    "manifest": "kvenv.env.manifest:Manifest",
    "plan": "kvenv.plan.make:Plan",
    "activation": "kvenv.env.activation:ShellHook",
}


def model_of(name: str) -> type:
    """The attrs class registered under ``name``."""
    import importlib

    from kvenv.errors import UsageError

    try:
        module_name, _, class_name = SCHEMAS[name].partition(":")
    except KeyError:
        known = ", ".join(sorted(SCHEMAS))
        raise UsageError(f"no schema named {name!r}", hint=f"known schemas: {known}") from None
    model: type = getattr(importlib.import_module(module_name), class_name)
    return model


def generate(name: str) -> JsonSchema:
    """The JSON Schema of the model registered under ``name``."""
    from kvenv.model.schema import schema_for

    return schema_for(model_of(name), title=f"kvenv {name}")
