"""What the tests share: harnesses, stand-ins and helpers, each module named for what it holds."""
