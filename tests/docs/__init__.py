"""Tests of the documents' commands, run as printed."""
