"""The conformance kit's ``build_driver``: a driver built the way
``share-manager`` builds one, from a config file."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar, overload

from oslo_config import cfg
from sharemgr.drivers import loader
from sharemgr.drivers import options as driver_options
from sharemgr.drivers.base import ShareDriver

D = TypeVar("D", bound=ShareDriver)

KIT_HOST = "kithost"
KIT_ENGINE = "kithost.conformance"


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


@overload
def build_driver(driver: type[D], tmp_path: Path, *, backend: str = ..., setup: bool = ...,
                 **options: object) -> D: ...


@overload
def build_driver(driver: str, tmp_path: Path, *, backend: str = ..., setup: bool = ...,
                 **options: object) -> ShareDriver: ...


def build_driver(
    driver: str | type[ShareDriver],
    tmp_path: Path,
    *,
    backend: str = "kit",
    setup: bool = False,
    **options: object,
) -> ShareDriver:
    """Build a driver the way ``share-manager`` does, from a config file.

    :param driver: an entry point name in ``sharemgr.share_drivers`` (loaded
        through stevedore, so the plugin must be installed) or a driver class.
    :param tmp_path: folder for the config file and ``state_path``.
    :param backend: the backend's config group name.
    :param setup: call ``do_setup`` and ``check_for_setup_error``.
    :param options: options of the backend group, e.g.
        ``driver_handles_share_servers=True``; lists and dicts are written as
        oslo.config reads them.
    :raises loader.DriverLoadError: the driver cannot be loaded.
    """
    tmp_path = Path(tmp_path)
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    section = dict(options)
    if isinstance(driver, str):
        section["share_driver"] = driver
    lines = ["[DEFAULT]", f"state_path = {state}", f"enabled_share_backends = {backend}",
             "", f"[{backend}]"]
    lines += [f"{k} = {_option_text(v)}" for k, v in section.items()]
    conf_file = tmp_path / f"{backend}.conf"
    conf_file.write_text("\n".join(lines) + "\n")
    conf = cfg.ConfigOpts()
    driver_options.register_common_opts(conf)
    conf(["--config-file", str(conf_file)], project="sharemgr", default_config_files=[])
    if isinstance(driver, str):
        return loader.load_driver(conf, backend, KIT_HOST, KIT_ENGINE, setup=setup)
    return loader.construct_driver(conf, backend, driver, KIT_HOST, KIT_ENGINE, setup=setup)
