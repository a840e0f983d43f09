"""The local apiserver's audit policy: only the service accounts of one namespace are audited.

A test that records a controller's API calls runs the controller as a service account of
:data:`AUDITED_NAMESPACE` and reads the audit log the cluster writes (``LocalCluster.audit_log``).
"""

from __future__ import annotations

AUDITED_NAMESPACE = "agent-sandbox-audit"
"""Service accounts of this namespace are audited by the local apiserver (see ``audit_log``)."""

AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:{AUDITED_NAMESPACE}"]
- level: None
"""
"""What the local apiserver audits: only requests of the service accounts of
:data:`AUDITED_NAMESPACE` (an identity a test creates there to record a controller's API calls),
so nothing else pays for the audit log."""
