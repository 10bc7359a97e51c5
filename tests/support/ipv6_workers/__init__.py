"""Worker scripts of the IPv6 runtime tests (tests/distributed/test_ipv6_runtime.py)."""
