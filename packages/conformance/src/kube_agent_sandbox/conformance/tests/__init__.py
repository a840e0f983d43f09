"""The conformance tests, one folder per profile (core, extensions, realnode)."""
