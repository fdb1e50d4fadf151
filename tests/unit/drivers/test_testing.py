"""The conformance kit's skips: an operation a driver does not implement is
a skip (never the driver error a check asks for), named after the driver's
class and method and located at the driver, not at the kit."""

from __future__ import annotations

import inspect

import pytest
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.testing import DriverConformanceTests, DriverSkip, _Kit, build_driver


class NoExtend(DummyDriver):
    extend_share = ShareDriver.extend_share  # type: ignore[assignment]  # the base's: not implemented


class NoAccessNoStats(DummyDriver):
    # Back to the base class's: no access control, reports nothing.
    update_access = ShareDriver.update_access  # type: ignore[assignment]
    get_share_stats = ShareDriver.get_share_stats


class ShrinkNotImplemented(DummyDriver):
    def shrink_share(self, share, new_size, share_server=None):
        raise NotImplementedError("shrink_share")


@pytest.fixture
def kit(tmp_path, request):
    drv = build_driver(request.param, tmp_path, setup=True)
    return _Kit(drv, None)


@pytest.mark.parametrize("kit", [NoExtend], indirect=True)
def test_unimplemented_operation_skips_instead_of_passing_as_a_driver_error(kit):
    # OperationNotSupported is a ShareBackendException too: still a skip.
    with pytest.raises(DriverSkip) as info:
        kit.expect_error("extend_share", kit.share_dict(size=2), 2, None,
                         what="a share the backend never had")
    assert info.value.msg == "NoExtend.extend_share is not implemented"
    # Inherited from the base class: reported at the driver's class.
    assert info.value.location == (__file__, inspect.getsourcelines(NoExtend)[1])


@pytest.mark.parametrize("kit", [ShrinkNotImplemented], indirect=True)
def test_skip_is_located_at_the_drivers_own_method(kit):
    share = kit.create_share(size=3)
    with pytest.raises(DriverSkip) as info:
        kit.ok("shrink_share", share, 2, None, what="a share of size 3 to 2")
    assert info.value.msg == "ShrinkNotImplemented.shrink_share is not implemented"
    code = ShrinkNotImplemented.shrink_share.__code__
    assert info.value.location == (code.co_filename, code.co_firstlineno)


@pytest.mark.parametrize("kit", [NoAccessNoStats], indirect=True)
def test_access_and_stats_left_to_the_base_class_skip(kit):
    """A driver that inherits update_access and get_share_stats: both checks
    skip, naming the method."""
    checks = DriverConformanceTests()
    with pytest.raises(DriverSkip, match=r"^NoAccessNoStats\.update_access is not implemented$"):
        checks.test_update_access_applies_the_full_rule_set_idempotently(kit)
    with pytest.raises(DriverSkip, match=r"^NoAccessNoStats\.get_share_stats reports nothing"):
        checks.test_share_stats_have_the_documented_shape(kit)
