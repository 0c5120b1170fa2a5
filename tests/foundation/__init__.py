"""Tests of the shared foundation: records.py, loopback.py, proxies.py, errors.py."""
