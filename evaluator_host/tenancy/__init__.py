"""Who may do what, and with which limits: workspaces, API keys, quotas, the secrets vault and redaction."""
