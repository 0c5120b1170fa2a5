"""The workstation updater: how a new runtime release reaches a generation (SPEC 6).

An update runs one way through these steps, each in its own module, and stops at the first one
that refuses (it never falls back to an older release):

    discover -> admit -> stage -> install -> probe -> activate

- discover (`discovery`): read the GitHub releases index and pick the single highest release the
  channel admits. It returns a `Candidate` (tag, version, the manifest asset's URL and size) and
  downloads nothing else: not the manifest, not the contract, not a bundle.
- admit: verify the manifest's signatures and identity and decide whether its contract may
  replace the local one, before anything else is downloaded.
- stage: download the admitted assets into a staging job directory (streamed, size-capped,
  sha256-checked).
- install: install the bundle into a new generation venv, without network.
- probe: run `<candidate> version --json` against the target contract.
- activate: start the generation and switch traffic to it through the link's gate.

The tests' loopback HTTPS stand-in for GitHub's releases API is `tests/support/repository_sim.py`, not
part of this package.
`errors` holds the error types, split by who is at fault.

The runtime (`herdr_mcp.runtime`) never imports this package: a running generation does not
update itself.
"""
