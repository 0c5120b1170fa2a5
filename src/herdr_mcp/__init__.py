"""herdr-mcp: a safe remote control plane between a Web AI and a Herdr workstation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("herdr-mcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
