"""The ``cephfs`` share driver: CephFS subvolumes (doc/cephfs_driver.rst)."""
