"""Tests of the browser extension (extension/) in Debian's Chromium."""
