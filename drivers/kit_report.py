"""How the conformance kit reports: a broken contract fails with a message
naming the driver's method and the rule; an operation the driver does not
implement is a skip reported at the driver's method (or class), not at a
line of the kit."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import NoReturn

import pytest
from sharemgr.drivers.base import ShareDriver


def fail(message: str) -> NoReturn:
    # "from None": the message says it all; the driver's exception would only
    # add a second, confusing report.
    raise pytest.fail.Exception(message, pytrace=False) from None


def method_name(driver: ShareDriver, method: str) -> str:
    return f"{type(driver).__name__}.{method}"


def inherits(driver: ShareDriver, method: str) -> bool:
    """The driver keeps the base class's ``method``."""
    return getattr(type(driver), method, None) is getattr(ShareDriver, method, None)


def where(driver: ShareDriver, method: str | None = None) -> tuple[str, int] | None:
    """(file, line) of the driver's ``method``, or of its class when it
    inherits the method from ShareDriver (or none is named)."""
    cls = type(driver)
    if method and not inherits(driver, method):
        fn = getattr(cls, method, None)
        code = None if fn is None else getattr(inspect.unwrap(fn), "__code__", None)
        if code is not None:
            return code.co_filename, code.co_firstlineno
    try:
        return inspect.getsourcefile(cls) or "?", inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None


class DriverSkip(pytest.skip.Exception):  # type: ignore[name-defined]  # pytest's Skipped
    """A skip about the driver: pytest reports it at ``location`` (the
    driver's method) instead of the kit's line that raised it."""

    def __init__(self, reason: str, location: tuple[str, int] | None) -> None:
        super().__init__(reason)
        self.location = location


class SkipLocations:
    """pytest plugin (registered by the kit's autouse fixture): moves a
    DriverSkip's reported location to the driver."""

    NAME = "sharemgr-driver-kit-skips"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        exc = call.excinfo.value if call.excinfo else None
        if (report.skipped and isinstance(exc, DriverSkip) and exc.location
                and isinstance(report.longrepr, tuple)):
            # "Skipped: " is what pytest strips from a skip's reason when it shows it.
            report.longrepr = (exc.location[0], exc.location[1], f"Skipped: {exc.msg}")
        return report


def skip(driver: ShareDriver, method: str | None, reason: str) -> NoReturn:
    raise DriverSkip(reason, where(driver, method))


def unsupported(driver: ShareDriver, method: str) -> NoReturn:
    skip(driver, method, f"{method_name(driver, method)} is not implemented")
