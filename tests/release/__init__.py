"""Tests of releases (herdr_mcp.release): build, bundle, manifest, signatures, Sigstore."""
