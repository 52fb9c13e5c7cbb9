"""The play healer: sessions, pre-flight checks, evaluation → remediation → escalation."""
