"""An example sharemgr share driver, shipped as its own distribution."""
