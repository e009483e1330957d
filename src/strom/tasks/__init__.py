"""strom.tasks: Decaton-style concurrent, key-ordered processing within a partition."""
