"""Release versions: semantic versions that are also PEP 440 versions, spelled one way only.

A release tag is "v" + a version that round-trips: parsed by `packaging` and written back in
semver spelling it gives the same text. That keeps one spelling per version (`1.2.0-rc.1`, never
also `1.2.0-rc1` or `1.2.0rc1`) and refuses what semver and PEP 440 read differently (`1.2.0-1`
is a semver prerelease but a PEP 440 post-release, ordered above 1.2.0). The manifest parser and
discovery both use this rule, so a release the toolchain builds is one the updater can pick.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

_PRE_LABELS = {"a": "alpha", "b": "beta", "rc": "rc"}


def semver_text(version: Version) -> str | None:
    """`version` in semver spelling (`1.2.0`, `1.2.0-rc.1`, `1.2.0-beta.2.dev.3`), or None when
    semver cannot spell it (an epoch, a post-release, a local part, not three release numbers)."""
    if version.epoch or version.post is not None or version.local is not None or len(version.release) != 3:
        return None
    labels: list[str] = []
    if version.pre is not None:
        labels += [_PRE_LABELS[version.pre[0]], str(version.pre[1])]
    if version.dev is not None:
        labels += ["dev", str(version.dev)]
    core = ".".join(str(part) for part in version.release)
    return f"{core}-{'.'.join(labels)}" if labels else core


def release_version(text: str) -> Version | None:
    """The version `text` names if it is a round-tripping release version, else None."""
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return version if semver_text(version) == text else None
