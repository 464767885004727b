"""Tournament-based ensemble training: members as traced state of either loop."""
