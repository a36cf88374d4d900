"""Runs one test file with pytest under `bazel test`.

Bazel's test protocol is honoured: `TEST_TOTAL_SHARDS`/`TEST_SHARD_INDEX` split the
collected test items round-robin, `TEST_SHARD_STATUS_FILE` is touched to say sharding is
supported, and `XML_OUTPUT_FILE` receives a JUnit report. Plain unittest/absltest test
cases run too, since pytest collects them.
"""

import os
import sys

import pytest

# Exit code pytest uses when a shard collected nothing to run.
_NO_TESTS_COLLECTED = 5


class _ShardPlugin:
    """Keeps every `total`-th collected item, starting at `index`."""

    def __init__(self, index: int, total: int):
        self.index = index
        self.total = total

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        keep = [it for i, it in enumerate(items) if i % self.total == self.index]
        drop = [it for i, it in enumerate(items) if i % self.total != self.index]
        items[:] = keep
        if drop:
            config.hook.pytest_deselected(items=drop)


def main() -> int:
    args = list(sys.argv[1:])
    plugins = []
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    if total > 1:
        status_file = os.environ.get("TEST_SHARD_STATUS_FILE")
        if status_file:
            open(status_file, "a").close()
        plugins.append(_ShardPlugin(int(os.environ["TEST_SHARD_INDEX"]), total))
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args += ["--junitxml", xml]
    args += ["-p", "no:cacheprovider", "-q", "-rfE"]
    code = pytest.main(args, plugins=plugins)
    if code == _NO_TESTS_COLLECTED and total > 1:
        return 0
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
