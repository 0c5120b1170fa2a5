"""Command-line entry point (placeholder filled below)."""
def main() -> int:
    return 0
