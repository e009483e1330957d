"""Who may connect and what they may do: listeners, TLS, SASL (PLAIN, SCRAM) and the ACL authorizer."""
