"""Test harness: a local Kubernetes built from Go modules and the project's pytest plugin."""
