"""Tests of the project's own files: workflows, flake.nix, scripts, the suite's rules."""
