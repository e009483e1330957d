"""The transaction coordinator of the strom broker (KIP-98): transactional ids, two-phase commit."""
