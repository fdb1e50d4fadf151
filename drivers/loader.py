"""Load one share driver per enabled backend through stevedore.

Every way a driver can fail to load (unknown name, plugin import error, entry
point naming a missing class, bad option value, constructor or set-up error)
becomes a ``DriverLoadError`` whose message is one line naming the backend
group, the entry point and the cause, so the daemon can print it and exit.
The cause's traceback goes to the DEBUG log (``debug = true``), for the
driver's author.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

from oslo_config import cfg
from oslo_log import log as logging
from sharemgr.drivers import options, timing
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.exceptions import InvalidDriverOption
from stevedore import driver as stevedore_driver
from stevedore import exception as stevedore_exc
from stevedore import extension as stevedore_ext

NAMESPACE = "sharemgr.share_drivers"

LOG = logging.getLogger(__name__)


class DriverLoadError(Exception):
    """A backend's driver cannot be loaded; ``str()`` is one line."""


class DriverOptionError(DriverLoadError):
    """A backend option's value is wrong: the user's configuration, which
    stops the start with exit code 2 like any bad option value."""


class BackendSetupError(Exception):
    """``do_setup`` or ``check_for_setup_error`` failed: the backend may come
    back (an array not reachable yet), so the daemon retries; ``str()`` is
    one line."""


class _ImportFailed(Exception):
    def __init__(self, ep: importlib.metadata.EntryPoint, err: BaseException) -> None:
        super().__init__(str(err))
        self.ep = ep
        self.err = err


def _bad_value(err: BaseException) -> str:
    # oslo.config says "Value for option X from LocationInfo(...) is not valid:
    # <cause>"; the group and option are named already, keep the cause.
    text = " ".join(str(err).split())
    return text.split(" is not valid: ", 1)[-1]


def _load_error(message: str, cause: BaseException) -> DriverLoadError:
    """The one-line error; the cause's traceback is logged at DEBUG."""
    LOG.debug("%s", message, exc_info=(type(cause), cause, cause.__traceback__))
    return DriverLoadError(message)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    name = type(err).__name__
    return f"{name}: {text}" if text else name


def refresh_entry_points() -> list[importlib.metadata.EntryPoint]:
    """Read this namespace's entry points afresh and make stevedore use them.

    stevedore keeps entry points per namespace for the life of the process
    (``ExtensionManager.ENTRY_POINT_CACHE``) in front of a cache keyed by
    ``sys.path`` and an on-disk cache keyed by directory mtimes packed as
    32-bit floats (a resolution of about two minutes), so a plugin installed
    shortly before start, or put on ``sys.path`` at run time, can go unseen.
    Reading the installed metadata directly costs a few milliseconds at start.
    """
    importlib.invalidate_caches()
    seen: set[tuple[str, str]] = set()
    eps = []
    for ep in importlib.metadata.entry_points(group=NAMESPACE):
        if (ep.name, ep.value) not in seen:  # a tree on sys.path twice
            seen.add((ep.name, ep.value))
            eps.append(ep)
    stevedore_ext.ExtensionManager.ENTRY_POINT_CACHE[NAMESPACE] = eps
    return eps


def _raise_import_failure(
    _manager: object, ep: importlib.metadata.EntryPoint, err: BaseException
) -> None:
    raise _ImportFailed(ep, err)


def _describe(ep: importlib.metadata.EntryPoint) -> str:
    return f"'{ep.name} = {ep.value}'"


def _import_cause(ep: importlib.metadata.EntryPoint, err: BaseException) -> str:
    module = sys.modules.get(ep.module)
    if isinstance(err, AttributeError) and module is not None:
        # The module imported; the name after the colon is what is missing.
        first = ep.attr.split(".")[0]
        if not hasattr(module, first):
            return f"module '{ep.module}' has no class '{ep.attr}'"
    return f"import failed: {_one_line(err)}"


def _load_class(backend: str, name: str) -> type[ShareDriver]:
    every = refresh_entry_points()
    eps = [ep for ep in every if ep.name == name]
    where = f"backend [{backend}]: driver '{name}'"
    if not eps:
        known = ", ".join(sorted({ep.name for ep in every})) or "none"
        raise DriverLoadError(
            f"{where}: no entry point '{name}' in namespace {NAMESPACE} "
            f"(installed: {known}); set [{backend}] share_driver or install the plugin"
        )
    if len(eps) > 1:
        raise DriverLoadError(
            f"{where}: several entry points share the name: "
            + ", ".join(_describe(ep) for ep in eps)
        )
    ep = eps[0]
    where = f"backend [{backend}]: driver entry point {_describe(ep)}"
    try:
        manager: stevedore_driver.DriverManager[type[ShareDriver]] = \
            stevedore_driver.DriverManager(
                NAMESPACE,
                name,
                invoke_on_load=False,
                on_load_failure_callback=_raise_import_failure,
                on_missing_entrypoints_callback=None,
            )
    except _ImportFailed as exc:
        raise _load_error(f"{where}: {_import_cause(exc.ep, exc.err)}", exc.err)
    except stevedore_exc.NoMatches as exc:
        raise _load_error(f"{where}: {_one_line(exc)}", exc)
    except Exception as exc:
        # stevedore lets AssertionError through without the callback.
        raise _load_error(f"{where}: {_import_cause(ep, exc)}", exc)
    cls = manager.driver
    if not (isinstance(cls, type) and issubclass(cls, ShareDriver)):
        raise DriverLoadError(
            f"{where}: {cls!r} is not a subclass of sharemgr.drivers.base.ShareDriver"
        )
    return cls


def _register_and_validate(conf: cfg.ConfigOpts, backend: str, cls: type[ShareDriver],
                           where: str) -> None:
    try:
        conf.register_opts(list(cls.driver_opts), group=backend)
    except cfg.DuplicateOptError as exc:
        raise DriverLoadError(f"{where}: driver option clashes with another: {exc}")
    group = conf[backend]
    # oslo.config checks a value only when it is read: read them all now.
    for opt_name in sorted(group):
        try:
            getattr(group, opt_name)
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise DriverOptionError(
                f"{where}: invalid value for [{backend}] {opt_name}: {_bad_value(exc)}"
            )


def _check_dhss(conf: cfg.ConfigOpts, backend: str, cls: type[ShareDriver], where: str) -> None:
    dhss = bool(conf[backend].driver_handles_share_servers)
    modes = tuple(getattr(cls, "supported_dhss_modes", (False, True)))
    if dhss not in modes:
        supported = " or ".join(str(m) for m in modes) or "none"
        raise DriverLoadError(
            f"{where}: [{backend}] driver_handles_share_servers = {dhss} is not supported "
            f"by this driver (it supports driver_handles_share_servers = {supported})"
        )


def construct_driver(
    conf: cfg.ConfigOpts,
    backend: str,
    cls: type[ShareDriver],
    host: str,
    engine_id: str,
    *,
    setup: bool = True,
    label: str | None = None,
) -> ShareDriver:
    """Register ``cls.driver_opts`` on ``[backend]``, read every option of the
    group, construct ``cls`` and (with ``setup``) set it up.

    :raises DriverLoadError: with a one-line message.
    """
    options.register_backend_opts(conf, backend)
    where = (
        f"backend [{backend}]: driver {label or repr(cls.__name__)} "
        f"({cls.__module__}.{cls.__qualname__})"
    )
    _register_and_validate(conf, backend, cls, where)
    _check_dhss(conf, backend, cls, where)
    try:
        drv = cls(
            conf[backend],
            backend_name=backend,
            host=host,
            engine_id=engine_id,
            state_path=conf.state_path,
        )
    except InvalidDriverOption as exc:
        raise DriverOptionError(f"{where}: {' '.join(str(exc).split())}")
    except Exception as exc:
        raise _load_error(f"{where}: constructor failed: {_one_line(exc)}", exc)
    timing.time_calls(drv, backend)
    if setup:
        try:
            setup_driver(drv)
        except BackendSetupError as exc:
            raise _load_error(f"{where}: {exc}", exc.__cause__ or exc)
    return drv


def setup_driver(drv: ShareDriver) -> None:
    """``do_setup`` then ``check_for_setup_error``.

    :raises BackendSetupError: '<step> failed: <cause>', one line.
    """
    for step in ("do_setup", "check_for_setup_error"):
        try:
            getattr(drv, step)()
        except Exception as exc:
            # The cause (its traceback) goes with it: callers log it at DEBUG.
            raise BackendSetupError(f"{step} failed: {_one_line(exc)}") from exc


def load_driver(
    conf: cfg.ConfigOpts, backend: str, host: str, engine_id: str, *, setup: bool = True
) -> ShareDriver:
    """Load the driver ``[backend] share_driver`` names (default: the group's
    name) and construct it as ``construct_driver`` does.

    :raises DriverLoadError: with a one-line message.
    """
    options.register_backend_opts(conf, backend)
    name = conf[backend].share_driver or backend
    cls = _load_class(backend, name)
    return construct_driver(conf, backend, cls, host, engine_id, setup=setup, label=f"'{name}'")


def load_drivers(
    conf: cfg.ConfigOpts, host: str, engine_id: str, *, setup: bool = True
) -> dict[str, ShareDriver]:
    """One driver per name in ``conf.enabled_share_backends``, keyed by name.

    Each backend group's ``share_driver`` (default: the group's name) names
    an entry point in ``sharemgr.share_drivers``. The loader registers the
    driver class's ``driver_opts`` on the group, reads every option of the
    group (so a bad value fails now), constructs the driver and, unless
    ``setup`` is false, calls ``do_setup`` and ``check_for_setup_error``.

    :raises DriverLoadError: for the first backend that fails, one line.
    """
    return {
        backend: load_driver(conf, backend, host, engine_id, setup=setup)
        for backend in conf.enabled_share_backends
    }
